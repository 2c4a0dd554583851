//! `cargo xtask mutants` without `--kernels`: cargo-mutants over the Rust areas whose every missed
//! mutant must be killed or argued equivalent.

use crate::util::{self, has};

const CARGO_MUTANTS: &str = "cargo-mutants@27.1.0";

/// The areas whose missed mutants must each be killed or justified: the selector, the dispatch
/// plan, the codecs and argument validation (with the test packages that judge them).
const SCOPES: [(&str, &[&str], &[&str]); 2] = [
    (
        "gemv-core",
        &[
            "crates/gemv-core/src/tiers.rs",
            "crates/gemv-core/src/plan.rs",
            "crates/gemv-core/src/kill_switch.rs",
            "crates/gemv-core/src/codec/*.rs",
            "crates/gemv-core/src/shape.rs",
            "crates/gemv-core/src/matrix.rs",
        ],
        &["gemv-core"],
    ),
    (
        "gemv-backend",
        &[
            "crates/gemv-backend/src/args.rs",
            "crates/gemv-backend/src/handle.rs",
            "crates/gemv-backend/src/tiers.rs",
            "crates/gemv-backend/src/buffer.rs",
            "crates/gemv-backend/src/buffer_table.rs",
        ],
        &["gemv-backend", "gemv-mock"],
    ),
];

/// cargo-mutants over the named areas (`--all`: every file of both crates, about 1,100 mutants
/// and many hours), each judged by the tests that cover it. Results in `target/mutants-<crate>/`.
pub(super) fn run(all: bool) -> Result<(), String> {
    if !has("cargo", &["mutants", "--version"]) {
        util::run("cargo", &["install", "--locked", CARGO_MUTANTS])?;
    }
    for (package, files, test_packages) in SCOPES {
        let output = format!("target/mutants-{package}");
        let mut args = vec!["mutants", "--package", package, "--output", &output, "--timeout", "300"];
        if !all {
            for file in files {
                args.extend(["--file", file]);
            }
        }
        let all_tests = ["gemv-core", "gemv-backend", "gemv-mock"];
        for test_package in if all { &all_tests[..] } else { test_packages } {
            args.extend(["--test-package", test_package]);
        }
        // cargo-mutants exits non-zero when mutants are missed; the report is the result.
        if let Err(error) = util::run("cargo", &args) {
            eprintln!("xtask: {package}: {error}; see {output}/mutants.out/missed.txt");
        }
    }
    Ok(())
}
