//! `gemv bench --chain STEPS`: a chain of dependent layers, as a decode step runs them. Each
//! square shape (N = K) becomes STEPS matrices, the Y of each step the X of the next; the chain
//! runs in each family's dispatch plan, launched one after the other (`serialized`) and, where
//! the backend has them, as programmatic dependent launches (`dependent`: CUDA sm_90 and newer,
//! the emulator at 9.0 and newer), whose kernels start streaming their weights while the step
//! before them finishes and read X only after it has; then each of those captured into a CUDA
//! graph and replayed (`graph`, `dependent graph`: where the backend has graphs), as an engine
//! replays a decode step to take the host out of it. The time per step of each arm, and its
//! ratio to the serialized arm, say what the overlap and the graph save.
//!
//! Each matrix's global scale is set so that a step keeps its activations' magnitude (one over
//! the weights' root mean square times the square root of K): a long chain neither overflows nor
//! vanishes, so every step runs the kernels' ordinary path. Each arm uploads a shape's copies once
//! for every M and family.
//!
//! Proved first, at N = K = 1040 with the same number of steps: every step of every arm bit for
//! bit against the host contract run as the same chain (the exact family), or within the fast
//! family's f64 bound of its own input with the dependent arm bit for bit with the serialized
//! one (the fast family).

use super::{BenchOptions, memory, plan_arm};
use crate::backends::open_dependent;
use crate::commands::progress::progress;
use crate::error::CliError;
use gemv_backend::{BenchTimers, DeviceBuffer, DeviceMatrix, GemvArgs, GpuBackend, KernelHandle, ResolvedTiers};
use gemv_conformance as conformance;
use gemv_core::{Family, FamilyChoice, KillSwitches, Nvfp4Matrix, gemv_contract, host_threads};
use std::io::Write;

/// The shape the chain is proved at: K not a multiple of 32, odd passes.
const PROOF_SIZE: usize = 1040;

/// One way of launching the chain.
struct ChainArm {
    label: &'static str,
    backend: Box<dyn BenchTimers>,
    tiers: ResolvedTiers,
    /// Launched as one captured graph, replayed.
    graph: bool,
}

impl ChainArm {
    fn new(label: &'static str, backend: Box<dyn BenchTimers>, graph: bool) -> Self {
        let tiers = ResolvedTiers::resolve(backend.as_ref(), KillSwitches::process());
        Self { label, backend, tiers, graph }
    }

    /// Device time of `repeats` runs of `launches` (replays of their graph on a graph arm; a
    /// graph arm replays once more untimed first).
    fn time(&self, launches: &[(KernelHandle, GemvArgs)], repeats: usize) -> Result<std::time::Duration, String> {
        if !self.graph {
            return self.backend.time_launches(launches, repeats).map_err(|e| e.to_string());
        }
        self.backend
            .time_launches_as_graph(launches, repeats)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the backend has no graphs".to_string())
    }

    /// Runs `launches` once (a graph arm: captured, then replayed) and waits for them.
    fn run(&self, launches: &[(KernelHandle, GemvArgs)]) -> Result<(), String> {
        if self.graph {
            return self.time(launches, 0).map(drop);
        }
        let backend: &dyn GpuBackend = self.backend.as_ref();
        launches.iter().try_for_each(|(kernel, args)| backend.launch_gemv(*kernel, args).map_err(|e| e.to_string()))?;
        backend.synchronize().map_err(|e| e.to_string())
    }
}

/// One timed row.
#[derive(Debug, Clone)]
struct ChainRow {
    shape: String,
    m: usize,
    family: Family,
    kernels: String,
    /// Median time per step of each arm, microseconds, in arm order.
    micros: Vec<f64>,
}

/// `steps` random matrices of N x K, each with the global scale that keeps a step's output at its
/// input's magnitude.
fn chain_weights(n: usize, k: usize, steps: usize) -> Vec<Nvfp4Matrix> {
    (0..steps)
        .map(|step| {
            let drawn = conformance::matrix(n, k, 900 + step as u64);
            let view = drawn.view();
            // The root mean square over (up to) the first 256 rows: the codes are drawn alike.
            let rows = n.min(256);
            let mut sum = 0.0f64;
            for row in 0..rows {
                for column in 0..k {
                    sum += f64::from(view.scaled_weight(row, column)).powi(2);
                }
            }
            let rms = (sum / (rows * k) as f64).sqrt().max(f64::MIN_POSITIVE);
            let unit_gain = (1.0 / (rms * (k as f64).sqrt())) as f32;
            let (packed, scales, _) = drawn.into_parts();
            Nvfp4Matrix::from_parts(packed, scales, unit_gain, n, k).expect("a drawn matrix's own shape")
        })
        .collect()
}

/// The launches of one chain on `backend`: step s reads `buffers[s]` and writes `buffers[s + 1]`
/// (modulo the buffers' count), through `matrices[first + s]` (modulo theirs), in `family`'s plan
/// for M = `m`.
fn chain_launches(
    tiers: &ResolvedTiers,
    family: Family,
    m: usize,
    matrices: &[DeviceMatrix<&dyn GpuBackend>],
    first: usize,
    buffers: &[DeviceBuffer],
    steps: usize,
) -> Result<Vec<(KernelHandle, GemvArgs)>, String> {
    let plan = plan_arm(tiers, family, m)?;
    let mut launches = Vec::with_capacity(steps * plan.launches.len());
    for step in 0..steps {
        let matrix = &matrices[(first + step) % matrices.len()];
        let (x, y) = (buffers[step % buffers.len()], buffers[(step + 1) % buffers.len()]);
        launches.extend(plan.launches.iter().map(|&(kernel, offset, rows)| (kernel, matrix.args(x, y, offset, rows))));
    }
    Ok(launches)
}

/// Whether `arm` can launch at all: a two-step chain of the smallest shape at M = 1, in the
/// exact family's plan.
fn launches_run(arm: &ChainArm) -> Result<(), String> {
    let backend: &dyn GpuBackend = arm.backend.as_ref();
    let weights = chain_weights(16, 16, 2);
    let matrices = weights
        .iter()
        .map(|w| DeviceMatrix::upload(backend, &w.view()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let buffers = [backend.alloc(32).map_err(|e| e.to_string())?, backend.alloc(32).map_err(|e| e.to_string())?];
    let launched =
        chain_launches(&arm.tiers, Family::Exact, 1, &matrices, 0, &buffers, 2).and_then(|launches| arm.run(&launches));
    for buffer in buffers {
        let _ = backend.free(buffer);
    }
    launched
}

/// Runs the chain once on each arm at the proof size and checks every step (see the module).
fn prove(arms: &[ChainArm], families: &[Family], ms: &[usize], steps: usize) -> Result<(), String> {
    let (n, k) = (PROOF_SIZE, PROOF_SIZE);
    let weights = chain_weights(n, k, steps);
    for &family in families {
        for &m in ms {
            let x0 = conformance::activations(m, k, 91);
            let mut outputs: Vec<Vec<Vec<u16>>> = Vec::with_capacity(arms.len());
            for arm in arms {
                let backend: &dyn GpuBackend = arm.backend.as_ref();
                let context = |e: gemv_backend::Error| format!("chain proof on {} M = {m}: {e}", arm.label);
                let matrices = weights
                    .iter()
                    .map(|w| DeviceMatrix::upload(backend, &w.view()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(context)?;
                let buffers =
                    (0..=steps).map(|_| backend.alloc(2 * m * n)).collect::<Result<Vec<_>, _>>().map_err(context)?;
                backend.upload(buffers[0].whole(), bytemuck::cast_slice(&x0)).map_err(context)?;
                // One buffer per step's output, so that every step can be read back.
                arm.run(&chain_launches(&arm.tiers, family, m, &matrices, 0, &buffers, steps)?)
                    .map_err(|e| format!("chain proof on {} M = {m}: {e}", arm.label))?;
                let mut steps_out = Vec::with_capacity(steps);
                for buffer in &buffers[1..] {
                    let mut y = vec![0u16; m * n];
                    backend.download(buffer.whole(), bytemuck::cast_slice_mut(&mut y)).map_err(context)?;
                    steps_out.push(y);
                }
                outputs.push(steps_out);
            }
            let mut input = x0.clone();
            for step in 0..steps {
                let expected = match family {
                    Family::Exact => {
                        let mut y = vec![0u16; m * n];
                        gemv_contract(&weights[step].view(), &input, m, &mut y, host_threads())
                            .map_err(|e| e.to_string())?;
                        Some(y)
                    }
                    Family::Fast => None,
                };
                for (arm, out) in arms.iter().zip(&outputs) {
                    let found = &out[step];
                    let failure = match &expected {
                        Some(expected) => (found != expected).then(|| "differs from the host contract".to_string()),
                        None => conformance::fast_bound_failure(&weights[step], &input, m, found).or_else(|| {
                            (found != &outputs[0][step]).then(|| format!("differs from {}", arms[0].label))
                        }),
                    };
                    if let Some(failure) = failure {
                        return Err(format!(
                            "gate failed: the {} family's chain, {} arm, M = {m}, step {step}: {failure}",
                            family.name(),
                            arm.label
                        ));
                    }
                }
                // The next step reads what the device wrote (the fast family's bits are its own).
                input = expected.unwrap_or_else(|| outputs[0][step].clone());
            }
        }
    }
    Ok(())
}

/// One arm's copies of a shape's chain, uploaded once for every M and family: `steps` matrices
/// repeated to fill the cold bytes (consecutive chains read other copies), and X and Y for the
/// largest M.
struct ArmChain<'a> {
    matrices: Vec<DeviceMatrix<&'a dyn GpuBackend>>,
    buffers: [DeviceBuffer; 2],
}

impl<'a> ArmChain<'a> {
    fn upload(arm: &'a ChainArm, weights: &[Nvfp4Matrix], chains: usize, max_m: usize) -> Result<Self, String> {
        let backend: &dyn GpuBackend = arm.backend.as_ref();
        let context = |e: gemv_backend::Error| format!("chain on {}: {e}", arm.label);
        let n = weights[0].n();
        let matrices = (0..chains * weights.len())
            .map(|i| DeviceMatrix::upload(backend, &weights[i % weights.len()].view()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(context)?;
        let buffers = [backend.alloc(2 * max_m * n).map_err(context)?, backend.alloc(2 * max_m * n).map_err(context)?];
        let x0 = conformance::activations(max_m, n, 92);
        backend.upload(buffers[0].whole(), bytemuck::cast_slice(&x0)).map_err(context)?;
        Ok(Self { matrices, buffers })
    }

    fn free(self, arm: &ChainArm) {
        drop(self.matrices);
        for buffer in self.buffers {
            let _ = arm.backend.free(buffer);
        }
    }
}

/// Times every arm on one shape at M = `m` in `family` (interleaved rounds, the median per arm).
fn measure(
    arms: &[ChainArm],
    uploaded: &[ArmChain<'_>],
    family: Family,
    label: &str,
    m: usize,
    options: &BenchOptions,
    steps: usize,
) -> Result<ChainRow, String> {
    let mut lists = Vec::with_capacity(arms.len());
    for (arm, chain) in arms.iter().zip(uploaded) {
        let mut list = Vec::new();
        for index in 0..options.launches {
            list.extend(chain_launches(&arm.tiers, family, m, &chain.matrices, index * steps, &chain.buffers, steps)?);
        }
        // Warm-up: one chain.
        arm.time(&list[..list.len() / options.launches], 1)
            .map_err(|e| format!("{label} chain on {}: {e}", arm.label))?;
        lists.push(list);
    }
    let mut samples = vec![Vec::with_capacity(options.rounds); arms.len()];
    for round in 0..options.rounds {
        for turn in 0..arms.len() {
            let index = (turn + round) % arms.len();
            let arm = &arms[index];
            let elapsed = arm.time(&lists[index], 1).map_err(|e| format!("{label} chain on {}: {e}", arm.label))?;
            samples[index].push(elapsed.as_secs_f64() / (options.launches * steps) as f64);
        }
    }
    let micros = samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2] * 1e6
        })
        .collect();
    Ok(ChainRow { shape: label.to_string(), m, family, kernels: plan_arm(&arms[0].tiers, family, m)?.kernels, micros })
}

/// `gemv bench --chain STEPS`: proves, then times every square shape, M and family.
pub fn run(options: &BenchOptions, steps: usize, out: &mut dyn Write) -> Result<bool, CliError> {
    let stdout_error = |e: std::io::Error| CliError::Stdout(e.to_string());
    if let Some((label, n, k)) = options.shapes.iter().find(|(_, n, k)| n != k) {
        return Err(CliError::BadArgument {
            argument: "--chain",
            reason: format!("a chain needs square shapes (N = K: each Y is the next X); {label} is {n}x{k}"),
        });
    }
    let serialized = crate::backends::open(options.backend).map_err(CliError::BackendUnavailable)?;
    let info = serialized.device_info();
    let mut notes = Vec::new();
    let mut arms = vec![ChainArm::new("serialized", serialized, false)];
    match open_dependent(info.backend) {
        Ok(dependent) => {
            let arm = ChainArm::new("dependent", dependent, false);
            // A device or driver that refuses the launches leaves the serialized arm to time.
            match launches_run(&arm) {
                Ok(()) => arms.push(arm),
                Err(reason) => notes.push(format!("no dependent arm: its launches fail here: {reason}")),
            }
        }
        Err(reason) => notes.push(format!("no dependent arm: {reason}")),
    }
    // Each arm again, captured into a graph: on a backend of its own (capturing needs a stream
    // of its own, which changes how the backend tracks its buffers' streams).
    let with_dependent = arms.len() > 1;
    for (label, dependent) in [("graph", false), ("dependent graph", true)] {
        if dependent && !with_dependent {
            continue;
        }
        let opened = if dependent {
            open_dependent(info.backend)
        } else {
            crate::backends::open(options.backend).map_err(|e| e.to_string())
        };
        match opened.map(|backend| ChainArm::new(label, backend, true)) {
            Ok(arm) => match launches_run(&arm) {
                Ok(()) => arms.push(arm),
                Err(reason) => notes.push(format!("no {label} arm: {reason}")),
            },
            Err(reason) => notes.push(format!("no {label} arm: {reason}")),
        }
    }
    let mut families = Vec::new();
    for &choice in if options.families.is_empty() { &[FamilyChoice::Auto][..] } else { &options.families[..] } {
        let family = arms[0]
            .tiers
            .family(choice)
            .map_err(|e| CliError::BadArgument { argument: "--family", reason: e.to_string() })?;
        if !families.contains(&family) {
            families.push(family);
        }
    }
    let max_m = options.ms.iter().copied().max().unwrap_or(1);
    for (label, n, _) in &options.shapes {
        let cold = options.cold_bytes().saturating_mul(arms.len());
        memory::check(&info, label, *n, *n * steps, max_m, cold)?;
    }
    eprintln!("bench: proving a chain of {steps} steps on {} before timing...", info.name);
    if let Err(failure) = prove(&arms, &families, &options.ms, steps) {
        writeln!(out, "{failure}\nno numbers printed: a correctness gate failed").map_err(stdout_error)?;
        return Ok(false);
    }
    eprintln!(
        "bench: proved every step of the {} arms at N = K = {PROOF_SIZE}",
        arms.iter().map(|arm| arm.label).collect::<Vec<_>>().join(", ")
    );
    let mut rows = Vec::new();
    let total = options.shapes.len() * options.ms.len() * families.len();
    for (label, n, _) in &options.shapes {
        let weights = chain_weights(*n, *n, steps);
        let weight_bytes = (n * n / 2 + n * n / 16) as u64;
        let chains = memory::cold_copies(weight_bytes * steps as u64, options.cold_bytes() as u64) as usize;
        eprintln!("bench: {label}: {chains} copies of the chain's {steps} matrices on each arm, for cold weights");
        let uploaded = arms
            .iter()
            .map(|arm| ArmChain::upload(arm, &weights, chains, max_m))
            .collect::<Result<Vec<_>, _>>()
            .map_err(CliError::Backend)?;
        for &m in &options.ms {
            for &family in &families {
                rows.push(measure(&arms, &uploaded, family, label, m, options, steps).map_err(CliError::Backend)?);
                progress(rows.len(), total, "bench --chain", "rows");
            }
        }
        for (arm, chain) in arms.iter().zip(uploaded) {
            chain.free(arm);
        }
    }
    print(out, &info, options, steps, &arms, &rows, &notes).map_err(stdout_error)?;
    Ok(true)
}

fn print(
    out: &mut dyn Write,
    info: &gemv_backend::DeviceInfo,
    options: &BenchOptions,
    steps: usize,
    arms: &[ChainArm],
    rows: &[ChainRow],
    notes: &[String],
) -> std::io::Result<()> {
    let timer = match info.timer {
        gemv_backend::TimerKind::DeviceEvents => "device events",
        gemv_backend::TimerKind::HostClock => "host clock",
    };
    writeln!(
        out,
        "gemv bench --chain {steps} on {} ({}, {}): {} rounds x {} chains, timed by {timer}; microseconds per step",
        info.backend, info.name, info.architecture, options.rounds, options.launches
    )?;
    let mut header = String::from("| shape | M | family | kernels |");
    for arm in arms {
        header.push_str(&format!(" {} |", arm.label));
    }
    for arm in &arms[1..] {
        header.push_str(&format!(" {} / serialized |", arm.label));
    }
    writeln!(out, "{header}")?;
    writeln!(out, "|{}", "---|".repeat(4 + 2 * arms.len() - 1))?;
    for row in rows {
        let mut line = format!("| {} | {} | {} | {} |", row.shape, row.m, row.family.name(), row.kernels);
        for micros in &row.micros {
            line.push_str(&format!(" {micros:.2} |"));
        }
        for micros in &row.micros[1..] {
            line.push_str(&format!(" {:.3} |", micros / row.micros[0]));
        }
        writeln!(out, "{line}")?;
    }
    for note in notes {
        writeln!(out, "note: {note}")?;
    }
    Ok(())
}
