//! The gate implementations, one concern per file, and what they share: the host contract as the
//! expected value, the diff that prints expected vs found, the case recorder.
//!
//! The data is chosen to reach every path a kernel has: K % 32 != 0 (rows not 16-byte aligned),
//! G = K / 16 above 64 with G mod 64 in both halves of a pass (K = 800, 1552: a kernel that drops
//! the second half of its partials in the last pass fails), N not a multiple of anything, X and
//! the weights misaligned together and alone, every kernel forced on the odd shapes, and every
//! E4M3 scale code, global scales of every class and activations from subnormal to 2^100.

mod agreement;
mod bad_input;
mod bound;
pub(super) mod f32_y;
pub(super) mod fast;
mod grouped;
mod guards;
mod impulse;
mod permutation;
mod shapes;
mod strides;
mod values;

use super::{Gate, GateResult};
use gemv_backend::{DeviceMatrix, Error, GpuBackend, KernelHandle, ResolvedTiers, Result};
use gemv_core::codec::bf16_to_f32;
use gemv_core::{
    FamilyChoice, GemvCall, GroupedCall, KillSwitches, MODULE_NAME, Nvfp4Matrix, gemv_contract, host_threads,
};

/// The exact family's widest tier: the most tokens the gates run through one plan case.
const CAP: usize = gemv_core::WIDEST_TIER;

/// An exact-family call of `m` contiguous tokens: the gates run every backend through
/// `DeviceMatrix::call`, the engine paths' one planning step.
fn exact(m: usize) -> GemvCall {
    GemvCall::new(m).with_family(FamilyChoice::Exact)
}

/// An exact-family grouped call of `m` tokens, `top_k` experts each.
fn exact_grouped(m: usize, top_k: usize) -> GroupedCall {
    GroupedCall::new(m, top_k).with_family(FamilyChoice::Exact)
}

pub(super) fn run(backend: &dyn GpuBackend, gate: Gate) -> Vec<GateResult> {
    let mut cases = Cases { gate, results: Vec::new() };
    match gate {
        Gate::TierAgreement => {
            agreement::tier_agreement(backend, &mut cases);
            agreement::ring_segments(backend, &mut cases);
        }
        Gate::RegisterTiled => agreement::register_tiled(backend, &mut cases),
        Gate::F64Bound => bound::f64_bound(backend, &mut cases),
        Gate::RowPermutation => permutation::row_permutation(backend, &mut cases),
        Gate::Guards => {
            guards::guards(backend, &mut cases);
            guards::shared_buffer(backend, &mut cases);
            strides::exact_strides(backend, &mut cases);
            f32_y::exact_f32_y(backend, &mut cases);
        }
        Gate::Impulse => impulse::impulse(backend, &mut cases),
        Gate::OddShapes => shapes::odd_shapes(backend, &mut cases),
        Gate::BadInput => bad_input::bad_input(backend, &mut cases),
        Gate::SpecialValues => values::special_values(backend, &mut cases),
        Gate::FastBound => {
            fast::fast_bound(backend, &mut cases);
            f32_y::fast_f32_y(backend, &mut cases);
        }
        Gate::FastInvariance => fast::fast_invariance(backend, &mut cases),
        Gate::GroupedExperts => grouped::grouped_experts(backend, &mut cases),
    }
    cases.results
}

/// Uploads `w` (N x K), or records the failure as the case `N=.. K=.. upload` and returns `None`.
fn upload<'b>(
    backend: &'b dyn GpuBackend,
    w: &Nvfp4Matrix,
    cases: &mut Cases,
) -> Option<DeviceMatrix<&'b dyn GpuBackend>> {
    let (n, k) = (w.view().n(), w.view().k());
    DeviceMatrix::upload(backend, &w.view())
        .map_err(|error| cases.record(format!("N={n} K={k} upload"), Err(error)))
        .ok()
}

struct Cases {
    gate: Gate,
    results: Vec<GateResult>,
}

impl Cases {
    /// Records a case: `Ok(None)` passed, `Ok(Some(why))` or `Err` failed.
    fn record(&mut self, case: impl Into<String>, outcome: Result<Option<String>>) {
        let failure = match outcome {
            Ok(failure) => failure,
            Err(error) => Some(format!("error: {error}")),
        };
        self.results.push(GateResult { gate: self.gate, case: case.into(), failure });
    }
}

/// The host contract's output: what every backend must write.
fn host(w: &Nvfp4Matrix, x: &[u16], m: usize) -> Vec<u16> {
    let mut y = vec![0u16; m * w.n()];
    gemv_contract(&w.view(), x, m, &mut y, host_threads()).expect("suite shapes are valid");
    y
}

/// The first few differing outputs as `Y[t][n]: expected .. found ..`, or None when equal.
fn diff(expected: &[u16], found: &[u16], n: usize) -> Option<String> {
    if expected.len() != found.len() {
        return Some(format!("expected {} outputs, found {}", expected.len(), found.len()));
    }
    let bad: Vec<usize> = (0..expected.len()).filter(|&i| expected[i] != found[i]).collect();
    if bad.is_empty() {
        return None;
    }
    let shown: Vec<String> = bad
        .iter()
        .take(3)
        .map(|&i| {
            format!(
                "Y[{}][{}]: expected {:#06x} ({}), found {:#06x} ({})",
                i / n,
                i % n,
                expected[i],
                bf16_to_f32(expected[i]),
                found[i],
                bf16_to_f32(found[i])
            )
        })
        .collect();
    Some(format!("{} of {} outputs differ; {}", bad.len(), expected.len(), shown.join("; ")))
}

fn lookup(backend: &dyn GpuBackend, name: &str) -> KernelHandle {
    backend.lookup_kernel(MODULE_NAME, name)
}

fn resolve(backend: &dyn GpuBackend) -> ResolvedTiers {
    ResolvedTiers::resolve(backend, KillSwitches::process())
}

/// `DeviceMatrix::upload` errors are reported once per dependent case.
fn clone_error(error: &Error) -> Error {
    Error::Device { backend: "suite", message: format!("upload failed: {error}"), source: None }
}
