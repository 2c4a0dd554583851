//! `cargo xtask <command>`: the project's automation, one binary, no dependencies.
//!
//! - `test`: provision what is missing, then `cargo fmt --check`, clippy with `-D warnings`, and
//!   `cargo test --workspace`. The README's test command; `.ci/run` calls it.
//! - `fixtures [--check]`: regenerate the ml_dtypes codec fixture in a venv under target/.

mod fixtures;
mod provision;
mod util;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test              provision tools, then fmt --check, clippy -D warnings, cargo test --workspace
  fixtures [--check] regenerate crates/gemv-core/tests/fixtures/codecs.tsv with ml_dtypes
                    (--check: fail if the committed fixture differs)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("fixtures") => fixtures::regenerate(args.iter().any(|a| a == "--check")),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?}\n\n{USAGE}")),
        None => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn test() -> Result<(), String> {
    provision::rust_components()?;
    provision::host_compiler()?;
    util::run("cargo", &["fmt", "--all", "--", "--check"])?;
    util::run("cargo", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    util::run("cargo", &["test", "--workspace"])?;
    // Release-only tests: real shapes under the emulator.
    util::run(
        "cargo",
        &["test", "--release", "-p", "gemv-cuda", "--features", "emulator", "--test", "emulator_real_shape"],
    )?;
    Ok(())
}
