//! Counting the tests that skipped for want of hardware, and failing on undeclared skips.
//!
//! Tests report skips through `gemv_backend::conformance::skip`, which appends to the file named
//! by `GEMV_SKIP_LOG`. `cargo xtask test` points it at target/test-skips.log, prints one line
//! counting them at the end, and, when `GEMV_EXPECTED_SKIPS` is set (CI sets it in `.ci/run`),
//! fails if a test skipped for a requirement that list does not name.

use crate::util::root;
use gemv_backend::conformance::skip::{Requirement, SKIP_LOG};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The variable listing the requirements a run may lack (comma-separated keys: `cuda`, `wgpu`,
/// `no-cuda-driver`, `cpu-feature`).
pub const EXPECTED: &str = "GEMV_EXPECTED_SKIPS";

/// Where this run's skips are logged.
pub fn log_path() -> PathBuf {
    root().join("target/test-skips.log")
}

/// Starts a fresh log and points the tests at it.
pub fn start() -> Result<(), String> {
    let path = log_path();
    std::fs::write(&path, "").map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    // SAFETY: xtask is single-threaded here; no other thread reads the environment.
    unsafe { std::env::set_var(SKIP_LOG, &path) };
    Ok(())
}

/// Prints the count per requirement; fails on a skip `GEMV_EXPECTED_SKIPS` does not declare.
pub fn finish() -> Result<(), String> {
    let text = std::fs::read_to_string(log_path()).unwrap_or_default();
    let mut counts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, '\t');
        let (Some(key), Some(test)) = (fields.next(), fields.next()) else { continue };
        counts.entry(key).or_default().push(test);
    }
    let summary: Vec<String> = Requirement::ALL
        .iter()
        .map(|r| format!("{} for want of {}", counts.get(r.key()).map_or(0, Vec::len), r.describe()))
        .collect();
    eprintln!("xtask: tests skipped: {}", summary.join("; "));
    let Ok(expected) = std::env::var(EXPECTED) else { return Ok(()) };
    let declared: Vec<&str> = expected.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if let Some(unknown) = declared.iter().find(|key| Requirement::from_key(key).is_none()) {
        return Err(format!(
            "{EXPECTED} names {unknown:?}, not a requirement (cuda, wgpu, no-cuda-driver, cpu-feature, cublas)"
        ));
    }
    let undeclared: Vec<String> = counts
        .iter()
        .filter(|(key, _)| !declared.contains(key))
        .map(|(key, tests)| format!("{} tests needing {key} ({})", tests.len(), tests.join(", ")))
        .collect();
    if undeclared.is_empty() {
        Ok(())
    } else {
        Err(format!("skips that {EXPECTED}={expected:?} does not declare: {}", undeclared.join("; ")))
    }
}
