//! A routed mixture-of-experts layer as one call: M tokens, each through its top-k experts of a
//! stack, `Y[t][s] = W[ids[t][s]] X[t]`, every output the exact contract of its one expert (so a
//! grouped launch equals a single-expert launch of each pair, bit for bit).
//!
//! X is `[M][K]` and Y `[M][top_k][N]`, contiguous.

use crate::{CoreError, ExpertRouting, FamilyChoice, Nvfp4ExpertsView, Result, gemv_contract};

/// One grouped call: tokens, slots per token, the family policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupedCall {
    m: usize,
    top_k: usize,
    family: FamilyChoice,
}

impl GroupedCall {
    /// `m` tokens, `top_k` experts each, the default family policy.
    pub fn new(m: usize, top_k: usize) -> Self {
        Self { m, top_k, family: FamilyChoice::Auto }
    }

    /// The family policy for this call.
    pub fn with_family(self, family: FamilyChoice) -> Self {
        Self { family, ..self }
    }

    /// Tokens.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Slots per token.
    pub fn top_k(&self) -> usize {
        self.top_k
    }

    /// The family policy.
    pub fn family(&self) -> FamilyChoice {
        self.family
    }

    /// Validates `ids` (`[M][top_k]`) against this call and `experts` experts.
    pub fn routing<'a>(&self, ids: &'a [u32], experts: usize) -> Result<ExpertRouting<'a>> {
        ExpertRouting::new(ids, self.m, self.top_k, experts)
    }

    /// Elements of X (`M K`) and of Y (`M top_k N`) over `n` x `k` experts, overflow checked.
    pub fn elements(&self, n: usize, k: usize) -> Result<(usize, usize)> {
        let overflow = |what| CoreError::SizeOverflow { what, m: self.m, n, k };
        let x = self.m.checked_mul(k).ok_or_else(|| overflow("x"))?;
        let y = self.m.checked_mul(self.top_k).and_then(|p| p.checked_mul(n)).ok_or_else(|| overflow("y"))?;
        Ok((x, y))
    }
}

/// The operands of a grouped launch, in the order [`GroupedCall::check_operands`] takes their
/// byte lengths: X, the stacked packed weights, the stacked scales, the f32 global scales, the u32
/// routing, Y.
pub const GROUPED_OPERANDS: [&str; 6] = ["x", "packed", "scales", "global_scales", "routing", "y"];

/// The byte alignment each operand of a grouped launch needs, in [`GROUPED_OPERANDS`] order: bf16
/// X and Y 2, the byte codes 1, the f32 global scales and u32 routing 4.
pub const GROUPED_ALIGNMENTS: [usize; 6] = [2, 1, 1, 4, 4, 2];

impl GroupedCall {
    /// Checks a grouped launch of this call over `experts` experts of `n` x `k` (N, K valid; E,
    /// M and top-k at least 1) against the byte lengths of its operands
    /// ([`GROUPED_OPERANDS`] order): each holds what the launch needs
    /// ([`CoreError::RangeTooSmall`]), and the global scales are exactly one f32 or `experts`
    /// ([`CoreError::LengthMismatch`]). Every grouped launch path checks through this.
    pub fn check_operands(&self, experts: usize, n: usize, k: usize, lens: [usize; 6]) -> Result<()> {
        crate::validate_weight_shape(n, k)?;
        for (what, count) in [("experts", experts), ("tokens", self.m), ("top_k", self.top_k)] {
            if count == 0 {
                return Err(CoreError::ZeroCount { what });
            }
        }
        let (m, overflow) = (self.m, |what| CoreError::SizeOverflow { what, m: self.m, n, k });
        let (x, y) = self.elements(n, k)?;
        let weights = |per_expert: usize| experts.checked_mul(per_expert).ok_or_else(|| overflow("experts' weights"));
        let pairs = m.checked_mul(self.top_k).ok_or_else(|| overflow("routing"))?;
        let needed = [2 * x, weights(n * k / 2)?, weights(n * k / crate::GROUP_SIZE)?, 4, 4 * pairs, 2 * y];
        for ((what, len), needed) in GROUPED_OPERANDS.into_iter().zip(lens).zip(needed) {
            if len < needed {
                return Err(CoreError::RangeTooSmall { what, len, needed, m, n, k });
            }
        }
        if lens[3] != 4 && lens[3] != 4 * experts {
            return Err(CoreError::LengthMismatch {
                what: "global_scales",
                expected: experts,
                found: lens[3] / 4,
                m,
                n,
                k,
            });
        }
        Ok(())
    }
}

/// The exact contract of a grouped call: for each touched expert, its pairs' X rows through
/// [`gemv_contract`], written to their Y rows. `x: [M][K]`, `y: [M][top_k][N]`; lengths checked.
pub fn grouped_contract(
    experts: &Nvfp4ExpertsView<'_>,
    x: &[u16],
    routing: &ExpertRouting<'_>,
    y: &mut [u16],
    threads: usize,
) -> Result<()> {
    let (n, k) = (experts.n(), experts.k());
    if routing.experts() != experts.experts() {
        return Err(CoreError::LengthMismatch {
            what: "routing experts",
            expected: experts.experts(),
            found: routing.experts(),
            m: routing.m(),
            n,
            k,
        });
    }
    let (x_len, y_len) = GroupedCall::new(routing.m(), routing.top_k()).elements(n, k)?;
    for (what, expected, found) in [("x", x_len, x.len()), ("y", y_len, y.len())] {
        if found != expected {
            return Err(CoreError::LengthMismatch { what, expected, found, m: routing.m(), n, k });
        }
    }
    for group in routing.groups() {
        let w = experts.expert(group.expert)?;
        let gathered: Vec<u16> =
            group.pairs.iter().flat_map(|&p| x[(p / routing.top_k()) * k..][..k].iter().copied()).collect();
        let mut out = vec![0u16; group.pairs.len() * n];
        gemv_contract(&w, &gathered, group.pairs.len(), &mut out, threads)?;
        for (&p, row) in group.pairs.iter().zip(out.chunks_exact(n)) {
            y[p * n..(p + 1) * n].copy_from_slice(row);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Nvfp4Experts, Nvfp4Matrix};

    #[test]
    fn each_pair_gets_its_experts_single_launch_output() {
        let (n, k) = (5, 64);
        let matrices: Vec<Nvfp4Matrix> = (0..3u8)
            .map(|e| {
                let packed = (0..n * k / 2).map(|i| (i as u8).wrapping_mul(37).wrapping_add(e * 11)).collect();
                Nvfp4Matrix::from_parts(packed, vec![0x30 + e; n * k / 16], 1.0 + e as f32, n, k).expect("valid")
            })
            .collect();
        let experts = Nvfp4Experts::stack(&matrices).expect("stack");
        let x: Vec<u16> = (0..2 * k).map(|i| 0x3f80 + (i as u16 % 97)).collect();
        let ids = [2, 0, 0, 0];
        let call = GroupedCall::new(2, 2);
        let routing = call.routing(&ids, 3).expect("routing");
        let mut y = vec![0u16; 4 * n];
        grouped_contract(&experts.view(), &x, &routing, &mut y, 2).expect("grouped");
        for (p, &e) in ids.iter().enumerate() {
            let mut alone = vec![0u16; n];
            gemv_contract(&matrices[e as usize].view(), &x[(p / 2) * k..][..k], 1, &mut alone, 1).expect("alone");
            assert_eq!(&y[p * n..(p + 1) * n], &alone[..], "pair {p}");
        }
        assert_ne!(y[..n], y[n..2 * n], "different experts differ");
        let mut short = vec![0u16; 4 * n - 1];
        assert!(grouped_contract(&experts.view(), &x, &routing, &mut short, 1).is_err());
    }
}
