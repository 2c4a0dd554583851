//! The `gemv` binary as a user runs it.

use gemv_conformance::skip::{Requirement, skip};
use std::process::Command;

fn gemv(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_gemv")).args(args).output().expect("gemv runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn check_host_passes_every_gate() {
    let (code, stdout, stderr) = gemv(&["check", "--backend", "host"]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    for gate in 1..=9 {
        let line = stdout.lines().find(|l| l.starts_with(&format!("{gate} ")));
        let line = line.unwrap_or_else(|| panic!("gate {gate} missing:\n{stdout}"));
        // Only the gates with an oracle independent of the contract check the host's arithmetic.
        assert_eq!(line.contains("plumbing only"), ![3, 6].contains(&gate), "{line}");
    }
    assert!(stdout.contains("note: host is the reference implementation of the contract"), "{stdout}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

#[test]
fn check_lists_every_case_on_request() {
    let (code, stdout, _) = gemv(&["check", "--gate", "2", "--all-cases"]);
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().filter(|l| l.starts_with("2 ") && l.ends_with("pass")).count(), 5, "{stdout}");
}

#[test]
fn each_gate_prints_once_on_a_terminal_and_with_its_time_in_a_log() {
    let (code, _, stderr) = gemv(&["check", "--backend", "host", "--gate", "2"]);
    assert_eq!(code, 0);
    assert!(stderr.contains("gate 2 (batch8_rt2 = batch8)... 5 cases, 0 failed"), "a log keeps it: {stderr}");
    // A terminal, through util-linux's `script` (a pseudo-terminal for stdout and stderr alike).
    let command = format!("{} check --backend host --gate 2", env!("CARGO_BIN_EXE_gemv"));
    let Ok(output) = Command::new("script").args(["-qec", &command, "/dev/null"]).output() else {
        eprintln!("skipped the terminal case: no `script` command here to make a pseudo-terminal");
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("all 5 cases"), "the table row: {text}");
    assert!(!text.contains("5 cases, 0 failed"), "the progress line is erased on a terminal: {text}");
}

#[test]
fn auto_opens_no_vulkan_driver_where_no_gpu_device_node_exists() {
    let has_node = |dir: &str, prefix: &str| {
        std::fs::read_dir(dir).is_ok_and(|e| e.flatten().any(|e| e.file_name().to_string_lossy().starts_with(prefix)))
    };
    if !cfg!(target_os = "linux") || has_node("/dev/dri", "renderD") || has_node("/dev", "nvidia") {
        eprintln!("skipped: this machine has a GPU device node (or is not Linux), so auto must try wgpu");
        return;
    }
    let (code, _, stderr) = gemv(&["-vv", "check", "--gate", "2"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("auto skipped wgpu: no GPU device node"), "{stderr}");
    assert!(!stderr.contains("wgpu backend opened"), "{stderr}");
}

#[test]
fn check_proves_the_backend_run_and_bench_pick_by_default() {
    // `auto` everywhere: a GPU where there is one, else the CPU backend; never the host oracle
    // checked against itself.
    let (code, stdout, stderr) = gemv(&["check", "--gate", "2"]);
    assert_eq!(code, 0, "{stderr}");
    let first = stdout.lines().next().unwrap_or_default();
    assert!(first.starts_with("conformance on "), "{stdout}");
    assert!(!first.starts_with("conformance on host"), "{stdout}");
    let help = gemv(&["check", "--help"]).1;
    assert!(help.contains("[default: auto]"), "{help}");
}

#[test]
fn unknown_gate_is_a_usage_error() {
    let (code, _, stderr) = gemv(&["check", "--gate", "13"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no gate 13 (gates are 1..=12)"), "{stderr}");
}

#[test]
fn unknown_backend_is_rejected_by_the_parser() {
    let (code, _, stderr) = gemv(&["check", "--backend", "tpu"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("tpu"), "{stderr}");
}

#[test]
fn info_shows_switches_kernels_and_tiers() {
    let (code, stdout, _) = gemv(&["info", "--backend", "host"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("GEMV_NO_EXACT_M_TIERS"));
    assert!(stdout.contains("w4a16_gemv_batch8_rt2"));
    assert!(stdout.contains("batch4 resolved: true"));
    let m5 = stdout.lines().find(|l| l.trim_start().starts_with("5 ")).expect("M = 5 row");
    assert!(m5.contains("batch5"), "{m5}");
}

#[test]
fn info_prints_one_report_for_backends_that_agree() {
    // The CPU backend and the host reference resolve the same kernels and plans: one report
    // headed by both names, not two copies.
    let (code, stdout, stderr) = gemv(&["info"]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    // Each report's heading (the line before its kernel list) names its backends.
    let headings: Vec<Vec<&str>> = lines
        .windows(2)
        .filter(|pair| pair[1] == "  kernels (module, family)")
        .map(|pair| pair[0].trim_end_matches(':').split(", ").collect())
        .collect();
    assert!(headings.iter().any(|names| names.contains(&"cpu") && names.contains(&"host")), "{stdout}");
    let names: Vec<&str> = headings.iter().flatten().copied().collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "a backend reported twice: {stdout}");
}

#[test]
fn kill_switch_is_presence_checked_in_info() {
    let output = Command::new(env!("CARGO_BIN_EXE_gemv"))
        .args(["info", "--backend", "host"])
        .env("GEMV_NO_EXACT_M_TIERS", "0")
        .output()
        .expect("gemv runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let m5 = stdout.lines().find(|l| l.trim_start().starts_with("5 ")).expect("M = 5 row");
    assert!(m5.contains("batch8"), "=0 must still switch exact-M off: {m5}");
}

#[cfg(feature = "emulator")]
#[test]
fn check_cuda_emulator_runs_the_cuda_kernels() {
    let (code, stdout, stderr) = gemv(&["check", "--backend", "cuda-emu", "--gate", "1", "--gate", "5", "--gate", "8"]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("conformance on cuda-emu"), "{stdout}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

#[test]
fn check_cuda_without_a_driver_is_one_line_not_a_panic() {
    if gemv_cuda::driver_present() {
        skip(Requirement::NoCudaDriver, "this machine has a CUDA driver");
        return;
    }
    let (code, _, stderr) = gemv(&["check", "--backend", "cuda"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line expected:\n{stderr}");
    assert!(stderr.contains("no CUDA driver"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn device_selects_the_wgpu_adapter_by_position_and_a_missing_one_is_one_line() {
    let (code, _, stderr) = gemv(&["check", "--backend", "wgpu", "--device", "1000"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no adapter 1000"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line expected:\n{stderr}");
    let (code, _, stderr) = gemv(&["info", "--device", "first"]);
    assert_eq!(code, 2, "not a number: {stderr}");
}

/// `--emulate` picks what the emulator emulates: the architecture it reports follows, the fast
/// family disappears on sm_75, and a malformed capability is a usage error.
#[cfg(feature = "emulator")]
#[test]
fn emulate_chooses_the_emulated_capability() {
    let (code, stdout, stderr) = gemv(&["info", "--backend", "cuda-emu", "--emulate", "8.0"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("sm_80 emulated"), "{stdout}");
    let (code, stdout, stderr) = gemv(&["info", "--backend", "cuda-emu"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("sm_90 emulated"), "the default is sm_90: {stdout}");
    let (code, stdout, stderr) = gemv(&["check", "--backend", "cuda-emu", "--emulate", "7.5", "--gate", "10"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("no fast-family kernel on this backend"), "no fast family on sm_75: {stdout}");
    let (code, _, stderr) = gemv(&["info", "--emulate", "8"]);
    assert_eq!(code, 2, "not MAJOR.MINOR: {stderr}");
    assert!(stderr.contains("MAJOR.MINOR"), "{stderr}");
}

/// `gemv info` says what the tuned table gives a backend: the emulator of sm_90 follows the
/// H200's entry (auto = fast, ring kernels at widths 1 and 2, M = 9 as two launches), sm_80 has no
/// entry, and `GEMV_NO_TUNED_TABLE` turns it off.
#[cfg(feature = "emulator")]
#[test]
fn info_shows_the_tuned_table_of_the_emulated_device() {
    let (code, stdout, stderr) = gemv(&["info", "--backend", "cuda-emu"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("tuned table: NVIDIA H200 (sm_90, docs/measurements/h200-2026-12-04): auto = fast"),
        "{stdout}"
    );
    assert!(stdout.contains("width 1 -> w4a16_gemv_ring3_r4_b2_p (modelled)"), "{stdout}");
    assert!(stdout.contains("auto: fast for every M"), "{stdout}");
    let m9 = stdout.lines().find(|l| l.trim_start().starts_with("9 ")).expect("M = 9 row");
    assert!(m9.contains("w4a16_gemv_batch8_rt2[8 rows] + w4a16_gemv_ring3_r4_b2_p[1 rows]"), "{m9}");
    let (code, stdout, stderr) = gemv(&["info", "--backend", "cuda-emu", "--emulate", "8.0"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("tuned table: nothing for this device"), "{stdout}");
    assert!(stdout.contains("auto: exact for every M"), "{stdout}");
    let output = Command::new(env!("CARGO_BIN_EXE_gemv"))
        .args(["info", "--backend", "cuda-emu"])
        .env("GEMV_NO_TUNED_TABLE", "0")
        .output()
        .expect("gemv runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("tuned table: nothing for this device"), "=0 still turns it off: {stdout}");
    let m9 = stdout.lines().find(|l| l.trim_start().starts_with("9 ")).expect("M = 9 row");
    assert!(m9.contains("w4a16_gemv_batch16[9 rows]"), "{m9}");
}

const SMALL_BENCH: [&str; 10] =
    ["--shape", "64x272", "--rounds", "2", "--launches", "2", "--cold-mb", "1", "--backend", "host"];

#[test]
fn bench_json_has_one_row_per_m_with_positive_times() {
    let mut args = vec!["bench", "--m", "1..3,8", "--json"];
    args.extend(SMALL_BENCH);
    let (code, stdout, stderr) = gemv(&args);
    assert_eq!(code, 0, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("bench --json prints JSON");
    let rows = value["rows"].as_array().expect("rows");
    let ms: Vec<u64> = rows.iter().map(|r| r["m"].as_u64().expect("m")).collect();
    assert_eq!(ms, [1, 2, 3, 8]);
    assert!(rows.iter().all(|r| r["time_us"].as_f64().is_some_and(|t| t > 0.0)), "{stdout}");
    assert_eq!(rows[3]["kernels"], "w4a16_gemv_batch8_rt2");
    assert_eq!(value["backend"], "host");
}

/// `--no-peer` parses; the host has no peer GEMM, so with or without it nothing mentions one.
#[test]
fn bench_takes_no_peer_and_the_host_prints_no_peer_row() {
    for extra in [&[][..], &["--no-peer"][..]] {
        let mut args = vec!["bench", "--m", "1"];
        args.extend(extra);
        args.extend(SMALL_BENCH);
        let (code, stdout, stderr) = gemv(&args);
        assert_eq!(code, 0, "{stderr}");
        assert!(!stdout.contains("peer"), "{stdout}");
    }
}

#[test]
fn a_forced_tier_runs_where_it_covers_m_beside_the_plan_and_plots() {
    let plot = std::env::temp_dir().join(format!("gemv-bench-{}.svg", std::process::id()));
    let plot_arg = plot.to_string_lossy().into_owned();
    let mut args = vec!["bench", "--m", "4..9", "--tier", "w4a16_gemv_batch8", "--tier", "plan", "--plot", &plot_arg];
    args.extend(SMALL_BENCH);
    let (code, stdout, stderr) = gemv(&args);
    assert_eq!(code, 0, "{stderr}");
    let batch8_rows = stdout.lines().filter(|l| l.starts_with("64x272") && l.contains(" w4a16_gemv_batch8 ")).count();
    assert_eq!(batch8_rows, 5, "batch8 at M = 4..8:\n{stdout}");
    assert!(stdout.contains("w4a16_gemv_batch8 skipped at M = 9"), "{stdout}");
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert_eq!(svg.matches("<polyline").count(), 2, "one line per tier");
    let _ = std::fs::remove_file(plot);
}

#[test]
fn bench_rejects_bad_arguments_with_exit_2() {
    for (args, needle) in [
        (vec!["bench", "--m", "0"], "M >= 1"),
        (vec!["bench", "--m", "5..2"], "empty range"),
        (vec!["bench", "--shape", "64x24"], "multiple of 16"),
        (vec!["bench", "--shape", "qkvv"], "expected NxK"),
        (vec!["bench", "--tier", "w4a16_gemv_batch9", "--backend", "host"], "not a kernel"),
        // Each of these once crashed, hung or printed nonsense; now each is refused before any work.
        (vec!["bench", "--m", "1..18446744073709551615"], "above the largest M the bench times (4096)"),
        (vec!["bench", "--m", "1..2000"], "more than 1024 values of M"),
        (vec!["bench", "--rounds", "0"], "outside 1..=100000"),
        (vec!["bench", "--launches", "0"], "outside 1..=100000"),
        (vec!["bench", "--cold-mb", "100000000000"], "more than 1048576 MB"),
        (vec!["bench", "--peak-gbps", "0"], "finite number of GB/s above 0"),
        (vec!["bench", "--peak-gbps=-5"], "finite number of GB/s above 0"),
        (vec!["bench", "--peak-gbps", "NaN"], "finite number of GB/s above 0"),
        (vec!["bench", "--backend", "host", "--shape", "1000000x1000000"], "of memory and"),
        (vec!["bench", "--backend", "host", "--cold-mb", "1048576"], "of device buffers in host memory"),
        // Options of the --shape runs that --moe would otherwise ignore.
        (vec!["bench", "--moe", "4,2,64,1024", "--json"], "--json: applies to the --shape runs"),
        (vec!["bench", "--moe", "4,2,64,1024", "--tier", "plan"], "--tier"),
        // --moe times the families --family names, each only where the device has it.
        (vec!["bench", "--backend", "host", "--moe", "4,2,64,1024", "--family", "fast"], "--family: the fast kernel"),
        (vec!["bench", "--grouped-kernel", "w4a16_grouped_ring3_r2_b2"], "add --moe LAYER"),
        (vec!["bench", "--moe", "4,2,64,1024", "--grouped-kernel", "w4a16_gemv"], "not a grouped kernel"),
        (
            vec!["bench", "--backend", "host", "--moe", "4,2,64,1024", "--grouped-kernel", "w4a16_fast_grouped_m8"],
            "is of the fast family; add --family fast",
        ),
        // A chain feeds each Y to the next step as X: square shapes only, and its own table.
        (vec!["bench", "--backend", "host", "--chain", "4", "--shape", "64x128"], "needs square shapes"),
        (vec!["bench", "--chain", "1"], "a chain has 2..=64"),
        (vec!["bench", "--chain", "4", "--json"], "--json: applies to the single-layer runs"),
        (vec!["bench", "--chain", "4", "--moe", "4,2,64,1024"], "--moe: applies to the single-layer runs"),
    ] {
        let (code, _, stderr) = gemv(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn check_wgpu_proves_the_wgsl_kernels_or_says_why_not() {
    let (code, stdout, stderr) = gemv(&["check", "--backend", "wgpu", "--gate", "6", "--gate", "2"]);
    if code == 2 && stderr.contains("unavailable") {
        skip(Requirement::WgpuAdapter, stderr.trim());
        return;
    }
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("conformance on wgpu"), "{stdout}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

#[test]
fn bench_on_the_host_says_it_is_not_a_gpu() {
    let mut args = vec!["bench", "--m", "1"];
    args.extend(SMALL_BENCH);
    let (code, stdout, stderr) = gemv(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("note: host (host CPU"), "{stdout}");
    assert!(stdout.contains("is not a GPU"), "{stdout}");
    assert!(stdout.contains("the bit-exact gate has nothing to prove there"), "{stdout}");
    // No column that no row fills: the host has no nominal peak, so no % peak; given one, it shows.
    let header = stdout.lines().find(|l| l.starts_with("shape")).unwrap_or_default();
    assert!(!header.contains("% peak") && header.ends_with("% copy"), "{stdout}");
    args.extend(["--peak-gbps", "100"]);
    let (code, stdout, stderr) = gemv(&args);
    assert_eq!(code, 0, "{stderr}");
    let header = stdout.lines().find(|l| l.starts_with("shape")).unwrap_or_default();
    assert!(header.contains("% peak"), "{stdout}");
}

#[test]
fn a_headless_wgpu_probe_prints_no_display_errors() {
    let output = Command::new(env!("CARGO_BIN_EXE_gemv"))
        .args(["info", "--backend", "wgpu"])
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("NODEVICE_SELECT")
        .output()
        .expect("gemv runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("XDG_RUNTIME_DIR"), "a successful probe printed a display error:\n{stderr}");
}

#[test]
fn fast_family_gates_say_not_applicable_on_the_host() {
    let (code, stdout, _) = gemv(&["check", "--backend", "host", "--gate", "10", "--gate", "11"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.contains("no fast-family kernel on this backend") && l.ends_with(" n/a")).count(),
        2,
        "{stdout}"
    );
}

#[cfg(feature = "emulator")]
#[test]
fn fast_family_gates_run_on_the_emulator() {
    let (code, stdout, _) = gemv(&["check", "--backend", "cuda-emu", "--gate", "11"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("11 ") && l.contains("all ") && l.ends_with("pass")), "{stdout}");
}

/// `--chain` on the emulator emulating sm_90: every step of every arm proved against the host
/// contract (the dependent arms run the builds for programmatic dependent launch, whose reads of
/// X before their wait the emulator would fault; the graph arms replay their capture), then a row
/// per M and family with every arm and its ratio to the serialized one; below sm_90 there is no
/// dependent arm, and a note says why.
#[cfg(feature = "emulator")]
#[test]
fn the_chain_bench_times_serialized_and_dependent_launches_on_the_emulator() {
    let args = ["bench", "--backend", "cuda-emu", "--chain", "3", "--shape", "64x64", "--m", "1,3"];
    let mut both = args.to_vec();
    both.extend(["--rounds", "1", "--launches", "1", "--cold-mb", "0", "--family", "exact", "--family", "fast"]);
    let (code, stdout, stderr) = gemv(&both);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stderr.contains("proved every step of the serialized, dependent, graph, dependent graph arms"), "{stderr}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|line| line.starts_with("| 64x64 |"))
        .map(|line| line.split('|').map(str::trim).filter(|f| !f.is_empty()).collect())
        .collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    for row in &rows {
        // shape, M, family, kernels, four arms, three ratios: every time a positive number.
        assert_eq!(row.len(), 11, "{row:?}");
        assert!(row[4..].iter().all(|f| f.parse::<f64>().is_ok_and(|v| v > 0.0)), "{row:?}");
    }
    let mut older = args.to_vec();
    older.extend(["--rounds", "1", "--launches", "1", "--cold-mb", "0", "--emulate", "8.9"]);
    let (code, stdout, stderr) = gemv(&older);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("note: no dependent arm: cuda-emu emulating 8.9"), "{stdout}");
    assert!(!stdout.contains("dependent / serialized") && stdout.contains("| graph / serialized |"), "{stdout}");
}

/// `bench --moe` with two families proves and times each family's grouped and pair-by-pair
/// launches, each compared with its own family's grouped launch, and each forced grouped kernel
/// beside them.
#[cfg(feature = "emulator")]
#[test]
fn the_moe_bench_times_each_family_it_is_given_on_the_emulator() {
    let args = ["bench", "--backend", "cuda-emu", "--moe", "4,2,32,256", "--m", "1,3", "--rounds", "1"];
    let mut both = args.to_vec();
    both.extend(["--launches", "1", "--family", "exact", "--family", "fast"]);
    both.extend(["--grouped-kernel", "w4a16_grouped_batch8_ring2_r2_b1", "--grouped-kernel", "w4a16_fast_grouped_m16"]);
    let (code, stdout, stderr) = gemv(&both);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("proved the fast family") && stderr.contains("grouped launch bit-exact with them"),
        "{stderr}"
    );
    // A row: layer, arm (one or two words), M, ...
    let arm_of = |line: &str| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields[2] {
            "fast" => format!("{} fast", fields[1]),
            name if name.starts_with("w4a16") => format!("{} {name}", fields[1]),
            _ => fields[1].to_string(),
        }
    };
    let forced = ["grouped w4a16_grouped_batch8_ring2_r2_b1", "grouped w4a16_fast_grouped_m16"];
    for arm in ["grouped", "separate", "grouped fast", "separate fast", forced[0], forced[1]] {
        let rows = stdout.lines().filter(|line| line.starts_with("4,2,32x256") && arm_of(line) == arm).count();
        assert_eq!(rows, 2, "{arm:?}: one row each M in\n{stdout}");
    }
    // Every arm but the selector's grouped launches has a ratio to its family's.
    let compared = stdout.lines().filter(|line| line.contains("separate") || line.contains("grouped w4a16"));
    assert!(compared.clone().count() == 8 && compared.clone().all(|line| line.trim_end().ends_with('x')), "{stdout}");
}

/// The CPU bench says which SIMD path ran each M: calibrated by default (one line, each M with
/// the path chosen and the others' times), or forced by GEMV_CPU_SIMD.
#[test]
fn the_cpu_bench_names_the_path_of_each_m_and_how_it_was_chosen() {
    let small = ["--shape", "64x272", "--rounds", "2", "--launches", "2", "--cold-mb", "1", "--backend", "cpu"];
    let mut args = vec!["bench", "--m", "1,3"];
    args.extend(small);
    let output =
        Command::new(env!("CARGO_BIN_EXE_gemv")).args(&args).env_remove("GEMV_CPU_SIMD").output().expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("host CPU (path calibrated per M"), "{stdout}");
    assert!(stdout.contains("% copy = effective bandwidth over a copy timed in the same run"), "{stdout}");
    let (_, help, _) = gemv(&["bench", "--help"]);
    assert!(help.contains("% copy (of the bandwidth of a copy of the weights timed in every round"), "{help}");
    let note = stdout.lines().find(|l| l.starts_with("note: cpu path per M, calibrated")).expect("the paths' note");
    assert!(note.contains("M = 1: ") && note.contains("M = 3: "), "{note}");
    let output =
        Command::new(env!("CARGO_BIN_EXE_gemv")).args(&args).env("GEMV_CPU_SIMD", "portable").output().expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("note: cpu path: portable, forced by GEMV_CPU_SIMD for every M"), "{stdout}");
    assert!(!stdout.contains("calibrated"), "{stdout}");
}

#[test]
fn info_shows_the_cpu_path_of_every_m() {
    let output = Command::new(env!("CARGO_BIN_EXE_gemv"))
        .args(["info", "--backend", "cpu"])
        .env_remove("GEMV_CPU_SIMD")
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("cpu: SIMD path per M, calibrated"), "{stdout}");
    for m in 1..=16 {
        assert!(stdout.lines().any(|l| l.trim_start().starts_with(&format!("M = {m}: "))), "M = {m}:\n{stdout}");
    }
}

/// The bench says what its proof established before it times anything, and a log written to a
/// pipe or file carries no colour codes.
#[test]
fn the_bench_states_its_proof_and_a_redirected_log_is_plain() {
    let mut args = vec!["-v", "bench", "--m", "1,2"];
    args.extend(["--shape", "64x272", "--rounds", "2", "--launches", "2", "--cold-mb", "1", "--backend", "cpu"]);
    let (code, stdout, stderr) = gemv(&args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "bench: proved at N = 256, K = 1040: 2 configurations bit-exact against the host contract and within the \
             f64 bound"
        ),
        "{stderr}"
    );
    assert!(stderr.contains(" INFO "), "-v logs at info: {stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("bench 64x272: ") && l.ends_with(" timings")), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "colour codes in a redirected log: {stderr:?}");
}
