//! What a grouped launch must write, for tests that force a grouped kernel: the exact family the
//! host contract's bits, the fast family its own single-expert launches' bits (batch-invariant,
//! so each pair's output is that pair's M = 1 launch).

use gemv_backend::{DeviceExperts, GpuBackend, ResolvedTiers};
use gemv_core::{ExpertRouting, Family, FamilyChoice, GroupedCall, KillSwitches, Nvfp4ExpertsView, grouped_contract};

/// The expected Y `[m][top_k][N]` of both families for one routed layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupedExpected {
    /// The host contract's bits: what every exact kernel writes.
    pub exact: Vec<u16>,
    /// The fast family's single-expert launches on the reference backend.
    pub fast: Vec<u16>,
}

impl GroupedExpected {
    /// Both families' expected outputs of experts `weights` on X `[m][K]` routed by `ids`
    /// (`m * top_k` expert ids), the fast family's from one launch per pair on `fast_reference`
    /// (a backend with the fast family). Panics where a reference cannot be computed: a test's
    /// setup is wrong then.
    pub fn new<B: GpuBackend>(
        fast_reference: &B,
        weights: &Nvfp4ExpertsView<'_>,
        x: &[u16],
        ids: &[u32],
        m: usize,
        top_k: usize,
    ) -> Self {
        let routing = ExpertRouting::new(ids, m, top_k, weights.experts()).expect("a valid routing");
        let mut exact = vec![0u16; m * top_k * weights.n()];
        grouped_contract(weights, x, &routing, &mut exact, 1).expect("the host contract");
        let tiers = ResolvedTiers::resolve(fast_reference, KillSwitches::default());
        let layer = DeviceExperts::upload(fast_reference, weights).expect("uploading the experts");
        let fast = layer
            .call_separately(&tiers, x, ids, &GroupedCall::new(m, top_k).with_family(FamilyChoice::Fast))
            .expect("the fast family's single launches");
        Self { exact, fast }
    }

    /// What a kernel of `family` must write.
    pub fn of(&self, family: Family) -> &[u16] {
        match family {
            Family::Exact => &self.exact,
            Family::Fast => &self.fast,
        }
    }
}
