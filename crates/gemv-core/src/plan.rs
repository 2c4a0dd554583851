//! A dispatch plan for ANY m >= 1: launches that cover every row exactly once, using only present,
//! allowed tiers no wider than the caller's cap, so no caller needs its own fallback.
//!
//! Rule: if a tier covers the remaining rows, take the narrowest one ([`narrowest_tier`], the one
//! tier decision) and stop; otherwise fill the widest available tier completely and repeat.
//! (m = 9 with cap 8 is batch8 + gemv; with cap 32 it is one batch16 launch.)

use crate::tiers::{FAST_TIERS, TIERS, Tier, narrowest_tier};
use crate::{CoreError, Result};

/// Which of [`TIERS`] are present, as a bit set (bit i = `TIERS[i]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TierMask(u16);

impl TierMask {
    /// Every tier present.
    pub const ALL: Self = Self((1 << TIERS.len()) - 1);
    /// Nothing present.
    pub const NONE: Self = Self(0);

    /// From raw bits; bits beyond [`TIERS`] are ignored.
    pub fn from_bits(bits: u16) -> Self {
        Self(bits & Self::ALL.0)
    }

    /// The raw bits.
    pub fn bits(self) -> u16 {
        self.0
    }

    /// Whether `TIERS[index]` is present.
    pub fn contains(self, index: usize) -> bool {
        index < TIERS.len() && self.0 & (1 << index) != 0
    }

    /// With `TIERS[index]` set.
    pub fn with(self, index: usize) -> Self {
        Self::from_bits(self.0 | (1 << index))
    }

    fn describe(self, tiers: &[Tier]) -> String {
        let widths: Vec<String> =
            (0..tiers.len()).filter(|&i| self.contains(i)).map(|i| tiers[i].width.to_string()).collect();
        if widths.is_empty() { "none".into() } else { widths.join(",") }
    }
}

/// One launch of a plan: `rows` rows of X starting at `row_offset`, on tier `tier` of the plan's
/// table ([`TIERS`] for [`dispatch_plan`], [`FAST_TIERS`] for [`fast_dispatch_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Launch {
    /// Index into the plan's tier table.
    pub tier: usize,
    /// First row of X and Y this launch covers.
    pub row_offset: usize,
    /// Rows it covers (<= the tier's width).
    pub rows: usize,
}

/// Plans `m` rows over the `present` tiers of width <= `width_cap`, honouring `exact_m`.
pub fn dispatch_plan(m: usize, width_cap: usize, present: TierMask, exact_m: bool) -> Result<Vec<Launch>> {
    plan_over(&TIERS, m, width_cap, present, exact_m)
}

/// Plans `m` rows over the `present` fast tiers ([`FAST_TIERS`], bit i = `FAST_TIERS[i]`): the
/// same rule. Every token's bits are independent of the split (the fast family is
/// batch-invariant), so any plan gives each token the same output.
pub fn fast_dispatch_plan(m: usize, present: TierMask) -> Result<Vec<Launch>> {
    plan_over(&FAST_TIERS, m, FAST_TIERS[FAST_TIERS.len() - 1].width, present, true)
}

fn plan_over(tiers: &[Tier], m: usize, width_cap: usize, present: TierMask, exact_m: bool) -> Result<Vec<Launch>> {
    if width_cap == 0 {
        return Err(CoreError::InvalidWidthCap { cap: width_cap });
    }
    let available = |i: usize| present.contains(i) && tiers[i].width <= width_cap;
    let Some(widest) = (0..tiers.len()).rev().find(|&i| available(i) && tiers[i].allowed(exact_m)) else {
        return Err(CoreError::NoTierAvailable { m, cap: width_cap, present: present.describe(tiers) });
    };
    let mut launches = Vec::new();
    let mut row_offset = 0;
    while row_offset < m {
        let remaining = m - row_offset;
        match narrowest_tier(tiers, remaining, available, exact_m) {
            Some(tier) => {
                launches.push(Launch { tier, row_offset, rows: remaining });
                row_offset = m;
            }
            None => {
                let rows = tiers[widest].width;
                launches.push(Launch { tier: widest, row_offset, rows });
                row_offset += rows;
            }
        }
    }
    Ok(launches)
}
