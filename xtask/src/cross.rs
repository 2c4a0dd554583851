//! `cargo xtask aarch64`: gemv-cpu built for aarch64 Linux and its tests run under qemu-user, so
//! the NEON kernel and the portable path on an Arm target meet every gate on an x86 machine.
//! Part of `test`.

use crate::provision::apt_install;
use crate::util::{has, run, run_with_env};

const TARGET: &str = "aarch64-unknown-linux-gnu";
const LINKER: &str = "aarch64-linux-gnu-gcc";
const QEMU: &str = "qemu-aarch64";

/// The target's standard library (rustup), a cross linker and qemu-user (Debian's packages),
/// each only when missing.
fn provision() -> Result<(), String> {
    let installed = std::process::Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map_err(|e| format!("cannot start rustup: {e}"))?;
    if !String::from_utf8_lossy(&installed.stdout).lines().any(|line| line.trim() == TARGET) {
        run("rustup", &["target", "add", TARGET])?;
    }
    if !has(LINKER, &["--version"]) || !has(QEMU, &["--version"]) {
        apt_install(&["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross", "qemu-user"])?;
    }
    Ok(())
}

/// Clippy for the target, then gemv-cpu's tests under qemu (the portable path's gate 7, its
/// large shapes, is left out for time: the x86 run has it, and the NEON path's gate 7 runs).
pub fn run_tests() -> Result<(), String> {
    provision()?;
    let env = [
        ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", LINKER),
        ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", "qemu-aarch64 -L /usr/aarch64-linux-gnu"),
    ];
    run_with_env(
        "cargo",
        &["clippy", "-p", "gemv-cpu", "--all-targets", "--target", TARGET, "--", "-D", "warnings"],
        &env,
    )?;
    run_with_env(
        "cargo",
        &["test", "--release", "-p", "gemv-cpu", "--target", TARGET, "--", "--skip", "portable::gate7"],
        &env,
    )
}
