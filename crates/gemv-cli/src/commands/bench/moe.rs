//! `gemv bench --moe`: a routed mixture-of-experts layer, timed as one grouped launch and as the
//! same work in one launch per (token, slot) pair, with a fresh random routing for every launch
//! (each token's top-k distinct experts, as a router gives them). Bytes count the distinct experts
//! a routing touches (their weights) plus X and Y; every expert has its own copy of the weights
//! in a stack larger than a GPU's L2 for the presets, so touched experts stream cold.
//!
//! Proved first at a small shape: both arms against the host contract, bit for bit. On the CPU,
//! peers (ggml's `ggml_mul_mat_id`, built in with the `ggml-peer` feature) are timed in the same
//! rounds with the same routings.

use super::BenchOptions;
use crate::commands::progress::progress;
use gemv_backend::{BenchTimers, DeviceExperts, GemvArgs, GpuBackend, GroupedArgs, KernelHandle, ResolvedTiers};
use gemv_conformance::{Lcg, activations, matrix, pairs_bound_failure};
use gemv_core::{
    Family, GemvCall, GroupedCall, GroupedKernelSpec, MOE_LAYERS, MoeLayer, Nvfp4Experts, Nvfp4Matrix,
    grouped_contract, host_threads,
};
use std::io::Write;
use std::time::Duration;

/// Another implementation of a routed layer, timed in every round beside the two arms with the
/// same routings.
pub trait MoePeer {
    /// The arm's label, e.g. `ggml q4_0 (repacked q4_0_8x8)`.
    fn name(&self) -> &str;

    /// Bytes of one expert's weights in the peer's format.
    fn expert_bytes(&self) -> u64;

    /// Computes the layer once for each routing (`m` tokens' `top_k` ids each) and returns the
    /// span; anything made for a new M or routing set is made before the clock starts.
    fn time(&mut self, m: usize, routings: &[Vec<u32>]) -> Result<Duration, String>;

    /// Called after each timing: its threads stop spinning, so they do not take the CPU from
    /// whatever is timed next.
    fn rest(&mut self) {}
}

/// A pause before each timing where peers run: their threads' spinning has ended by then.
const SETTLE: Duration = Duration::from_millis(20);

/// A layer's geometry: E experts of N x K, top-k of them per token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoeShape {
    /// The preset's name, or `E,TOPK,NxK`.
    pub label: String,
    /// Experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Rows of each expert.
    pub n: usize,
    /// Columns of each expert.
    pub k: usize,
}

/// Parses `--moe`: a preset or `E,TOPK,N,K` (top-k at most E, a valid N x K).
pub fn parse_moe(text: &str) -> Result<MoeShape, String> {
    if let Some(layer) = MOE_LAYERS.iter().find(|layer| layer.name == text) {
        let MoeLayer { name, experts, top_k, n, k } = *layer;
        return Ok(MoeShape { label: name.to_string(), experts, top_k, n, k });
    }
    let names: Vec<&str> = MOE_LAYERS.iter().map(|layer| layer.name).collect();
    let numbers: Vec<usize> = text
        .split(',')
        .map(|part| part.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("--moe {text:?}: expected E,TOPK,N,K or one of {}", names.join(", ")))?;
    let &[experts, top_k, n, k] = numbers.as_slice() else {
        return Err(format!("--moe {text:?}: expected four numbers E,TOPK,N,K"));
    };
    if experts == 0 || top_k == 0 || top_k > experts || experts > 1 << 16 {
        return Err(format!("--moe {text:?}: need 1 <= TOPK <= E <= 65536"));
    }
    gemv_core::validate_weight_shape(n, k).map_err(|e| format!("--moe {text:?}: {e}"))?;
    Ok(MoeShape { label: format!("{experts},{top_k},{n}x{k}"), experts, top_k, n, k })
}

/// One timed row.
#[derive(Debug, Clone)]
pub struct MoeMeasurement {
    /// The layer.
    pub label: String,
    /// `grouped`, `separate`, or a peer's name.
    pub arm: String,
    /// Tokens.
    pub m: usize,
    /// Mean distinct experts a routing touched.
    pub touched: f64,
    /// Median time of one launch (grouped) or one pair-by-pair layer (separate), microseconds.
    pub micros: f64,
    /// Distinct experts' weights plus X and Y over the time.
    pub gbps: f64,
    /// Of the device copy timed in the same run.
    pub percent_copy: Option<f64>,
}

/// Random routings: `count` of them, each `m` tokens' `top_k` distinct experts.
fn routings(shape: &MoeShape, m: usize, count: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = Lcg::new(seed);
    (0..count)
        .map(|_| {
            let mut ids = Vec::with_capacity(m * shape.top_k);
            for _ in 0..m {
                let mut chosen: Vec<u32> = Vec::with_capacity(shape.top_k);
                while chosen.len() < shape.top_k {
                    let id = rng.next_u32() % shape.experts as u32;
                    if !chosen.contains(&id) {
                        chosen.push(id);
                    }
                }
                ids.extend(chosen);
            }
            ids
        })
        .collect()
}

fn distinct(ids: &[u32]) -> usize {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted.len()
}

/// --grouped-kernel's kernels of `family`, where the backend has a grouped launch.
fn forced_kernels(
    options: &BenchOptions,
    family: Family,
    grouped: bool,
) -> impl Iterator<Item = &'static GroupedKernelSpec> + '_ {
    options.grouped_kernels.iter().copied().filter(move |spec| grouped && spec.family == family)
}

/// An arm's label: `grouped` or `separate`, with ` fast` for the fast family.
pub fn arm_label(arm: &str, family: Family) -> String {
    match family {
        Family::Exact => arm.to_string(),
        Family::Fast => format!("{arm} fast"),
    }
}

/// Both arms of `family` at a small shape (E = 8, N = 40, K = 1040), every M: the exact family
/// against the host contract bit for bit; the fast family's pair-by-pair launches within its
/// f64 bound and its grouped launch equal to them bit for bit.
/// `forced`: the grouped kernels of `family` that are timed besides the selector's, each proved
/// the same way.
pub fn prove(
    backend: &dyn GpuBackend,
    tiers: &ResolvedTiers,
    ms: &[usize],
    family: Family,
    forced: &[&'static GroupedKernelSpec],
) -> Result<bool, String> {
    let (experts, top_k, n, k) = (8, 2, 40, 1040);
    let shape = MoeShape { label: String::new(), experts, top_k, n, k };
    let matrices: Vec<Nvfp4Matrix> = (0..experts).map(|e| matrix(n, k, 500 + e as u64)).collect();
    let stack = Nvfp4Experts::stack(&matrices).map_err(|e| e.to_string())?;
    let layer = DeviceExperts::upload(backend, &stack.view()).map_err(|e| format!("gate upload: {e}"))?;
    let mut grouped = true;
    for &m in ms {
        let ids = routings(&shape, m, 1, m as u64).remove(0);
        let x = activations(m, k, 9 + m as u64);
        let call = GroupedCall::new(m, top_k).with_family(family.into());
        let separate = layer.call_separately(tiers, &x, &ids, &call).map_err(|e| format!("gate M = {m}: {e}"))?;
        let want = match family {
            Family::Exact => {
                let routing = call.routing(&ids, experts).map_err(|e| e.to_string())?;
                let mut want = vec![0u16; m * top_k * n];
                grouped_contract(&stack.view(), &x, &routing, &mut want, host_threads()).map_err(|e| e.to_string())?;
                if separate != want {
                    return Err(format!(
                        "gate failed: separate launches at M = {m} are not bit-exact with the host contract"
                    ));
                }
                want
            }
            Family::Fast => {
                if let Some(failure) = pairs_bound_failure(&matrices, &x, &ids, top_k, &separate) {
                    return Err(format!("gate failed: fast separate launches at M = {m}, {failure}"));
                }
                separate
            }
        };
        match layer.call(tiers, &x, &ids, &call) {
            Err(gemv_backend::Error::Unsupported { .. }) => grouped = false,
            Err(e) => return Err(format!("gate M = {m}: {e}")),
            Ok(found) if found != want => {
                return Err(format!(
                    "gate failed: the {} grouped launch at M = {m} is not bit-exact with its reference",
                    family.name()
                ));
            }
            Ok(_) => {}
        }
        for &kernel in forced.iter().filter(|spec| grouped && spec.family == family) {
            let found =
                layer.call_on(kernel, &x, &ids, &call).map_err(|e| format!("gate M = {m}, {}: {e}", kernel.name))?;
            if found != want {
                return Err(format!("gate failed: {} at M = {m} is not bit-exact with its reference", kernel.name));
            }
        }
    }
    Ok(grouped)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Times one layer at every M of `options` (the grouped arm only where `grouped`), and `peers`
/// in the same rounds.
pub fn measure(
    backend: &dyn BenchTimers,
    tiers: &ResolvedTiers,
    shape: &MoeShape,
    options: &BenchOptions,
    grouped: bool,
    family: Family,
    peers: &mut [Box<dyn MoePeer>],
) -> Result<Vec<MoeMeasurement>, String> {
    let (n, k) = (shape.n, shape.k);
    let expert_bytes = n * k / 2 + n * k / 16;
    eprintln!(
        "bench: {} ({} experts of N = {n}, K = {k}, top {}): {} MB of weights",
        shape.label,
        shape.experts,
        shape.top_k,
        (shape.experts * expert_bytes) >> 20
    );
    // One random matrix's bytes in every expert: each expert is its own memory all the same.
    let one = matrix(n, k, 1);
    let stack = Nvfp4Experts::stack(&vec![one; shape.experts]).map_err(|e| e.to_string())?;
    let gpu: &dyn GpuBackend = backend;
    let layer = DeviceExperts::upload(gpu, &stack.view()).map_err(|e| format!("uploading the experts: {e}"))?;
    drop(stack);
    let kernel = tiers.plan_call(&GemvCall::new(1).with_family(family.into())).map_err(|e| e.to_string())?[0].kernel;
    let copy_rate = backend
        .time_device_copy(shape.experts.min(64) * expert_bytes, options.launches)
        .map_err(|e| e.to_string())?
        .map(|t| 2.0 * (shape.experts.min(64) * expert_bytes * options.launches) as f64 / t.as_secs_f64() / 1e9);
    let mut rows = Vec::new();
    let total = options.ms.len() * options.rounds;
    for (index, &m) in options.ms.iter().enumerate() {
        let sets = routings(shape, m, options.launches, 1000 + m as u64);
        let touched = sets.iter().map(|ids| distinct(ids) as f64).sum::<f64>() / sets.len() as f64;
        let pairs = m * shape.top_k;
        let x = gpu.alloc(2 * m * k).map_err(|e| e.to_string())?;
        let y = gpu.alloc(2 * pairs * n).map_err(|e| e.to_string())?;
        let ids = gpu.alloc(4 * pairs * sets.len()).map_err(|e| e.to_string())?;
        let outcome = (|| -> Result<Vec<MoeMeasurement>, String> {
            gpu.upload(x.whole(), bytemuck::cast_slice(&activations(m, k, 2))).map_err(|e| e.to_string())?;
            let flat: Vec<u8> = sets.iter().flatten().flat_map(|id| id.to_le_bytes()).collect();
            gpu.upload(ids.whole(), &flat).map_err(|e| e.to_string())?;
            let grouped_launches: Vec<GroupedArgs> = (0..sets.len())
                .map(|r| layer.args(x.whole(), ids.range(4 * pairs * r, 4 * pairs), y.whole(), m, shape.top_k, family))
                .collect();
            // The grouped launch forced onto each of --grouped-kernel's kernels of this family.
            let forced: Vec<(&GroupedKernelSpec, Vec<GroupedArgs>)> = forced_kernels(options, family, grouped)
                .map(|spec| (spec, grouped_launches.iter().map(|args| args.with_kernel(spec)).collect()))
                .collect();
            let separate_launches: Vec<(KernelHandle, GemvArgs)> = sets
                .iter()
                .flat_map(|set| set.iter().enumerate().map(move |(pair, &e)| (pair, e)))
                .map(|(pair, e)| (kernel, layer.pair_args(e as usize, x, pair / shape.top_k, y, pair)))
                .collect();
            let mut samples = vec![Vec::new(); 2 + forced.len() + peers.len()];
            let with_peers = !peers.is_empty();
            let settle = || {
                if with_peers {
                    std::thread::sleep(SETTLE);
                }
            };
            // One untimed launch of each arm first: a backend's first launch of an M may do
            // one-time work (the CPU calibrates its path), and a peer's first run sets itself up.
            if grouped {
                backend.time_grouped(&grouped_launches[..1], 1).map_err(|e| e.to_string())?;
            }
            backend.time_launches(&separate_launches[..pairs], 1).map_err(|e| e.to_string())?;
            for (_, launches) in &forced {
                backend.time_grouped(&launches[..1], 1).map_err(|e| e.to_string())?;
            }
            for peer in peers.iter_mut() {
                peer.time(m, &sets[..1])?;
                peer.rest();
            }
            for round in 0..options.rounds {
                if grouped {
                    settle();
                    let t = backend.time_grouped(&grouped_launches, 1).map_err(|e| e.to_string())?;
                    samples[0].push(t.as_secs_f64() / sets.len() as f64);
                }
                settle();
                let t = backend.time_launches(&separate_launches, 1).map_err(|e| e.to_string())?;
                samples[1].push(t.as_secs_f64() / sets.len() as f64);
                for ((_, launches), times) in forced.iter().zip(&mut samples[2..]) {
                    settle();
                    let t = backend.time_grouped(launches, 1).map_err(|e| e.to_string())?;
                    times.push(t.as_secs_f64() / sets.len() as f64);
                }
                for (peer, times) in peers.iter_mut().zip(&mut samples[2 + forced.len()..]) {
                    settle();
                    let t = peer.time(m, &sets);
                    peer.rest();
                    times.push(t?.as_secs_f64() / sets.len() as f64);
                }
                progress(index * options.rounds + round + 1, total, &format!("bench {}", shape.label), "rounds");
            }
            let x_y_bytes = (2 * m * k + 2 * pairs * n) as f64;
            let mut arms: Vec<(String, f64)> = vec![
                (arm_label("grouped", family), touched * expert_bytes as f64 + x_y_bytes),
                (arm_label("separate", family), touched * expert_bytes as f64 + x_y_bytes),
            ];
            arms.extend(
                forced
                    .iter()
                    .map(|(spec, _)| (format!("grouped {}", spec.name), touched * expert_bytes as f64 + x_y_bytes)),
            );
            // A peer's bytes: its experts' weights, X and Y as f32 (what ggml reads and writes).
            arms.extend(
                peers
                    .iter()
                    .map(|peer| (peer.name().to_string(), touched * peer.expert_bytes() as f64 + 2.0 * x_y_bytes)),
            );
            let mut rows = Vec::new();
            for ((arm, bytes), mut times) in arms.into_iter().zip(samples) {
                if times.is_empty() {
                    continue;
                }
                let seconds = median(&mut times);
                let gbps = bytes / seconds / 1e9;
                rows.push(MoeMeasurement {
                    label: shape.label.clone(),
                    arm,
                    m,
                    touched,
                    micros: seconds * 1e6,
                    gbps,
                    percent_copy: copy_rate.map(|rate| 100.0 * gbps / rate),
                });
            }
            Ok(rows)
        })();
        for buffer in [x, y, ids] {
            let _ = gpu.free(buffer);
        }
        rows.extend(outcome?);
    }
    Ok(rows)
}

/// The table: one row per layer, arm and M; every other arm's row gives its time over the
/// grouped launch's of its family (a peer's: the first family's), `grouped x`: how many times as
/// fast the grouped launch is.
pub fn print(out: &mut dyn Write, rows: &[MoeMeasurement]) -> std::io::Result<()> {
    let width = rows.iter().map(|row| row.arm.len()).max().unwrap_or(0).max(9);
    writeln!(
        out,
        "{:<18} {:<width$} {:>3} {:>8} {:>11} {:>9} {:>7} {:>9}",
        "layer", "arm", "M", "experts", "time (us)", "GB/s", "% copy", "grouped x"
    )?;
    for row in rows {
        // The grouped arm a row is compared with: its family's (a forced kernel's: its
        // kernel's family's); a peer's: the first grouped arm; the selector's own: none.
        let forced = row.arm.strip_prefix("grouped ").and_then(gemv_core::grouped_kernel_spec);
        let reference = match (row.arm.strip_prefix("separate"), forced) {
            (Some(family), _) => Some(format!("grouped{family}")),
            (None, Some(spec)) => Some(arm_label("grouped", spec.family)),
            (None, None) if row.arm.starts_with("grouped") => None,
            (None, None) => Some(String::new()),
        };
        let grouped = reference.and_then(|reference| {
            rows.iter().find(|r| {
                r.label == row.label
                    && r.m == row.m
                    && r.arm.starts_with("grouped")
                    && (reference.is_empty() || r.arm == reference)
            })
        });
        let ratio = match grouped {
            Some(grouped) => format!("{:.2}x", row.micros / grouped.micros),
            None => String::new(),
        };
        writeln!(
            out,
            "{:<18} {:<width$} {:>3} {:>8.1} {:>11.1} {:>9.1} {:>7} {:>9}",
            row.label,
            row.arm,
            row.m,
            row.touched,
            row.micros,
            row.gbps,
            row.percent_copy.map_or("-".into(), |p| format!("{p:.1}")),
            ratio
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_custom_layers_parse_and_bad_ones_are_refused() {
        let deepseek = parse_moe("deepseek-v3-up").expect("preset");
        assert_eq!((deepseek.experts, deepseek.top_k, deepseek.n, deepseek.k), (256, 8, 4096, 7168));
        let custom = parse_moe("16,2,64,1024").expect("custom");
        assert_eq!((custom.label.as_str(), custom.experts, custom.top_k), ("16,2,64x1024", 16, 2));
        assert!(parse_moe("4,5,64,1024").unwrap_err().contains("TOPK <= E"));
        assert!(parse_moe("4,2,64,1000").is_err(), "K not a multiple of 16");
        assert!(parse_moe("4,2,64").is_err() && parse_moe("llama").is_err());
    }

    #[test]
    fn routings_give_each_token_distinct_experts_and_both_arms_prove_on_the_host() {
        let shape = parse_moe("6,3,16,64").expect("custom");
        for ids in routings(&shape, 5, 4, 7) {
            assert_eq!(ids.len(), 15);
            assert!(ids.chunks(3).all(|slots| distinct(slots) == 3 && slots.iter().all(|&e| e < 6)));
        }
        let backend = gemv_mock::MockBackend::new();
        let tiers = ResolvedTiers::resolve(&backend, gemv_core::KillSwitches::default());
        assert_eq!(prove(&backend, &tiers, &[1, 4], Family::Exact, &[]), Ok(true));
    }

    /// Each timing a peer was asked for: M and the routings.
    type Timings = std::rc::Rc<std::cell::RefCell<Vec<(usize, Vec<Vec<u32>>)>>>;

    /// A peer that takes a fixed time per routing and keeps the routings it was given.
    struct Recording {
        seen: Timings,
    }

    impl MoePeer for Recording {
        fn name(&self) -> &str {
            "recording peer"
        }
        fn expert_bytes(&self) -> u64 {
            1000
        }
        fn time(&mut self, m: usize, routings: &[Vec<u32>]) -> Result<Duration, String> {
            self.seen.borrow_mut().push((m, routings.to_vec()));
            Ok(Duration::from_millis(routings.len() as u64))
        }
    }

    #[test]
    fn a_peer_is_timed_every_round_on_the_routings_the_arms_run_and_compared_with_the_grouped_launch() {
        let backend = gemv_mock::MockBackend::new();
        let tiers = ResolvedTiers::resolve(&backend, gemv_core::KillSwitches::default());
        let shape = parse_moe("6,2,16,64").expect("custom");
        let options = BenchOptions {
            backend: crate::BackendChoice::Host,
            shapes: vec![],
            ms: vec![1, 3],
            tiers: vec![],
            families: vec![],
            peak_gbps: None,
            json: false,
            plot: None,
            rounds: 2,
            launches: 3,
            cold_mb: 0,
            moe: vec![shape.clone()],
            grouped_kernels: vec![],
            chain: None,
            no_peer: false,
        };
        let seen = Timings::default();
        let mut peers: Vec<Box<dyn MoePeer>> = vec![Box::new(Recording { seen: seen.clone() })];
        let rows = measure(&backend, &tiers, &shape, &options, true, Family::Exact, &mut peers).expect("measure");
        // Every M: one untimed run on its first routing, then every round on the routings of
        // that M: three, each token's two distinct ids.
        let seen = seen.borrow();
        assert_eq!(
            seen.iter().map(|(m, sets)| (*m, sets.len())).collect::<Vec<_>>(),
            [1, 1, 1, 3, 3, 3].into_iter().zip([1, 3, 3, 1, 3, 3]).collect::<Vec<_>>()
        );
        for (m, sets) in seen.iter() {
            assert_eq!(sets[..], routings(&shape, *m, 3, 1000 + *m as u64)[..sets.len()]);
        }
        let peer_rows: Vec<&MoeMeasurement> = rows.iter().filter(|row| row.arm == "recording peer").collect();
        assert_eq!(peer_rows.len(), 2);
        for row in peer_rows {
            assert!((row.micros - 1000.0).abs() < 1e-6, "1 ms per routing: {}", row.micros);
            let bytes = row.touched * 1000.0 + 2.0 * (2 * row.m * 64 + 2 * row.m * 2 * 16) as f64;
            assert!((row.gbps - bytes / 1e-3 / 1e9).abs() < 1e-9, "its own expert bytes");
        }
        let mut table = Vec::new();
        print(&mut table, &rows).expect("print");
        let table = String::from_utf8(table).expect("utf-8");
        let grouped = rows.iter().find(|r| r.arm == "grouped" && r.m == 1).expect("grouped row").micros;
        let line = table.lines().find(|l| l.contains("recording peer") && l.contains(" 1 ")).expect("peer line");
        assert!(line.trim_end().ends_with(&format!("{:.2}x", 1000.0 / grouped)), "{line}");
        let grouped_rows = table.lines().filter(|l| l.split_whitespace().nth(1) == Some("grouped"));
        assert!(grouped_rows.clone().count() == 2 && grouped_rows.into_iter().all(|l| !l.trim_end().ends_with('x')));
    }
}
