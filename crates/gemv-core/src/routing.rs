//! Where a mixture-of-experts layer sends each token: its top-k expert ids, and the same routing
//! seen from the experts' side (which (token, slot) pairs each touched expert computes).
//!
//! Pair `p = t * top_k + s` is slot s of token t: it reads X row t and writes Y row p (Y is
//! `[M][top_k][N]`).

use crate::{CoreError, Result};

/// A validated routing: `ids[t * top_k + s]` is the expert of slot s of token t, every id below
/// the layer's expert count. An id may repeat within a token's slots; each slot gets the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertRouting<'a> {
    ids: &'a [u32],
    m: usize,
    top_k: usize,
    experts: usize,
}

/// One touched expert and the pairs routed to it, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertGroup {
    /// The expert.
    pub expert: usize,
    /// The pairs (`t * top_k + s`) it computes, ascending.
    pub pairs: Vec<usize>,
}

impl<'a> ExpertRouting<'a> {
    /// Checks `m >= 1`, `top_k >= 1`, `ids.len() == m * top_k` and every id `< experts`
    /// ([`CoreError::ExpertOutOfRange`] names the first one that is not).
    pub fn new(ids: &'a [u32], m: usize, top_k: usize, experts: usize) -> Result<Self> {
        for (what, count) in [("tokens", m), ("top_k", top_k), ("experts", experts)] {
            if count == 0 {
                return Err(CoreError::ZeroCount { what });
            }
        }
        let pairs = m.checked_mul(top_k).ok_or(CoreError::SizeOverflow { what: "routing", m, n: top_k, k: 0 })?;
        if ids.len() != pairs {
            return Err(CoreError::LengthMismatch {
                what: "routing",
                expected: pairs,
                found: ids.len(),
                m,
                n: 0,
                k: 0,
            });
        }
        if let Some(p) = ids.iter().position(|&id| id as usize >= experts) {
            return Err(CoreError::ExpertOutOfRange { token: p / top_k, slot: p % top_k, id: ids[p] as u64, experts });
        }
        Ok(Self { ids, m, top_k, experts })
    }

    /// Tokens.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Slots per token.
    pub fn top_k(&self) -> usize {
        self.top_k
    }

    /// The experts the ids index.
    pub fn experts(&self) -> usize {
        self.experts
    }

    /// The ids, token after token.
    pub fn ids(&self) -> &'a [u32] {
        self.ids
    }

    /// (token, slot) pairs: `m * top_k`, Y's rows.
    pub fn pairs(&self) -> usize {
        self.ids.len()
    }

    /// The touched experts, ascending, each with its pairs ascending: what a grouped launch
    /// computes, each expert's weights read once for all of its pairs.
    pub fn groups(&self) -> Vec<ExpertGroup> {
        let mut order: Vec<usize> = (0..self.ids.len()).collect();
        order.sort_by_key(|&p| (self.ids[p], p));
        let mut groups: Vec<ExpertGroup> = Vec::new();
        for p in order {
            let expert = self.ids[p] as usize;
            match groups.last_mut() {
                Some(group) if group.expert == expert => group.pairs.push(p),
                _ => groups.push(ExpertGroup { expert, pairs: vec![p] }),
            }
        }
        groups
    }

    /// The most pairs any one expert computes (at most M where no token repeats an id).
    pub fn busiest_expert(&self) -> usize {
        self.groups().iter().map(|group| group.pairs.len()).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_gather_each_touched_experts_pairs_in_order() {
        // Token 0 -> experts 3, 1; token 1 -> 1, 1 (a repeated id); token 2 -> 0, 3.
        let ids = [3, 1, 1, 1, 0, 3];
        let routing = ExpertRouting::new(&ids, 3, 2, 4).expect("valid");
        assert_eq!(routing.pairs(), 6);
        assert_eq!(
            routing.groups(),
            vec![
                ExpertGroup { expert: 0, pairs: vec![4] },
                ExpertGroup { expert: 1, pairs: vec![1, 2, 3] },
                ExpertGroup { expert: 3, pairs: vec![0, 5] },
            ]
        );
        assert_eq!(routing.busiest_expert(), 3);
    }

    #[test]
    fn bad_routings_are_typed_errors_naming_the_slot() {
        assert_eq!(
            ExpertRouting::new(&[0, 1, 2, 7], 2, 2, 4),
            Err(CoreError::ExpertOutOfRange { token: 1, slot: 1, id: 7, experts: 4 })
        );
        assert!(matches!(
            ExpertRouting::new(&[0, 1, 2], 2, 2, 4),
            Err(CoreError::LengthMismatch { what: "routing", expected: 4, found: 3, .. })
        ));
        assert_eq!(ExpertRouting::new(&[], 0, 2, 4), Err(CoreError::ZeroCount { what: "tokens" }));
        assert_eq!(ExpertRouting::new(&[], 1, 0, 4), Err(CoreError::ZeroCount { what: "top_k" }));
    }
}
