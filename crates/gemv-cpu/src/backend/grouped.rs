//! The CPU's grouped launch: each touched expert's arrangement streamed once for all of its
//! (token, slot) pairs, their X rows gathered into one batch and the outputs scattered to Y.

use super::{CpuBackend, NAME};
use crate::arrangements::{Arranged, Source};
use crate::compute::{GroupedPart, gemv_grouped};
use crate::experts::CpuExperts;
use crate::weights::CpuWeights;
use gemv_backend::{GroupedArgs, Result};
use gemv_core::{
    Bf16Element, CoreError, ExpertRouting, GroupedCall, KillSwitches, Nvfp4ExpertsView, bf16_bits, bf16_bits_mut,
    select_family,
};

impl CpuBackend {
    /// A routed mixture-of-experts layer over caller-owned slices of bf16 (`half::bf16` or `u16`
    /// bits): `y[t][s] = W[ids[t][s]] x[t]`, x `[M][K]`, ids `[M][top_k]`, y `[M][top_k][N]`, each
    /// output its expert's exact contract. Every touched expert's weights are read once, however
    /// many pairs chose it. Validated first (the routing against the experts, the lengths, the
    /// family: `Fast` is refused); on an error nothing is written.
    pub fn grouped<T: Bf16Element>(
        &self,
        experts: &CpuExperts,
        x: &[T],
        ids: &[u32],
        y: &mut [T],
        call: &GroupedCall,
    ) -> Result<()> {
        let (x, y) = (bf16_bits(x), bf16_bits_mut(y));
        let routing = call.routing(ids, experts.experts())?;
        let (n, k) = (experts.n(), experts.k());
        let (x_len, y_len) = call.elements(n, k)?;
        for (what, expected, found) in [("x", x_len, x.len()), ("y", y_len, y.len())] {
            if found != expected {
                return Err(CoreError::LengthMismatch { what, expected, found, m: call.m(), n, k }.into());
            }
        }
        select_family(call.family(), false, KillSwitches::process(), gemv_core::Family::Exact)?;
        self.grouped_rows(|e| Ok(experts.expert(e).clone_shared()), x, &routing, y, (n, k))
    }

    /// Runs every touched expert of `routing` over its pairs' gathered rows of `x` (`[M][K]`) into
    /// `y` (`[M][top_k][N]`), the expert's weights from `expert`: all of them in one run of the
    /// thread team (each expert's runs of tiles in one queue), each on the path calibrated for
    /// its number of pairs.
    fn grouped_rows(
        &self,
        mut expert: impl FnMut(usize) -> Result<CpuWeights>,
        x: &[u16],
        routing: &ExpertRouting<'_>,
        y: &mut [u16],
        (n, k): (usize, usize),
    ) -> Result<()> {
        let top_k = routing.top_k();
        let groups = routing.groups();
        let weights = groups.iter().map(|group| expert(group.expert)).collect::<Result<Vec<_>>>()?;
        let gathered: Vec<Vec<u16>> = groups
            .iter()
            .map(|group| group.pairs.iter().flat_map(|&pair| x[(pair / top_k) * k..][..k].iter().copied()).collect())
            .collect();
        let mut outputs: Vec<Vec<u16>> = groups.iter().map(|group| vec![0u16; group.pairs.len() * n]).collect();
        let parts = groups
            .iter()
            .zip(&weights)
            .zip(&gathered)
            .zip(outputs.iter_mut())
            .map(|(((group, weights), x), y)| GroupedPart {
                weights: weights.arranged(),
                global_scale: weights.global_scale(),
                path: self.launch_path(weights.arranged(), group.pairs.len()),
                x,
                m: group.pairs.len(),
                y,
            })
            .collect();
        gemv_grouped(self.team()?, parts);
        for (group, out) in groups.iter().zip(&outputs) {
            for (&pair, row) in group.pairs.iter().zip(out.chunks_exact(n)) {
                y[pair * n..][..n].copy_from_slice(row);
            }
        }
        Ok(())
    }

    /// The trait's grouped launch: the routing read from this backend's memory, each touched
    /// expert's range arranged at its first launch and kept (like a single launch's weights).
    pub(super) fn launch_grouped_from_memory(&self, args: &GroupedArgs) -> Result<()> {
        args.validate()?;
        args.kernel(false)?;
        let (n, k, experts) = (args.n, args.k, args.experts);
        let mut arrangements = self.arrangements();
        let y = self.memory.with_grouped_inputs(args, |inputs| -> Result<Vec<u16>> {
            let stack = Nvfp4ExpertsView::new(inputs.packed, inputs.scales, &inputs.global_scales, experts, n, k)?;
            let routing = ExpertRouting::new(&inputs.routing, args.m, args.top_k, experts)?;
            let mut y = vec![0u16; args.m * args.top_k * n];
            let expert = |e: usize| -> Result<CpuWeights> {
                let view = stack.expert(e)?;
                let (packed_len, scales_len) = (view.packed().len(), view.scales().len());
                let source = Source {
                    packed: args.packed.buffer.range(args.packed.offset + e * packed_len, packed_len),
                    scales: args.scales.buffer.range(args.scales.offset + e * scales_len, scales_len),
                    n,
                    k,
                };
                let arranged = arrangements.get_or_make(source, || Arranged::new(view.packed(), view.scales(), n, k));
                Ok(CpuWeights::shared(arranged, view.global_scale()))
            };
            self.grouped_rows(expert, &inputs.x, &routing, &mut y, (n, k))?;
            Ok(y)
        })??;
        self.memory.write_grouped_y(args, &y)?;
        arrangements.forget_overlapping(&args.y_written());
        tracing::trace!(m = args.m, top_k = args.top_k, n, k, experts, backend = NAME, "cpu grouped launch");
        Ok(())
    }
}
