//! Counting the tests that skipped for want of hardware, and failing on undeclared skips.
//!
//! Tests report skips through `gemv_conformance::skip`, which appends to the file named
//! by `GEMV_SKIP_LOG`. `cargo xtask test` points it at target/test-skips.log, prints one line
//! counting them at the end, and, when `GEMV_EXPECTED_SKIPS` is set (CI sets it in `.ci/run`),
//! fails if a test skipped for a requirement that list does not name.

use crate::util::root;
use gemv_conformance::skip::{Requirement, SKIP_LOG};
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
    for line in reasons(&text) {
        eprintln!("xtask:   {line}");
    }
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

/// One line per distinct reason in the skip log (`key\ttest\treason` lines), most frequent first:
/// how many tests skipped for it. A reason's case prefix (`case: reason`) is dropped, so the cases
/// of one test that skip for one reason count together.
fn reasons(log: &str) -> Vec<String> {
    let mut by_reason: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for line in log.lines() {
        let mut fields = line.splitn(3, '\t');
        let (Some(key), Some(_), Some(reason)) = (fields.next(), fields.next(), fields.next()) else { continue };
        let reason = reason.rsplit_once(": ").map_or(reason, |(_, why)| why);
        *by_reason.entry((key, reason)).or_default() += 1;
    }
    let mut rows: Vec<((&str, &str), usize)> = by_reason.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    rows.into_iter().map(|((key, reason), n)| format!("{n} x {key}: {reason}")).collect()
}

#[cfg(test)]
mod tests {
    use super::reasons;

    #[test]
    fn skips_are_counted_per_reason_without_their_case_prefix() {
        let log = "cpu-feature\tpaths::a\tK=48 M=1: neon is an aarch64 path and this CPU is x86_64\n\
                   cpu-feature\tpaths::a\tK=48 M=3: neon is an aarch64 path and this CPU is x86_64\n\
                   cuda\tconf::g1\tbackend cuda is unavailable: no CUDA driver found\n\
                   cpu-feature\tconf::neon\tbackend cpu is unavailable: neon is an aarch64 path and this CPU is x86_64\n";
        assert_eq!(
            reasons(log),
            ["3 x cpu-feature: neon is an aarch64 path and this CPU is x86_64", "1 x cuda: no CUDA driver found"]
        );
    }
}
