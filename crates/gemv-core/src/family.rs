//! Which kernel family serves a launch: the policy, in one place.
//!
//! The exact family computes the exact contract: the same bits on every backend, tier and M, at
//! a floor of one FFMA per weight per token (issue-bound on fast memories beyond a few tokens).
//! The fast family (CUDA, sm_80+) multiplies on tensor cores: bounded against the f64 reference
//! instead of bit-equal to the exact family, and batch-invariant (a token's bits do not depend on
//! M, on the tier or on the other tokens) for a given device and build.
//!
//! `Auto` keeps the exact family, so that the default result on CUDA is the host's and wgpu's bit
//! for bit: [`FAST_FAMILY_BY_DEFAULT`] is the switch that turns the threshold policy on, and
//! `Fast` is opt-in. `GEMV_EXACT_ONLY` forces the exact family always.

use crate::{CoreError, KillSwitches, Result};

/// A kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// The exact contract, bit-identical across backends, tiers and M.
    Exact,
    /// Tensor cores: bounded against the f64 reference, batch-invariant; CUDA sm_80+ only.
    Fast,
}

impl Family {
    /// `exact` or `fast`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Exact => "exact",
            Family::Fast => "fast",
        }
    }
}

/// What a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FamilyChoice {
    /// The policy decides ([`select_family`]).
    #[default]
    Auto,
    /// Always the exact family.
    Exact,
    /// The fast family; an error where the device lacks it.
    Fast,
}

/// Asking for one family by name.
impl From<Family> for FamilyChoice {
    fn from(family: Family) -> Self {
        match family {
            Family::Exact => FamilyChoice::Exact,
            Family::Fast => FamilyChoice::Fast,
        }
    }
}

/// Whether `Auto` may pick the fast family. Off: the default keeps the exact contract's bits.
pub const FAST_FAMILY_BY_DEFAULT: bool = false;

/// With the policy on, `Auto` picks the fast family from this M (the exact family's issue model
/// on H200 falls below 70% from M = 2; a threshold of 1 would make every M batch-invariant).
pub const FAST_FAMILY_FROM_M: usize = 2;

/// The family that serves `m` tokens on a device where the fast family is `fast_available`.
///
/// `GEMV_EXACT_ONLY` (`switches.fast_family == false`) wins over everything; `Fast` without the
/// family on the device is [`CoreError::FamilyUnavailable`].
pub fn select_family(m: usize, choice: FamilyChoice, fast_available: bool, switches: KillSwitches) -> Result<Family> {
    select_family_with(m, choice, fast_available, switches, FAST_FAMILY_BY_DEFAULT)
}

/// [`select_family`] with the default policy given (so both settings are testable).
pub fn select_family_with(
    m: usize,
    choice: FamilyChoice,
    fast_available: bool,
    switches: KillSwitches,
    fast_by_default: bool,
) -> Result<Family> {
    if !switches.fast_family {
        return Ok(Family::Exact);
    }
    match choice {
        FamilyChoice::Exact => Ok(Family::Exact),
        FamilyChoice::Fast if fast_available => Ok(Family::Fast),
        FamilyChoice::Fast => Err(CoreError::FamilyUnavailable { family: Family::Fast.name() }),
        FamilyChoice::Auto if fast_by_default && fast_available && m >= FAST_FAMILY_FROM_M => Ok(Family::Fast),
        FamilyChoice::Auto => Ok(Family::Exact),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: KillSwitches = KillSwitches { exact_m_tiers: true, batch8_register_tiled: true, fast_family: true };

    #[test]
    fn the_kill_switch_forces_exact_whatever_is_asked() {
        let off = KillSwitches { fast_family: false, ..ON };
        for choice in [FamilyChoice::Auto, FamilyChoice::Exact, FamilyChoice::Fast] {
            for by_default in [false, true] {
                assert_eq!(select_family_with(8, choice, true, off, by_default).ok(), Some(Family::Exact));
            }
        }
        assert_eq!(select_family_with(8, FamilyChoice::Fast, true, ON, false).ok(), Some(Family::Fast));
    }

    #[test]
    fn auto_follows_the_threshold_only_when_the_policy_is_on() {
        for m in 1..=40 {
            let expected = if m >= FAST_FAMILY_FROM_M { Family::Fast } else { Family::Exact };
            assert_eq!(select_family_with(m, FamilyChoice::Auto, true, ON, true).ok(), Some(expected), "m = {m}");
            assert_eq!(select_family_with(m, FamilyChoice::Auto, false, ON, true).ok(), Some(Family::Exact));
            assert_eq!(select_family_with(m, FamilyChoice::Auto, true, ON, false).ok(), Some(Family::Exact));
        }
        assert_eq!(select_family(8, FamilyChoice::Auto, true, ON).ok(), Some(Family::Exact), "off by default");
    }

    #[test]
    fn fast_without_the_family_is_a_typed_error() {
        match select_family(4, FamilyChoice::Fast, false, ON) {
            Err(CoreError::FamilyUnavailable { family }) => assert_eq!(family, "fast"),
            other => panic!("expected FamilyUnavailable, got {other:?}"),
        }
        assert_eq!(select_family(4, FamilyChoice::Exact, false, ON).ok(), Some(Family::Exact));
    }
}
