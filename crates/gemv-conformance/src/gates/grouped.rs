//! Gate 12: a routed mixture-of-experts layer. Every (token, slot) output equals its one expert's
//! host contract bit for bit, through the grouped launch where the backend offers one and through
//! one single-matrix launch per pair everywhere (offsets into the stacked weights, Y's rows).
//! Routings cover every token on one expert with repeated ids, all pairs distinct, top-k = 1 and
//! = E, random ones up to M = 16, and one with more pairs (272) than a CUDA block has threads;
//! one global scale shared and one per expert. Each runs on the exact grouped kernel the selector
//! picks, but for three forced onto the 4- and 8-wide ones (which it never picks) and the 1-wide
//! one (several pairs an expert, one at a time). A raw launch checks what only the device routing
//! can get wrong: an expert id past E is a typed error (a backend that reads the routing itself)
//! or that pair's Y row NaN and nothing else changed (a kernel that reads it), and nothing outside
//! Y is written (guards, inputs at unaligned offsets).
//!
//! Where the backend has the fast family, every routing runs again in it: the grouped launch
//! equals the family's own single-expert launches (M = 1, one per pair) bit for bit, so a token's
//! outputs depend neither on M nor on the other tokens or their routing, and each pair's output is
//! within the family's f64 bound of its expert; the raw launch runs in it too.

use super::fast::pairs_bound_failure;
use super::{Cases, diff, exact_grouped, resolve};
use crate::data::{Lcg, activations, matrix};
use gemv_backend::{BackendRef, DeviceExperts, Error, GpuBackend, ResolvedTiers, Result};
use gemv_core::codec::BF16_NAN;
use gemv_core::{
    CoreError, ExpertRouting, Family, FamilyChoice, GroupedCall, GroupedKernelSpec, Nvfp4Experts, Nvfp4ExpertsView,
    Nvfp4Matrix, grouped_contract, grouped_kernel, grouped_kernel_spec, host_threads,
};

const EXPERTS: usize = 5;
/// The pairs a CUDA grouped block lists at once: one a thread, 32 lanes a warp.
const LISTING_ROUND: usize = gemv_core::WARPS_PER_BLOCK * 32;
const GUARD_BYTE: u8 = 0xA5;

/// A named routing: M, top-k, ids `[M][top_k]`, and the exact grouped kernel it runs on where
/// not the selector's (the widths `gemv_core::grouped_kernel` never picks).
struct Routing {
    name: &'static str,
    m: usize,
    top_k: usize,
    ids: Vec<u32>,
    exact_kernel: Option<&'static str>,
}

impl Routing {
    fn new(name: &'static str, m: usize, top_k: usize, ids: Vec<u32>) -> Self {
        Self { name, m, top_k, ids, exact_kernel: None }
    }

    /// The exact family's grouped launch of this routing forced onto `kernel`.
    fn on(self, kernel: &'static str) -> Self {
        Self { exact_kernel: Some(kernel), ..self }
    }

    /// The exact grouped kernel this routing runs on.
    fn exact_spec(&self) -> &'static GroupedKernelSpec {
        self.exact_kernel
            .and_then(grouped_kernel_spec)
            .unwrap_or_else(|| grouped_kernel(Family::Exact, self.m, self.top_k, EXPERTS))
    }
}

fn routings() -> Vec<Routing> {
    let random = |m: usize, top_k: usize, seed: u64| {
        let mut rng = Lcg::new(seed);
        (0..m * top_k).map(|_| rng.next_u32() % EXPERTS as u32).collect()
    };
    let every = EXPERTS as u32;
    vec![
        Routing::new("every token on expert 2 (repeated ids)", 3, 2, vec![2; 6]),
        Routing::new("all pairs distinct", 2, 2, vec![4, 0, 3, 1]),
        Routing::new("top-k 1", 4, 1, vec![1, 3, 1, 0]),
        Routing::new("one token, top 3", 1, 3, vec![4, 1, 3]),
        Routing::new("top-k = E", 2, EXPERTS, (0..2 * every).map(|i| (i * 3 + 1) % every).collect()),
        Routing::new(
            "top-k = E, M 9 (nine pairs an expert)",
            9,
            EXPERTS,
            (0..9 * every).map(|i| (i * 2 + i / every) % every).collect(),
        )
        .on("w4a16_grouped_batch8_ring2_r2_b1"),
        Routing::new("18 pairs on expert 4 (several chunks in every kernel)", 9, 2, vec![4; 18])
            .on("w4a16_grouped_batch4_ring4_r1_b2"),
        Routing::new("random, M 7 (an expert's pairs one at a time)", 7, 3, random(7, 3, 17))
            .on("w4a16_grouped_ring3_r2_b2"),
        Routing::new(
            "M 16, 17 slots, 272 pairs: expert 4 on the first and the last (a chunk listed over two rounds of a \
             block's threads), the others in turn",
            16,
            17,
            (0..16 * 17).map(|p| if p == 0 || p == 16 * 17 - 1 { 4 } else { p % 4 }).collect(),
        ),
        Routing::new("random, M 16", 16, 2, random(16, 2, 29)),
    ]
}

/// E experts `[n, k]`, their global scales all [`crate::GLOBAL_SCALE`] or each its own: the stack
/// and each expert alone.
fn stack(n: usize, k: usize, own_scales: bool) -> (Nvfp4Experts, Vec<Nvfp4Matrix>) {
    let matrices: Vec<Nvfp4Matrix> = (0..EXPERTS)
        .map(|e| {
            let w = matrix(n, k, 300 + e as u64);
            let (packed, scales, global_scale) = w.into_parts();
            let scale = if own_scales { global_scale * (1.0 + e as f32 / 4.0) } else { global_scale };
            Nvfp4Matrix::from_parts(packed, scales, scale, n, k).expect("generated shapes are valid")
        })
        .collect();
    (Nvfp4Experts::stack(&matrices).expect("one shape"), matrices)
}

fn expected(view: &Nvfp4ExpertsView<'_>, x: &[u16], routing: &Routing) -> Result<Vec<u16>> {
    let checked = ExpertRouting::new(&routing.ids, routing.m, routing.top_k, view.experts())?;
    let mut y = vec![0u16; routing.m * routing.top_k * view.n()];
    grouped_contract(view, x, &checked, &mut y, host_threads())?;
    Ok(y)
}

pub(super) fn grouped_experts(backend: &dyn GpuBackend, cases: &mut Cases) {
    let tiers = resolve(backend);
    let fast = tiers.family(FamilyChoice::Fast) == Ok(Family::Fast);
    let mut offered = true;
    // K = 1552: G = 97, a whole pass and a partial one in both halves. N = 33 is one row past two
    // 16-row blocks (of every grouped kernel: 8 warps of 2 rows, or the fast family's tile), N = 16
    // exactly one: a kernel's count of row blocks off by one either way shifts every pair's blocks.
    // A routing longer than a block's threads checks how a block lists its pairs, which the shape
    // does not change: it runs on the smaller shape only (it is the gate's slowest routing).
    for (n, k, own_scales, long_routings) in [(33, 1552, true, false), (16, 800, false, true)] {
        let (experts, matrices) = stack(n, k, own_scales);
        let scales = if own_scales { "a global scale each" } else { "one global scale" };
        // A shared global scale as one f32 for every expert: the launch's scalar form.
        let stacked = experts.view();
        let view = match own_scales {
            true => Ok(stacked),
            false => {
                Nvfp4ExpertsView::new(stacked.packed(), stacked.scales(), &stacked.global_scales()[..1], EXPERTS, n, k)
            }
        };
        let view = match view {
            Ok(view) => view,
            Err(error) => {
                cases.record(format!("N={n} K={k} E={EXPERTS} one global scale"), Err(error.into()));
                continue;
            }
        };
        let device = match DeviceExperts::upload(backend, &view) {
            Ok(device) => device,
            Err(error) => {
                cases.record(format!("N={n} K={k} E={EXPERTS} upload"), Err(error));
                continue;
            }
        };
        for routing in routings().into_iter().filter(|routing| long_routings || routing.ids.len() <= LISTING_ROUND) {
            let call = exact_grouped(routing.m, routing.top_k);
            let x = activations(routing.m, k, 7 + routing.m as u64);
            let case = format!("N={n} K={k} E={EXPERTS} {scales}, {}", routing.name);
            let want = match expected(&view, &x, &routing) {
                Ok(want) => want,
                Err(error) => {
                    cases.record(format!("{case}: host"), Err(error));
                    continue;
                }
            };
            let separate = device.call_separately(&tiers, &x, &routing.ids, &call);
            cases.record(format!("{case}: separate launches"), separate.map(|y| diff(&want, &y, n)));
            let grouped = match routing.exact_kernel {
                Some(_) => device.call_on(routing.exact_spec(), &x, &routing.ids, &call),
                None => device.call(&tiers, &x, &routing.ids, &call),
            };
            match grouped {
                Err(Error::Unsupported { .. }) => offered = false,
                grouped => {
                    let on = routing.exact_spec().name;
                    cases.record(format!("{case}: grouped launch ({on})"), grouped.map(|y| diff(&want, &y, n)))
                }
            }
            if fast {
                let outcome = fast_routing(&device, &tiers, &matrices, &x, &routing);
                cases.record(format!("{case}: fast family"), outcome);
            }
        }
        if let Some(routing) = routings().pop().filter(|_| offered) {
            let want = expected(&view, &activations(routing.m, k, 5), &routing);
            raw_launch(backend, cases, &view, &routing, Family::Exact, want);
            if fast {
                let x = activations(routing.m, k, 5);
                let want = device.call_separately(&tiers, &x, &routing.ids, &fast_grouped(routing.m, routing.top_k));
                raw_launch(backend, cases, &view, &routing, Family::Fast, want);
            }
        }
    }
}

fn fast_grouped(m: usize, top_k: usize) -> GroupedCall {
    GroupedCall::new(m, top_k).with_family(FamilyChoice::Fast)
}

/// The fast family on one routing: the grouped launch against one fast launch per pair, bit for
/// bit, and each pair's output within the bound of its expert.
fn fast_routing<B: BackendRef>(
    device: &DeviceExperts<B>,
    tiers: &ResolvedTiers,
    matrices: &[Nvfp4Matrix],
    x: &[u16],
    routing: &Routing,
) -> Result<Option<String>> {
    let n = device.n();
    let call = fast_grouped(routing.m, routing.top_k);
    let separate = device.call_separately(tiers, x, &routing.ids, &call)?;
    if let Some(failure) = pairs_bound_failure(matrices, x, &routing.ids, routing.top_k, &separate) {
        return Ok(Some(format!("single launches: {failure}")));
    }
    let grouped = device.call(tiers, x, &routing.ids, &call)?;
    Ok(diff(&separate, &grouped, n).map(|failure| format!("grouped against single fast launches: {failure}")))
}

/// One grouped launch in `family` over raw buffers: X (activations seeded 5), the routing and Y
/// at unaligned offsets between guard bytes, against `want`; then the same routing with one id
/// past E, which must be refused.
fn raw_launch(
    backend: &dyn GpuBackend,
    cases: &mut Cases,
    view: &Nvfp4ExpertsView<'_>,
    routing: &Routing,
    family: Family,
    want: Result<Vec<u16>>,
) {
    let (n, k) = (view.n(), view.k());
    let case = format!("N={n} K={k} E={EXPERTS} raw launch ({}), {}", family.name(), routing.name);
    let x = activations(routing.m, k, 5);
    let device = match DeviceExperts::upload(backend, view) {
        Ok(device) => device,
        Err(error) => return cases.record(format!("{case}: upload"), Err(error)),
    };
    let outcome = (|| -> Result<Option<String>> {
        let want = want?;
        let x_bytes: Vec<u8> = bytemuck::cast_slice(&x).to_vec();
        let mut ids: Vec<u8> = routing.ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        let y_len = 2 * want.len();
        // Offsets 2 past a 16-byte boundary (X, Y) and 4 past one (the routing).
        let (x_at, ids_at, y_at) = (258, 260, 258);
        let guarded = |at: usize, body: &[u8]| {
            let mut bytes = vec![GUARD_BYTE; at + body.len() + 64];
            bytes[at..at + body.len()].copy_from_slice(body);
            bytes
        };
        let images = [guarded(x_at, &x_bytes), guarded(ids_at, &ids), guarded(y_at, &vec![GUARD_BYTE; y_len])];
        let mut buffers = Vec::new();
        let result = (|| -> Result<Option<String>> {
            for image in &images {
                let buffer = backend.alloc(image.len())?;
                buffers.push(buffer);
                backend.upload(buffer.whole(), image)?;
            }
            let args = device.args(
                buffers[0].range(x_at, x_bytes.len()),
                buffers[1].range(ids_at, ids.len()),
                buffers[2].range(y_at, y_len),
                routing.m,
                routing.top_k,
                family,
            );
            backend.launch_grouped(&args)?;
            backend.synchronize()?;
            let mut after = vec![0u8; images[2].len()];
            backend.download(buffers[2].whole(), &mut after)?;
            if let Some(at) = (0..after.len()).find(|&i| (i < y_at || i >= y_at + y_len) && after[i] != GUARD_BYTE) {
                return Ok(Some(format!("guard byte {at} of Y's buffer changed (Y is [{y_at}, {})", y_at + y_len)));
            }
            let found: Vec<u16> =
                after[y_at..y_at + y_len].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
            if let Some(failure) = diff(&want, &found, n) {
                return Ok(Some(failure));
            }
            // The last pair's id one past E: a typed error where the backend reads the routing
            // itself, else (a kernel reading it) that pair's Y row NaN and every other as before.
            let last = ids.len() - 4;
            ids[last..].copy_from_slice(&(EXPERTS as u32).to_le_bytes());
            backend.upload(buffers[1].range(ids_at, ids.len()), &ids)?;
            match backend.launch_grouped(&args).and_then(|()| backend.synchronize()) {
                Err(Error::Core(CoreError::ExpertOutOfRange { id, .. })) if id == EXPERTS as u64 => Ok(None),
                Ok(()) => {
                    backend.download(buffers[2].whole(), &mut after)?;
                    let found: Vec<u16> =
                        after[y_at..y_at + y_len].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
                    let mut poisoned = want.clone();
                    let pairs = want.len() / n;
                    poisoned[(pairs - 1) * n..].fill(BF16_NAN);
                    Ok(diff(&poisoned, &found, n).map(|failure| {
                        format!("expert id {EXPERTS} of {EXPERTS}: neither ExpertOutOfRange nor a NaN row: {failure}")
                    }))
                }
                other => {
                    Ok(Some(format!("expert id {EXPERTS} of {EXPERTS}: expected ExpertOutOfRange, got {other:?}")))
                }
            }
        })();
        for buffer in buffers {
            let _ = backend.free(buffer);
        }
        result
    })();
    cases.record(case, outcome);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gate 12's routings reach every grouped kernel of both families (the selector's choice
    /// depends on M, top-k and E alone; the exact widths it never picks are forced).
    #[test]
    fn the_routings_reach_every_grouped_kernel() {
        for spec in gemv_core::GROUPED_KERNELS {
            let reached = routings().iter().any(|r| match spec.family {
                Family::Exact => r.exact_spec().name == spec.name,
                Family::Fast => grouped_kernel(Family::Fast, r.m, r.top_k, EXPERTS).name == spec.name,
            });
            assert!(reached, "no routing of gate 12 runs {}", spec.name);
        }
    }
}
