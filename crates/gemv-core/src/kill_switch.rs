//! Process-wide kill switches, PRESENCE-checked: setting the variable to anything (even `0`)
//! turns the feature off. They change which kernel is dispatched, never what is loaded, so an
//! A/B needs no rebuild. Read once per process; functions take them as arguments so both
//! polarities are testable without touching the environment.

use std::sync::OnceLock;

/// Hides the exact-M tiers 5, 6 and 7 (restores the 4/8 dispatch).
pub const NO_EXACT_M_TIERS: &str = "GEMV_NO_EXACT_M_TIERS";
/// Makes width 8 resolve the classic `batch8` instead of `batch8_rt2`.
pub const NO_BATCH8_RT: &str = "GEMV_NO_BATCH8_RT";
/// Forces the exact family everywhere: the fast (tensor-core) family is never dispatched, even
/// when asked for.
pub const EXACT_ONLY: &str = "GEMV_EXACT_ONLY";
/// Ignores the tuned table (`cargo xtask tune`): every device takes the rule's plan, the tiers'
/// own kernels and the exact family for `Auto`.
pub const NO_TUNED_TABLE: &str = "GEMV_NO_TUNED_TABLE";

/// The dispatch features the kill switches control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KillSwitches {
    /// Widths 5, 6 and 7 may be dispatched.
    pub exact_m_tiers: bool,
    /// Width 8 resolves `batch8_rt2` rather than `batch8`.
    pub batch8_register_tiled: bool,
    /// The fast family may be dispatched (where the device has it).
    pub fast_family: bool,
    /// The tuned table may choose plans, kernels and `Auto`'s family.
    pub tuned_table: bool,
}

impl Default for KillSwitches {
    fn default() -> Self {
        Self::ALL_ON
    }
}

impl KillSwitches {
    /// No switch set: every feature on.
    pub const ALL_ON: Self =
        Self { exact_m_tiers: true, batch8_register_tiled: true, fast_family: true, tuned_table: true };

    /// From a presence test, e.g. `|name| std::env::var_os(name).is_some()`.
    pub fn from_presence(is_set: impl Fn(&str) -> bool) -> Self {
        Self {
            exact_m_tiers: !is_set(NO_EXACT_M_TIERS),
            batch8_register_tiled: !is_set(NO_BATCH8_RT),
            fast_family: !is_set(EXACT_ONLY),
            tuned_table: !is_set(NO_TUNED_TABLE),
        }
    }

    /// The process's switches, read from the environment on first use and cached.
    pub fn process() -> Self {
        static SWITCHES: OnceLock<KillSwitches> = OnceLock::new();
        *SWITCHES.get_or_init(|| {
            let switches = Self::from_presence(|name| std::env::var_os(name).is_some());
            tracing::debug!(?switches, "kill switches read");
            switches
        })
    }
}
