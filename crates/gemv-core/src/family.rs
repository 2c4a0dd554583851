//! Which kernel family serves a launch: the policy, in one place.
//!
//! The exact family computes the exact contract: the same bits on every backend, tier and M, at
//! a floor of one FFMA per weight per token (issue-bound on fast memories beyond a few tokens).
//! The fast family (CUDA, sm_80+) multiplies on tensor cores: bounded against the f64 reference
//! instead of bit-equal to the exact family, and batch-invariant (a token's bits do not depend on
//! M, on the tier or on the other tokens) for a given device and build.
//!
//! `Auto` takes the family the device's tuned table names (`cargo xtask tune`: the family its
//! measurements found faster), one family for every M so that a token's bits never depend on how
//! many tokens share its launch; where the table knows no such device, the exact family, so that
//! the result is the host's and wgpu's bit for bit. `Exact` and `Fast` are one option away.
//! `GEMV_EXACT_ONLY` forces the exact family always.

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

/// The family that serves a call on a device where the fast family is `fast_available`, for
/// `choice`; `preferred` is what `Auto` takes there (the device's tuned family, or
/// [`Family::Exact`] where it has none).
///
/// `GEMV_EXACT_ONLY` (`switches.fast_family == false`) wins over everything; `Fast` without the
/// family on the device is [`CoreError::FamilyUnavailable`]; `Auto` preferring a family the device
/// lacks takes the exact one.
pub fn select_family(
    choice: FamilyChoice,
    fast_available: bool,
    switches: KillSwitches,
    preferred: Family,
) -> Result<Family> {
    if !switches.fast_family {
        return Ok(Family::Exact);
    }
    match choice {
        FamilyChoice::Exact => Ok(Family::Exact),
        FamilyChoice::Fast if fast_available => Ok(Family::Fast),
        FamilyChoice::Fast => Err(CoreError::FamilyUnavailable { family: Family::Fast.name() }),
        FamilyChoice::Auto if preferred == Family::Fast && fast_available => Ok(Family::Fast),
        FamilyChoice::Auto => Ok(Family::Exact),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: KillSwitches = KillSwitches::ALL_ON;

    #[test]
    fn the_kill_switch_forces_exact_whatever_is_asked() {
        let off = KillSwitches { fast_family: false, ..ON };
        for choice in [FamilyChoice::Auto, FamilyChoice::Exact, FamilyChoice::Fast] {
            for preferred in [Family::Exact, Family::Fast] {
                assert_eq!(select_family(choice, true, off, preferred).ok(), Some(Family::Exact));
            }
        }
        assert_eq!(select_family(FamilyChoice::Fast, true, ON, Family::Exact).ok(), Some(Family::Fast));
    }

    #[test]
    fn auto_takes_the_preferred_family_where_the_device_has_it() {
        assert_eq!(select_family(FamilyChoice::Auto, true, ON, Family::Fast).ok(), Some(Family::Fast));
        assert_eq!(select_family(FamilyChoice::Auto, false, ON, Family::Fast).ok(), Some(Family::Exact));
        assert_eq!(select_family(FamilyChoice::Auto, true, ON, Family::Exact).ok(), Some(Family::Exact));
        assert_eq!(select_family(FamilyChoice::Exact, true, ON, Family::Fast).ok(), Some(Family::Exact));
    }

    #[test]
    fn fast_without_the_family_is_a_typed_error() {
        match select_family(FamilyChoice::Fast, false, ON, Family::Fast) {
            Err(CoreError::FamilyUnavailable { family }) => assert_eq!(family, "fast"),
            other => panic!("expected FamilyUnavailable, got {other:?}"),
        }
        assert_eq!(select_family(FamilyChoice::Exact, false, ON, Family::Fast).ok(), Some(Family::Exact));
    }
}
