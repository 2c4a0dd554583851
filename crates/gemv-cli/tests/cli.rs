//! The `gemv` binary as a user runs it.

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
    for gate in 1..=8 {
        assert!(stdout.lines().any(|l| l.starts_with(&format!("{gate} "))), "gate {gate} missing:\n{stdout}");
    }
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

#[test]
fn check_lists_every_case_on_request() {
    let (code, stdout, _) = gemv(&["check", "--gate", "2", "--all-cases"]);
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().filter(|l| l.starts_with("2 ") && l.ends_with("pass")).count(), 3, "{stdout}");
}

#[test]
fn unknown_gate_is_a_usage_error() {
    let (code, _, stderr) = gemv(&["check", "--gate", "9"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no gate 9"), "{stderr}");
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
    assert!(stdout.contains("has_base (batch4 resolved): true"));
    let m5 = stdout.lines().find(|l| l.trim_start().starts_with("5 ")).expect("M = 5 row");
    assert!(m5.contains("batch5"), "{m5}");
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
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    let (code, _, stderr) = gemv(&["check", "--backend", "cuda"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line expected:\n{stderr}");
    assert!(stderr.contains("no CUDA driver"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
