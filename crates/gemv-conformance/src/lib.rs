//! gemv-conformance: the verification gates, written once over `&dyn GpuBackend`, for the tests of
//! every backend crate and for tools that prove a backend (`gemv check`, `gemv bench`); no engine
//! depends on it.
//!
//! Every backend runs it (tests through [`conformance_tests!`](crate::conformance_tests), users
//! through `gemv check`). Exact gates compare with the host contract bit for bit and print the
//! first mismatches as expected vs found.
//!
//! On the host reference backend most gates compare the contract with itself: they check the
//! plumbing (buffers, offsets, dispatch), not the arithmetic. Its independent checks are gate 3
//! (the f64 reference), gate 6 (a closed-form oracle) and the codec fixtures produced by
//! ml_dtypes; [`Gate::has_independent_oracle`] says which is which.
#![warn(missing_docs)]

mod data;
mod gates;
mod grouped_expected;
mod large;
pub mod skip;

pub use data::{
    EXTREME_ROWS, GLOBAL_SCALE, Lcg, activations, extreme_activations, matrix, matrix_with_scales, order_sensitive,
    overflowing_product, staged_overflow,
};
pub use gates::f32_y::fast_f32_failure;
pub use gates::fast::{RowsLaunch, fast_bound_failure, invariance_failure, pairs_bound_failure};
pub use grouped_expected::GroupedExpected;
pub use large::{LARGE_SHAPE, weights_past_2_gib};

use gemv_backend::GpuBackend;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The verification gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gate {
    /// 1: every tier at every m <= width equals the M=1 kernel run m times and the host contract.
    TierAgreement,
    /// 2: `batch8_rt2` equals `batch8` at every m <= 8.
    RegisterTiled,
    /// 3: within the derived bound of the independent f64 reference.
    F64Bound,
    /// 4: permuting X's rows permutes Y's rows, bit for bit.
    RowPermutation,
    /// 5: rows >= m and guard bytes around every buffer are untouched.
    Guards,
    /// 6: one-hot X gives `bf16(e2m1 * e4m3 * global_scale)` exactly.
    Impulse,
    /// 7: odd shapes, every M in 1..=32.
    OddShapes,
    /// 8: bad input gives typed errors or the documented NaN/Inf results, never a panic.
    BadInput,
    /// 9: every E4M3 scale code, every class of global scale, activations from subnormal to huge.
    SpecialValues,
    /// 10: the fast family within its bound of the f64 reference (odd shapes, every scale code,
    /// every class of global scale). Only where the backend has the family.
    FastBound,
    /// 11: the fast family's batch invariance (a token alone = inside any M, with any
    /// neighbours), repeatability, rows past M, M past the width. Only where it has the family.
    FastInvariance,
    /// 12: a routed mixture-of-experts layer: every (token, slot) output equals its expert's
    /// host contract, through the grouped launch where the backend offers one and through one
    /// launch per pair everywhere; an expert id past E is a typed error; nothing outside Y is
    /// written.
    GroupedExperts,
}

impl Gate {
    /// All gates in order.
    pub const ALL: [Gate; 12] = [
        Gate::TierAgreement,
        Gate::RegisterTiled,
        Gate::F64Bound,
        Gate::RowPermutation,
        Gate::Guards,
        Gate::Impulse,
        Gate::OddShapes,
        Gate::BadInput,
        Gate::SpecialValues,
        Gate::FastBound,
        Gate::FastInvariance,
        Gate::GroupedExperts,
    ];

    /// The gate's number (1-based).
    pub fn number(self) -> usize {
        Self::ALL.iter().position(|&g| g == self).map_or(0, |i| i + 1)
    }

    /// Short name for tables.
    pub fn title(self) -> &'static str {
        match self {
            Gate::TierAgreement => "tiers = M1 x m = host",
            Gate::RegisterTiled => "batch8_rt2 = batch8",
            Gate::F64Bound => "f64 reference bound",
            Gate::RowPermutation => "row permutation",
            Gate::Guards => "guards and dead rows",
            Gate::Impulse => "impulse oracle",
            Gate::OddShapes => "odd shapes, M 1..=32",
            Gate::BadInput => "bad input",
            Gate::SpecialValues => "special values",
            Gate::FastBound => "fast family: f64 bound",
            Gate::FastInvariance => "fast family: batch invariance",
            Gate::GroupedExperts => "grouped experts = host",
        }
    }

    /// Whether the gate's expected values come from something other than the host contract (the
    /// f64 reference, a closed-form oracle). On the host reference backend only these gates
    /// check arithmetic; the others compare the contract with itself (plumbing).
    pub fn has_independent_oracle(self) -> bool {
        matches!(self, Gate::F64Bound | Gate::Impulse | Gate::FastBound)
    }

    /// Whether the gate checks the fast family, which only some backends have: there it checks
    /// nothing where the backend lacks the family, and says so.
    pub fn is_fast_family(self) -> bool {
        matches!(self, Gate::FastBound | Gate::FastInvariance)
    }
}

/// One checked case of a gate.
#[derive(Debug, Clone, PartialEq)]
pub struct GateResult {
    /// Which gate.
    pub gate: Gate,
    /// The case (shape, kernel, m).
    pub case: String,
    /// None when it passed, else what differed.
    pub failure: Option<String>,
}

impl GateResult {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

/// Runs one gate; a panic inside the backend becomes a failed case, not a crash.
pub fn run_gate(backend: &dyn GpuBackend, gate: Gate) -> Vec<GateResult> {
    let outcome = catch_unwind(AssertUnwindSafe(|| gates::run(backend, gate)));
    outcome.unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        vec![GateResult { gate, case: "whole gate".into(), failure: Some(format!("panicked: {message}")) }]
    })
}

/// Runs every gate, reporting each result to `progress` as it completes.
pub fn run_all(backend: &dyn GpuBackend, progress: &mut dyn FnMut(&GateResult)) -> Vec<GateResult> {
    let mut all = Vec::new();
    for gate in Gate::ALL {
        for result in run_gate(backend, gate) {
            progress(&result);
            all.push(result);
        }
    }
    all
}

/// Runs `gate` and panics with every failed case (for `#[test]`s).
pub fn assert_gate(backend: &dyn GpuBackend, gate: Gate) {
    let results = run_gate(backend, gate);
    if results.is_empty() && gate.is_fast_family() {
        eprintln!(
            "backend {}: gate {} ({}) not applicable: no fast-family kernel resolves here (CUDA sm_80+ and the \
             emulator have them)",
            backend.name(),
            gate.number(),
            gate.title()
        );
        return;
    }
    assert!(!results.is_empty(), "gate {} checked nothing", gate.number());
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| r.failure.as_ref().map(|f| format!("  [{}] {}: {f}", r.gate.number(), r.case)))
        .collect();
    assert!(
        failures.is_empty(),
        "backend {}: gate {} ({}) failed {} of {} cases:\n{}",
        backend.name(),
        gate.number(),
        gate.title(),
        failures.len(),
        results.len(),
        failures.join("\n")
    );
    eprintln!(
        "backend {}: gate {} ({}): {} cases passed{}",
        backend.name(),
        gate.number(),
        gate.title(),
        results.len(),
        plumbing_note(backend, gate).map_or(String::new(), |note| format!(" ({note})"))
    );
}

/// What a passing `gate` means on `backend` when it proves nothing about the arithmetic: on the
/// host reference, a gate without an independent oracle compares the contract with itself.
pub fn plumbing_note(backend: &dyn GpuBackend, gate: Gate) -> Option<&'static str> {
    (backend.device_info().kind == gemv_backend::DeviceKind::Reference && !gate.has_independent_oracle())
        .then_some("plumbing only: this backend is the contract these cases compare with")
}

/// Expands to one `#[test]` per gate for the backend `$make()` returns (`Option<B>` where
/// `B: GpuBackend`; `None` means skipped: the maker reports it through [`skip::skip`]).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@gate $make, gate1_tier_agreement, TierAgreement);
        $crate::conformance_tests!(@gate $make, gate2_register_tiled, RegisterTiled);
        $crate::conformance_tests!(@gate $make, gate3_f64_bound, F64Bound);
        $crate::conformance_tests!(@gate $make, gate4_row_permutation, RowPermutation);
        $crate::conformance_tests!(@gate $make, gate5_guards, Guards);
        $crate::conformance_tests!(@gate $make, gate6_impulse, Impulse);
        $crate::conformance_tests!(@gate $make, gate7_odd_shapes, OddShapes);
        $crate::conformance_tests!(@gate $make, gate8_bad_input, BadInput);
        $crate::conformance_tests!(@gate $make, gate9_special_values, SpecialValues);
        $crate::conformance_tests!(@gate $make, gate10_fast_bound, FastBound);
        $crate::conformance_tests!(@gate $make, gate11_fast_invariance, FastInvariance);
        $crate::conformance_tests!(@gate $make, gate12_grouped_experts, GroupedExperts);
    };
    (@gate $make:expr, $name:ident, $gate:ident) => {
        #[test]
        fn $name() {
            if let Some(backend) = $make() {
                $crate::assert_gate(&backend, $crate::Gate::$gate);
            }
        }
    };
}
