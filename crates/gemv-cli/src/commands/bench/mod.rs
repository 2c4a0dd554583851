//! `gemv bench`: the main job. Proves the chosen tiers first (bit-exact against the host
//! reference at a small shape, and the f64 bound), then times them with the performance
//! protocol of docs/benchmarks.md and prints a table: tier, M, time, effective GB/s, % of peak.

mod chain;
#[cfg(feature = "ggml-peer")]
mod ggml;
#[cfg(feature = "ggml-peer")]
mod ggml_moe;
mod memory;
mod moe;
mod options;
mod peers;
mod plot;
mod protocol;
mod readme_figures;
mod report;
mod rotation_peer;

pub use options::{BenchOptions, TierChoice};

use crate::backends::open;
use crate::commands::progress::counted;
use crate::error::CliError;
use gemv_backend::{DeviceKind, DeviceMatrix, GpuBackend, KernelHandle, ResolvedTiers};
use gemv_conformance as conformance;
use gemv_core::{
    Family, FamilyChoice, GemvCall, KernelSpec, KillSwitches, WIDEST_TIER, f64_reference, gemv_contract, host_threads,
};
use std::io::Write;

/// What an arm runs: a family's dispatch plan, or one forced kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmKind {
    /// The dispatch plan of the family.
    Plan(Family),
    /// One kernel at every M it covers.
    Kernel(&'static KernelSpec),
}

impl ArmKind {
    /// The arm's label in the results: `plan` (the exact family's plan), `fast` (the fast
    /// family's plan) or the forced kernel's name.
    pub fn label(&self) -> &'static str {
        match self {
            ArmKind::Plan(Family::Exact) => "plan",
            ArmKind::Plan(Family::Fast) => "fast",
            ArmKind::Kernel(spec) => spec.name,
        }
    }
}

/// One timed configuration: a tier choice at one M.
#[derive(Debug, Clone)]
pub struct Arm {
    /// What it runs.
    pub kind: ArmKind,
    /// The family of every kernel it runs (decides which gate proves it).
    pub family: Family,
    /// What actually runs, e.g. `w4a16_gemv_batch5` or `w4a16_gemv_batch32+w4a16_gemv_batch8_rt2`.
    pub kernels: String,
    /// Rows.
    pub m: usize,
    /// (kernel, row offset, rows) per launch.
    pub launches: Vec<(KernelHandle, usize, usize)>,
}

/// One result row.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// Shape label.
    pub shape: String,
    /// N.
    pub n: usize,
    /// K.
    pub k: usize,
    /// The arm.
    pub tier: String,
    /// Kernels that ran.
    pub kernels: String,
    /// Rows.
    pub m: usize,
    /// Median time of one launch set, microseconds.
    pub micros: f64,
    /// Effective GB/s (packed + scales + X + Y bytes / time).
    pub gbps: f64,
    /// % of the nominal peak.
    pub percent_peak: Option<f64>,
    /// % of a device-to-device copy measured in the same run.
    pub percent_copy: Option<f64>,
}

fn arms(
    tiers: &ResolvedTiers,
    backend: &dyn GpuBackend,
    options: &BenchOptions,
    notes: &mut Vec<String>,
) -> Result<Vec<Arm>, String> {
    let choices = if options.tiers.is_empty() { vec![TierChoice::Plan] } else { options.tiers.clone() };
    let families = if options.families.is_empty() { vec![FamilyChoice::Auto] } else { options.families.clone() };
    let mut arms = Vec::new();
    for choice in &choices {
        for &m in &options.ms {
            let spec = match choice {
                TierChoice::Plan => {
                    for &family_choice in &families {
                        let family = tiers.family(family_choice).map_err(|e| format!("--family: {e}"))?;
                        arms.push(plan_arm(tiers, family, m)?);
                    }
                    continue;
                }
                TierChoice::Kernel(spec) => *spec,
            };
            if m > spec.max_m {
                notes.push(format!("{} skipped at M = {m} (its width is {})", spec.name, spec.max_m));
                continue;
            }
            let handle = backend.lookup_kernel(spec.module, spec.name);
            if !handle.is_resolved() {
                return Err(format!("--tier {}: not present on backend {}", spec.name, backend.name()));
            }
            arms.push(Arm {
                kind: ArmKind::Kernel(spec),
                family: spec.family,
                kernels: spec.name.to_string(),
                m,
                launches: vec![(handle, 0, m)],
            });
        }
    }
    Ok(arms)
}

/// The dispatch plan's launches for `m` in `family`.
fn plan_arm(tiers: &ResolvedTiers, family: Family, m: usize) -> Result<Arm, String> {
    let plan = match family {
        Family::Exact => tiers.plan(m, WIDEST_TIER),
        Family::Fast => tiers.fast_plan(m),
    };
    let plan = plan.map_err(|e| format!("M = {m}: {e}"))?;
    let (names, launches): (Vec<&str>, Vec<_>) = plan
        .iter()
        .map(|l| {
            let handle = match family {
                Family::Exact => tiers.handle(l.tier),
                Family::Fast => tiers.fast_handle(l.tier),
            };
            (tiers.kernel_name(family, l.tier).unwrap_or("?"), (handle, l.row_offset, l.rows))
        })
        .unzip();
    Ok(Arm { kind: ArmKind::Plan(family), family, kernels: names.join("+"), m, launches })
}

/// The correctness gates before any timing: bit-exact against the host contract and within
/// the f64 bound, at N = 256, K = 1040 (K % 32 != 0), for every arm. On the host reference the
/// bit-exact gate would compare the contract with itself: only the f64 bound is checked there,
/// and a note says so.
fn gates(
    backend: &dyn GpuBackend,
    tiers: &ResolvedTiers,
    arms: &[Arm],
    notes: &mut Vec<String>,
) -> Result<String, String> {
    let is_reference = backend.device_info().kind == DeviceKind::Reference;
    if is_reference {
        notes.push(format!(
            "{} is the reference contract itself: the bit-exact gate has nothing to prove there, only the f64 bound \
             was checked",
            backend.name()
        ));
    }
    let (n, k) = (256, 1040);
    let weights = conformance::matrix(n, k, 77);
    let matrix = DeviceMatrix::upload(backend, &weights.view()).map_err(|e| format!("gate upload: {e}"))?;
    for arm in arms {
        let x = conformance::activations(arm.m, k, arm.m as u64);
        let found = match arm.kind {
            ArmKind::Plan(family) => matrix.call(tiers, &x, &GemvCall::new(arm.m).with_family(family.into())),
            ArmKind::Kernel(_) => matrix.gemv_with(arm.launches[0].0, &x, arm.m),
        }
        .map_err(|e| format!("gate {} M = {}: {e}", arm.kernels, arm.m))?;
        if arm.family == Family::Fast {
            // Its own contract: within its bound of the f64 reference, not bit-equal to the host.
            if let Some(failure) = conformance::fast_bound_failure(&weights, &x, arm.m, &found) {
                return Err(format!("gate failed: {} at M = {}: {failure}", arm.kernels, arm.m));
            }
            continue;
        }
        let mut expected = vec![0u16; arm.m * n];
        gemv_contract(&weights.view(), &x, arm.m, &mut expected, host_threads()).map_err(|e| e.to_string())?;
        if let Some(i) = (0..expected.len()).find(|&i| !is_reference && expected[i] != found[i]) {
            return Err(format!(
                "gate failed: {} at M = {} is not bit-exact with the host reference: Y[{}][{}] expected {:#06x}, found {:#06x}",
                arm.kernels,
                arm.m,
                i / n,
                i % n,
                expected[i],
                found[i]
            ));
        }
        let reference = f64_reference(&weights.view(), &x, arm.m).map_err(|e| e.to_string())?;
        if let Some(i) = (0..found.len()).find(|&i| !reference[i].admits(found[i])) {
            return Err(format!("gate failed: {} at M = {} output {i} is outside the f64 bound", arm.kernels, arm.m));
        }
    }
    Ok(verdict(arms, is_reference))
}

/// What the gates proved, in one line.
fn verdict(arms: &[Arm], is_reference: bool) -> String {
    let count = |n: usize| counted(n, "configuration");
    let fast = arms.iter().filter(|arm| arm.family == Family::Fast).count();
    let exact = arms.len() - fast;
    let mut proved = Vec::new();
    if exact > 0 && is_reference {
        proved.push(format!("{} within the f64 bound (the host is the contract itself)", count(exact)));
    } else if exact > 0 {
        proved.push(format!("{} bit-exact against the host contract and within the f64 bound", count(exact)));
    }
    if fast > 0 {
        proved.push(format!("{} of the fast family within its f64 bound", count(fast)));
    }
    format!("proved at N = 256, K = 1040: {}", proved.join("; "))
}

/// Checks, before any work, that `--plot` can be written: a new file or a regular file to
/// replace, in a directory that exists.
fn check_plot_path(path: &std::path::Path) -> Result<(), CliError> {
    let bad = |reason: String| CliError::BadOutput { path: path.to_path_buf(), reason: format!("--plot: {reason}") };
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => return Err(bad("exists and is not a regular file".into())),
        Ok(meta) if meta.permissions().readonly() => return Err(bad("exists and is read-only".into())),
        Ok(_) => return Ok(()),
        Err(_) => {}
    }
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => std::path::Path::new("."),
    };
    match std::fs::metadata(directory) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(bad(format!("{} is not a directory", directory.display()))),
        Err(e) => Err(bad(format!("its directory {} cannot be used: {e}", directory.display()))),
    }
}

/// Runs the bench; Ok(false) when a gate failed (nothing was timed).
pub fn run(options: &BenchOptions, out: &mut dyn Write) -> Result<bool, CliError> {
    if let Some(path) = &options.plot {
        check_plot_path(path)?;
    }
    if !options.families.is_empty() && !options.tiers.is_empty() && !options.tiers.contains(&TierChoice::Plan) {
        return Err(CliError::BadArgument {
            argument: "--family",
            reason: "chooses the family of the dispatch plan, and --tier forces kernels without it (add --tier plan \
                     to time the plan too)"
                .into(),
        });
    }
    if options.moe.is_empty() && !options.grouped_kernels.is_empty() {
        return Err(CliError::BadArgument {
            argument: "--grouped-kernel",
            reason: "forces the grouped launch of the --moe runs; add --moe LAYER".into(),
        });
    }
    if !options.moe.is_empty() {
        let ignored =
            [("--json", options.json), ("--plot", options.plot.is_some()), ("--tier", !options.tiers.is_empty())];
        if let Some((argument, _)) = ignored.iter().find(|(_, given)| *given) {
            return Err(CliError::BadArgument {
                argument,
                reason: "applies to the --shape runs; --moe prints its own table (--family picks its families)".into(),
            });
        }
    }
    if let Some(steps) = options.chain {
        let conflicts = [
            ("--moe", !options.moe.is_empty()),
            ("--json", options.json),
            ("--plot", options.plot.is_some()),
            ("--tier", !options.tiers.is_empty()),
        ];
        if let Some((argument, _)) = conflicts.iter().find(|(_, given)| *given) {
            return Err(CliError::BadArgument {
                argument,
                reason: "applies to the single-layer runs; --chain times each family's plan and prints its own table"
                    .into(),
            });
        }
        return chain::run(options, steps, out);
    }
    let backend = open(options.backend).map_err(CliError::BackendUnavailable)?;
    let info = backend.device_info();
    let tiers = ResolvedTiers::resolve(backend.as_ref(), KillSwitches::process());
    if !options.moe.is_empty() {
        return run_moe(backend.as_ref(), &tiers, options, out);
    }
    let mut notes = Vec::new();
    let arms = arms(&tiers, backend.as_ref(), options, &mut notes).map_err(CliError::Usage)?;
    if arms.is_empty() {
        return Err(CliError::Usage("nothing to run: no tier covers the requested M".into()));
    }
    let max_m = arms.iter().map(|a| a.m).max().unwrap_or(1);
    for (label, n, k) in &options.shapes {
        memory::check(&info, label, *n, *k, max_m, options.cold_bytes())?;
    }
    eprintln!("bench: proving {} on {} before timing...", counted(arms.len(), "configuration"), info.name);
    let stdout_error = |e: std::io::Error| CliError::Stdout(e.to_string());
    match gates(backend.as_ref(), &tiers, &arms, &mut notes) {
        Ok(verdict) => eprintln!("bench: {verdict}"),
        Err(failure) => {
            writeln!(out, "{failure}\nno numbers printed: a correctness gate failed").map_err(stdout_error)?;
            return Ok(false);
        }
    }
    let peak = options.peak_gbps.or(info.peak_bandwidth_gbps);
    let mut results = Vec::new();
    for (label, n, k) in &options.shapes {
        results.extend(
            protocol::measure(backend.as_ref(), &arms, label, *n, *k, options, peak, &mut notes)
                .map_err(CliError::Backend)?,
        );
    }
    notes.extend(backend.timing_notes());
    let closing = readme_figures::closing_line(&info, &results);
    if options.json {
        writeln!(out, "{}", report::to_json(&info, options, peak, &results, &notes, closing.as_deref()))
            .map_err(stdout_error)?;
    } else {
        report::print_table(out, &info, options, peak, &results, &notes).map_err(stdout_error)?;
        if let Some(line) = &closing {
            writeln!(out, "{line}").map_err(stdout_error)?;
        }
    }
    if let Some(path) = &options.plot {
        plot::write(path, &results, peak)
            .map_err(|e| CliError::Io { path: path.clone(), error: format!("--plot: {e}") })?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(true)
}

/// `gemv bench --moe`: proves both arms at a small shape, then times every layer.
fn run_moe(
    backend: &dyn gemv_backend::BenchTimers,
    tiers: &ResolvedTiers,
    options: &BenchOptions,
    out: &mut dyn Write,
) -> Result<bool, CliError> {
    let info = backend.device_info();
    let stdout_error = |e: std::io::Error| CliError::Stdout(e.to_string());
    for layer in &options.moe {
        // The stack is one N x (E K) matrix's bytes, held once (no cold copies: the experts a
        // routing touches stream from a stack past the L2); X is overcounted E times, a little.
        let weights = layer.experts * (layer.n * layer.k / 2 + layer.n * layer.k / 16);
        let max_m = options.ms.iter().copied().max().unwrap_or(1);
        memory::check(&info, &layer.label, layer.n, layer.k * layer.experts, max_m, weights)?;
    }
    // The exact family unless --family names others; each must be on the device.
    let mut families = Vec::new();
    for &choice in if options.families.is_empty() { &[FamilyChoice::Exact][..] } else { &options.families[..] } {
        let family =
            tiers.family(choice).map_err(|e| CliError::BadArgument { argument: "--family", reason: e.to_string() })?;
        if !families.contains(&family) {
            families.push(family);
        }
    }
    if let Some(spec) = options.grouped_kernels.iter().find(|spec| !families.contains(&spec.family)) {
        return Err(CliError::BadArgument {
            argument: "--grouped-kernel",
            reason: format!(
                "{} is of the {} family; add --family {}",
                spec.name,
                spec.family.name(),
                spec.family.name()
            ),
        });
    }
    eprintln!("bench: proving the grouped and pair-by-pair launches on {} before timing...", info.name);
    let mut grouped = true;
    for &family in &families {
        match moe::prove(backend, tiers, &options.ms, family, &options.grouped_kernels) {
            Ok(offered) => grouped &= offered,
            Err(failure) => {
                writeln!(out, "{failure}\nno numbers printed: a correctness gate failed").map_err(stdout_error)?;
                return Ok(false);
            }
        }
        eprintln!(
            "bench: proved the {} family at E = 8, N = 40, K = 1040, top 2: {}",
            family.name(),
            match (grouped, family) {
                (true, Family::Exact) => "the grouped and pair-by-pair launches bit-exact against the host contract",
                (false, Family::Exact) => "the pair-by-pair launches bit-exact against the host contract",
                (_, Family::Fast) =>
                    "the pair-by-pair launches within the f64 bound, the grouped launch bit-exact with them",
            }
        );
    }
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for layer in &options.moe {
        // Peers run beside the first family's arms, in the same rounds.
        let mut peers =
            if options.peer() { peers::for_moe(&info, layer, host_threads(), &mut notes) } else { Vec::new() };
        for (index, &family) in families.iter().enumerate() {
            let peers: &mut [Box<dyn moe::MoePeer>] = if index == 0 { &mut peers } else { &mut [] };
            rows.extend(
                moe::measure(backend, tiers, layer, options, grouped, family, peers).map_err(CliError::Backend)?,
            );
        }
    }
    let timer = match info.timer {
        gemv_backend::TimerKind::DeviceEvents => "device events",
        gemv_backend::TimerKind::HostClock => "host clock",
    };
    writeln!(
        out,
        "gemv bench --moe on {} ({}, {}): {} rounds x {} launches (a random routing each), timed by {timer}",
        info.backend, info.name, info.architecture, options.rounds, options.launches
    )
    .map_err(stdout_error)?;
    moe::print(out, &rows).map_err(stdout_error)?;
    if !grouped {
        writeln!(out, "note: {} has no grouped launch; only the pair-by-pair launches were timed", info.backend)
            .map_err(stdout_error)?;
    }
    notes.dedup();
    for note in notes {
        writeln!(out, "note: {note}").map_err(stdout_error)?;
    }
    for note in backend.timing_notes() {
        writeln!(out, "note: {note}").map_err(stdout_error)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::BackendChoice;
    use gemv_mock::MockBackend;

    /// The host backend with one output bit flipped after every launch of `batch3`.
    fn one_wrong_bit() -> MockBackend {
        MockBackend::new().with_launch_hook(|mock, kernel, args| {
            mock.launch_unhooked(kernel, args)?;
            if kernel.spec().is_some_and(|s| s.name == "w4a16_gemv_batch3") {
                let first = args.y.buffer.range(args.y.offset, 1);
                let mut byte = [0u8];
                mock.download(first, &mut byte)?;
                mock.upload(first, &[byte[0] ^ 1])?;
            }
            Ok(())
        })
    }

    fn arms_for(backend: &dyn GpuBackend, ms: &[usize]) -> (ResolvedTiers, Vec<Arm>) {
        let tiers = ResolvedTiers::resolve(backend, KillSwitches::default());
        let arms = arms(&tiers, backend, &options_for(ms, vec![]), &mut Vec::new()).expect("arms");
        (tiers, arms)
    }

    fn options_for(ms: &[usize], families: Vec<FamilyChoice>) -> BenchOptions {
        BenchOptions {
            backend: BackendChoice::Host,
            shapes: vec![],
            ms: ms.to_vec(),
            tiers: vec![],
            families,
            peak_gbps: None,
            json: false,
            plot: None,
            rounds: 1,
            launches: 1,
            cold_mb: 0,
            moe: vec![],
            grouped_kernels: vec![],
            chain: None,
            no_peer: false,
        }
    }

    #[cfg(feature = "emulator")]
    #[test]
    fn families_side_by_side_are_each_proved_by_their_own_gate() {
        let backend = gemv_cuda_emulator::CudaEmulator::new();
        let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
        let options = options_for(&[1, 9], vec![FamilyChoice::Exact, FamilyChoice::Fast]);
        let arms = arms(&tiers, &backend, &options, &mut Vec::new()).expect("arms");
        let labels: Vec<(String, String, usize)> =
            arms.iter().map(|a| (a.kind.label().to_string(), a.kernels.clone(), a.m)).collect();
        assert_eq!(
            labels,
            vec![
                // The emulator of sm_90 plans as the tuned table says (docs/tuning.md).
                ("plan".into(), "w4a16_gemv_ring3_r4_b2_p".into(), 1),
                ("fast".into(), "w4a16_fast_m8".into(), 1),
                ("plan".into(), "w4a16_gemv_batch8_rt2+w4a16_gemv_ring3_r4_b2_p".into(), 9),
                ("fast".into(), "w4a16_fast_m16".into(), 9),
            ]
        );
        assert_eq!(
            gates(&backend, &tiers, &arms, &mut Vec::new()).as_deref(),
            Ok("proved at N = 256, K = 1040: 2 configurations bit-exact against the host contract and within the f64 \
                bound; 2 configurations of the fast family within its f64 bound")
        );
    }

    #[test]
    fn the_fast_family_where_it_is_absent_is_refused_before_any_work() {
        let backend = MockBackend::new();
        let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
        let failure = arms(&tiers, &backend, &options_for(&[4], vec![FamilyChoice::Fast]), &mut Vec::new())
            .expect_err("the mock has no fast family");
        assert!(failure.contains("--family: the fast kernel family is not available"), "{failure}");
        assert_eq!(options::parse_family("fast"), Ok(FamilyChoice::Fast));
        assert!(options::parse_family("tensor").is_err());
    }

    #[test]
    fn gates_pass_on_a_correct_backend() {
        let backend = MockBackend::new();
        let (tiers, arms) = arms_for(&backend, &[1, 3, 8]);
        let mut notes = Vec::new();
        let proved = gates(&backend, &tiers, &arms, &mut notes).expect("a correct backend");
        assert_eq!(
            proved,
            "proved at N = 256, K = 1040: 3 configurations within the f64 bound (the host is the contract itself)"
        );
        assert!(notes.iter().any(|n| n.contains("nothing to prove")), "{notes:?}");
        let one = &arms[..1];
        assert_eq!(
            verdict(one, false),
            "proved at N = 256, K = 1040: 1 configuration bit-exact against the host contract and within the f64 bound"
        );
    }

    #[test]
    fn a_wrong_bit_fails_the_gates_before_any_timing() {
        let backend = one_wrong_bit();
        let (tiers, arms) = arms_for(&backend, &[1, 3]);
        let failure = gates(&backend, &tiers, &arms, &mut Vec::new()).expect_err("batch3 is off by one bit");
        assert!(failure.contains("w4a16_gemv_batch3") && failure.contains("not bit-exact"), "{failure}");
    }
}
