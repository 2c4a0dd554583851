//! `gemv bench`: the main job. Proves the chosen tiers first (bit-exact against the host
//! reference at a small shape, and the f64 bound), then times them with the performance
//! protocol of docs/benchmarks.md and prints a table: tier, M, time, effective GB/s, % of peak.

#[cfg(feature = "ggml-peer")]
mod ggml;
mod memory;
mod peers;
mod plot;
mod protocol;

use crate::backends::{BackendChoice, open};
use crate::error::CliError;
use gemv_backend::{DeviceKind, DeviceMatrix, GpuBackend, KernelHandle, ResolvedTiers, conformance};
use gemv_core::{
    FAST_TIERS, Family, FamilyChoice, KillSwitches, TIERS, WIDEST_TIER, f64_reference, gemv_contract, host_threads,
    kernel_spec,
};
use std::io::Write;
use std::path::PathBuf;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Backend.
    pub backend: BackendChoice,
    /// (label, N, K).
    pub shapes: Vec<(String, usize, usize)>,
    /// Rows per launch to sweep.
    pub ms: Vec<usize>,
    /// Forced kernels ("plan" or empty = the dispatch plan).
    pub tiers: Vec<String>,
    /// The families the plan runs in, side by side (empty = auto).
    pub families: Vec<FamilyChoice>,
    /// Nominal peak in GB/s, overriding the device's.
    pub peak_gbps: Option<f64>,
    /// JSON instead of a table.
    pub json: bool,
    /// Write an SVG plot here.
    pub plot: Option<PathBuf>,
    /// Interleaved rounds (median over them).
    pub rounds: usize,
    /// Back-to-back launches per timing.
    pub launches: usize,
    /// Bytes of weight copies to rotate through (cold weights).
    pub cold_bytes: usize,
    /// Also time the backend's peer GEMM (cuBLAS BF16 on CUDA) at each M.
    pub peer: bool,
}

/// One timed configuration: a tier choice at one M.
#[derive(Debug, Clone)]
pub struct Arm {
    /// "plan" (the exact family's plan), "fast" (the fast family's plan) or the forced kernel.
    pub tier: String,
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

/// Parses `NxK` or a named shape of the 27B-class model.
pub fn parse_shape(text: &str) -> Result<(String, usize, usize), String> {
    match text {
        "qkv" | "o" | "qkv/o" => return Ok(("qkv/o".into(), 5120, 5120)),
        "ffn-up" | "up" => return Ok(("ffn-up".into(), 17408, 5120)),
        "ffn-down" | "down" => return Ok(("ffn-down".into(), 5120, 17408)),
        _ => {}
    }
    let (n, k) = text.split_once(['x', 'X']).ok_or(format!("shape {text:?}: expected NxK or qkv, ffn-up, ffn-down"))?;
    let parse =
        |s: &str, what: &str| s.trim().parse::<usize>().map_err(|_| format!("shape {text:?}: {what} is not a number"));
    let (n, k) = (parse(n, "N")?, parse(k, "K")?);
    gemv_core::validate_weight_shape(n, k).map_err(|e| format!("shape {text:?}: {e}"))?;
    Ok((format!("{n}x{k}"), n, k))
}

/// The largest M `gemv bench` times (the plan splits it into launches of at most 32 rows).
pub const MAX_BENCH_M: usize = 4096;

/// The most M values one `--m` list may hold.
pub const MAX_BENCH_MS: usize = 1024;

/// Parses `1..8,16,32`. Every M lies in 1..=[`MAX_BENCH_M`] and the list holds at most
/// [`MAX_BENCH_MS`] values; both are checked before the list is built.
pub fn parse_ms(text: &str) -> Result<Vec<usize>, String> {
    let mut ms = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let number = |s: &str| {
            let m = s.trim().parse::<usize>().map_err(|_| format!("--m {text:?}: {s:?} is not a number"))?;
            if m > MAX_BENCH_M {
                return Err(format!("--m {text:?}: M = {m} is above the largest M the bench times ({MAX_BENCH_M})"));
            }
            Ok(m)
        };
        let (a, b) = match part.split_once("..") {
            Some((a, b)) => (number(a)?, number(b.trim_start_matches('='))?),
            None => (number(part)?, number(part)?),
        };
        if a > b {
            return Err(format!("--m {text:?}: empty range {part}"));
        }
        if ms.len() + (b - a + 1) > MAX_BENCH_MS {
            return Err(format!("--m {text:?}: more than {MAX_BENCH_MS} values of M"));
        }
        ms.extend(a..=b);
    }
    if ms.is_empty() || ms.contains(&0) {
        return Err(format!("--m {text:?}: need M >= 1"));
    }
    Ok(ms)
}

/// The most rounds or launches per timing `gemv bench` accepts.
pub const MAX_REPEATS: usize = 100_000;

/// Parses `--rounds` and `--launches`: 1..=[`MAX_REPEATS`].
pub fn parse_repeats(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_REPEATS).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is outside 1..={MAX_REPEATS}")),
        Err(_) => Err(format!("{text:?} is not a whole number")),
    }
}

/// The largest `--cold-mb` (1 TiB).
pub const MAX_COLD_MB: usize = 1 << 20;

/// Parses `--cold-mb`: 0..=[`MAX_COLD_MB`] megabytes.
pub fn parse_cold_mb(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(mb) if mb <= MAX_COLD_MB => Ok(mb),
        Ok(mb) => Err(format!("{mb} MB is more than {MAX_COLD_MB} MB")),
        Err(_) => Err(format!("{text:?} is not a whole number of megabytes")),
    }
}

/// Parses `--peak-gbps`: a finite bandwidth above zero.
pub fn parse_peak_gbps(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(gbps) if gbps.is_finite() && gbps > 0.0 => Ok(gbps),
        Ok(_) => Err(format!("{text:?}: the peak must be a finite number of GB/s above 0")),
        Err(_) => Err(format!("{text:?} is not a number")),
    }
}

/// `auto`, `exact` or `fast`, for `--family`.
pub fn parse_family(text: &str) -> Result<FamilyChoice, String> {
    match text {
        "auto" => Ok(FamilyChoice::Auto),
        "exact" => Ok(FamilyChoice::Exact),
        "fast" => Ok(FamilyChoice::Fast),
        other => Err(format!("{other:?}: the family is auto, exact or fast")),
    }
}

fn arms(
    tiers: &ResolvedTiers,
    backend: &dyn GpuBackend,
    options: &BenchOptions,
    notes: &mut Vec<String>,
) -> Result<Vec<Arm>, String> {
    let choices: Vec<String> = if options.tiers.is_empty() { vec!["plan".into()] } else { options.tiers.clone() };
    let families = if options.families.is_empty() { vec![FamilyChoice::Auto] } else { options.families.clone() };
    let mut arms = Vec::new();
    for choice in &choices {
        for &m in &options.ms {
            if choice == "plan" {
                for &family_choice in &families {
                    let family = tiers.family(m, family_choice).map_err(|e| format!("--family: {e}"))?;
                    arms.push(plan_arm(tiers, family, m)?);
                }
                continue;
            }
            let spec = kernel_spec(choice).ok_or(format!("--tier {choice:?} is not a kernel of the registry"))?;
            if m > spec.max_m {
                notes.push(format!("{choice} skipped at M = {m} (its width is {})", spec.max_m));
                continue;
            }
            let handle = backend.lookup_kernel(spec.module, spec.name);
            if !handle.is_resolved() {
                return Err(format!("--tier {choice}: not present on backend {}", backend.name()));
            }
            arms.push(Arm {
                tier: choice.clone(),
                family: spec.family,
                kernels: choice.clone(),
                m,
                launches: vec![(handle, 0, m)],
            });
        }
    }
    Ok(arms)
}

/// The dispatch plan's launches for `m` in `family`.
fn plan_arm(tiers: &ResolvedTiers, family: Family, m: usize) -> Result<Arm, String> {
    let (plan, label) = match family {
        Family::Exact => (tiers.plan(m, WIDEST_TIER), "plan"),
        Family::Fast => (tiers.fast_plan(m), "fast"),
    };
    let plan = plan.map_err(|e| format!("M = {m}: {e}"))?;
    let (names, launches): (Vec<&str>, Vec<_>) = plan
        .iter()
        .map(|l| match family {
            Family::Exact => {
                (TIERS[l.tier].kernel_name(tiers.switches()), (tiers.handle(l.tier), l.row_offset, l.rows))
            }
            Family::Fast => (FAST_TIERS[l.tier].kernel, (tiers.fast_handle(l.tier), l.row_offset, l.rows)),
        })
        .unzip();
    Ok(Arm { tier: label.into(), family, kernels: names.join("+"), m, launches })
}

/// The correctness gates before any timing: bit-exact against the host contract and within
/// the f64 bound, at N = 256, K = 1040 (K % 32 != 0), for every arm. On the host reference the
/// bit-exact gate would compare the contract with itself: only the f64 bound is checked there,
/// and a note says so.
fn gates(backend: &dyn GpuBackend, tiers: &ResolvedTiers, arms: &[Arm], notes: &mut Vec<String>) -> Result<(), String> {
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
        let found = match arm.tier.as_str() {
            "plan" => matrix.gemv(tiers, &x, arm.m, WIDEST_TIER),
            "fast" => matrix.gemv_fast(tiers, &x, arm.m),
            _ => matrix.gemv_with(arm.launches[0].0, &x, arm.m),
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
    Ok(())
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
    if !options.families.is_empty() && !options.tiers.is_empty() && !options.tiers.iter().any(|t| t == "plan") {
        return Err(CliError::BadArgument {
            argument: "--family",
            reason: "chooses the family of the dispatch plan, and --tier forces kernels without it (add --tier plan \
                     to time the plan too)"
                .into(),
        });
    }
    let backend = open(options.backend).map_err(CliError::BackendUnavailable)?;
    let info = backend.device_info();
    let tiers = ResolvedTiers::resolve(backend.as_ref(), KillSwitches::process());
    let mut notes = Vec::new();
    let arms = arms(&tiers, backend.as_ref(), options, &mut notes).map_err(CliError::Usage)?;
    if arms.is_empty() {
        return Err(CliError::Usage("nothing to run: no tier covers the requested M".into()));
    }
    let max_m = arms.iter().map(|a| a.m).max().unwrap_or(1);
    for (label, n, k) in &options.shapes {
        memory::check(&info, label, *n, *k, max_m, options.cold_bytes)?;
    }
    eprintln!("bench: proving {} configuration(s) on {} before timing...", arms.len(), info.name);
    let stdout_error = |e: std::io::Error| CliError::Stdout(e.to_string());
    if let Err(failure) = gates(backend.as_ref(), &tiers, &arms, &mut notes) {
        writeln!(out, "{failure}\nno numbers printed: a correctness gate failed").map_err(stdout_error)?;
        return Ok(false);
    }
    let peak = options.peak_gbps.or(info.peak_bandwidth_gbps);
    let mut results = Vec::new();
    for (label, n, k) in &options.shapes {
        results.extend(
            protocol::measure(backend.as_ref(), &arms, label, *n, *k, options, peak, &mut notes)
                .map_err(CliError::Backend)?,
        );
    }
    if options.json {
        writeln!(out, "{}", protocol::to_json(&info, options, peak, &results, &notes)).map_err(stdout_error)?;
    } else {
        protocol::print_table(out, &info, options, peak, &results, &notes).map_err(stdout_error)?;
    }
    if let Some(path) = &options.plot {
        plot::write(path, &results, peak)
            .map_err(|e| CliError::Io { path: path.clone(), error: format!("--plot: {e}") })?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
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
            cold_bytes: 0,
            peer: true,
        }
    }

    #[cfg(feature = "emulator")]
    #[test]
    fn families_side_by_side_are_each_proved_by_their_own_gate() {
        let backend = gemv_cuda::CudaEmulator::new();
        let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
        let options = options_for(&[1, 9], vec![FamilyChoice::Exact, FamilyChoice::Fast]);
        let arms = arms(&tiers, &backend, &options, &mut Vec::new()).expect("arms");
        let labels: Vec<(String, String, usize)> =
            arms.iter().map(|a| (a.tier.clone(), a.kernels.clone(), a.m)).collect();
        assert_eq!(
            labels,
            vec![
                ("plan".into(), "w4a16_gemv".into(), 1),
                ("fast".into(), "w4a16_fast_m8".into(), 1),
                ("plan".into(), "w4a16_gemv_batch16".into(), 9),
                ("fast".into(), "w4a16_fast_m16".into(), 9),
            ]
        );
        assert_eq!(gates(&backend, &tiers, &arms, &mut Vec::new()), Ok(()));
    }

    #[test]
    fn the_fast_family_where_it_is_absent_is_refused_before_any_work() {
        let backend = MockBackend::new();
        let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
        let failure = arms(&tiers, &backend, &options_for(&[4], vec![FamilyChoice::Fast]), &mut Vec::new())
            .expect_err("the mock has no fast family");
        assert!(failure.contains("--family: the fast kernel family is not available"), "{failure}");
        assert_eq!(parse_family("fast"), Ok(FamilyChoice::Fast));
        assert!(parse_family("tensor").is_err());
    }

    #[test]
    fn gates_pass_on_a_correct_backend() {
        let backend = MockBackend::new();
        let (tiers, arms) = arms_for(&backend, &[1, 3, 8]);
        let mut notes = Vec::new();
        assert_eq!(gates(&backend, &tiers, &arms, &mut notes), Ok(()));
        assert!(notes.iter().any(|n| n.contains("nothing to prove")), "{notes:?}");
    }

    #[test]
    fn a_wrong_bit_fails_the_gates_before_any_timing() {
        let backend = one_wrong_bit();
        let (tiers, arms) = arms_for(&backend, &[1, 3]);
        let failure = gates(&backend, &tiers, &arms, &mut Vec::new()).expect_err("batch3 is off by one bit");
        assert!(failure.contains("w4a16_gemv_batch3") && failure.contains("not bit-exact"), "{failure}");
    }

    #[test]
    fn shapes_and_m_lists_parse() {
        assert_eq!(parse_shape("ffn-up"), Ok(("ffn-up".into(), 17408, 5120)));
        assert_eq!(parse_shape("7x48"), Ok(("7x48".into(), 7, 48)));
        assert!(parse_shape("7x40").is_err());
        assert_eq!(parse_ms("1..3,8,16"), Ok(vec![1, 2, 3, 8, 16]));
        assert_eq!(parse_ms("2..=4"), Ok(vec![2, 3, 4]));
    }

    /// Random option values: every parser returns, never panics, and what it accepts is inside
    /// its documented limits.
    #[test]
    fn option_parsers_never_panic_and_keep_their_limits() {
        const ALPHABET: &[u8] = b"0123456789..,=xX-+eE qkvNaNinf";
        let mut state = 0x1234_5678u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        for _ in 0..20_000 {
            let len = next() % 24;
            let text: String = (0..len).map(|_| ALPHABET[next() % ALPHABET.len()] as char).collect();
            if let Ok(ms) = parse_ms(&text) {
                assert!(!ms.is_empty() && ms.len() <= MAX_BENCH_MS, "{text:?}");
                assert!(ms.iter().all(|&m| (1..=MAX_BENCH_M).contains(&m)), "{text:?}");
            }
            if let Ok((_, n, k)) = parse_shape(&text) {
                assert!(n >= 1 && k >= 16 && k % 16 == 0, "{text:?}");
            }
            if let Ok(r) = parse_repeats(&text) {
                assert!((1..=MAX_REPEATS).contains(&r), "{text:?}");
            }
            if let Ok(mb) = parse_cold_mb(&text) {
                assert!(mb <= MAX_COLD_MB, "{text:?}");
            }
            if let Ok(gbps) = parse_peak_gbps(&text) {
                assert!(gbps.is_finite() && gbps > 0.0, "{text:?}");
            }
        }
        // Values at and past each limit.
        assert!(parse_ms(&format!("{MAX_BENCH_M}")).is_ok() && parse_ms(&format!("{}", MAX_BENCH_M + 1)).is_err());
        assert!(parse_repeats("100000").is_ok() && parse_repeats("100001").is_err() && parse_repeats("0").is_err());
        assert!(parse_cold_mb("1048576").is_ok() && parse_cold_mb("1048577").is_err());
        assert!(parse_peak_gbps("inf").is_err() && parse_peak_gbps("-0").is_err() && parse_peak_gbps("4800").is_ok());
    }
}
