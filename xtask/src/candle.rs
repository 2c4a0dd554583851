//! `cargo xtask candle [--full]`: checks `crates/gemv-candle` (the NVFP4 linear layer for candle,
//! outside the workspace): fmt, clippy with and without its `cuda` feature (candle-core's `cuda`,
//! in one dependency graph with gemv-cuda), its tests on the CPU (the CUDA test skips without a
//! GPU), and `cargo package` of it, verified by building the tarball.
//!
//! candle's build scripts compile its CUDA kernels with nvcc, about 35 files, which takes many
//! minutes on a 2-core machine, though type-checking needs none of their output. By
//! default a stand-in nvcc (`xtask/scripts/nvcc_type_check.sh`) writes empty outputs for those
//! compilations and hands every other question (the version cudarc's build script asks for) to
//! the pinned nvcc: the Rust code is checked against candle's real API in seconds. `--full`
//! compiles candle's kernels for real (for sm_80 only).

use crate::cuda_toolchain::Toolchain;
use crate::util::{root, run, run_with_env};
use std::path::PathBuf;

const MANIFEST: &str = "crates/gemv-candle/Cargo.toml";
const TARGET_DIR: &str = "target/gemv-candle";

pub fn run_check(full: bool) -> Result<(), String> {
    run("cargo", &["fmt", "--manifest-path", MANIFEST, "--", "--check"])?;
    let cpu = ["--manifest-path", MANIFEST, "--target-dir", TARGET_DIR];
    run("cargo", &[&["clippy", "--quiet", "--all-targets"], &cpu[..], &["--", "-D", "warnings"]].concat())?;
    run("cargo", &[&["test", "--quiet"], &cpu[..]].concat())?;
    package()?;
    let env = cuda_build_env(full)?;
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let cuda_target = format!("{TARGET_DIR}-cuda");
    run_with_env(
        "cargo",
        &[
            "clippy",
            "--quiet",
            "--all-targets",
            "--features",
            "cuda",
            "--manifest-path",
            MANIFEST,
            "--target-dir",
            &cuda_target,
            "--",
            "-D",
            "warnings",
        ],
        &env,
    )
}

/// The gemv crates gemv-candle needs, directly or through each other (its normal and dev
/// dependencies with their own).
const GEMV_DEPENDENCIES: [(&str, &str); 6] = [
    ("gemv-core", "crates/gemv-core"),
    ("gemv-backend", "crates/gemv-backend"),
    ("gemv-kernels", "kernels"),
    ("gemv-cpu", "crates/gemv-cpu"),
    ("gemv-cuda", "crates/gemv-cuda"),
    ("gemv-conformance", "crates/gemv-conformance"),
];

/// `cargo package` of gemv-candle, the tarball built as a registry would build it. The gemv
/// crates it depends on are not published, so the resolution takes them from the workspace
/// (`[patch.crates-io]` on the command line); each of them packages and verifies on its own in
/// `cargo xtask package`. Shares the CPU check's target directory, so candle is not built again.
fn package() -> Result<(), String> {
    let patches: Vec<String> = GEMV_DEPENDENCIES
        .iter()
        .map(|(name, path)| format!("patch.crates-io.{name}.path={:?}", root().join(path).display().to_string()))
        .collect();
    let mut args = vec!["package", "--quiet", "--allow-dirty", "--manifest-path", MANIFEST, "--target-dir", TARGET_DIR];
    for patch in &patches {
        args.extend(["--config", patch.as_str()]);
    }
    run("cargo", &args)
}

/// The environment a build of gemv-candle's `cuda` feature needs: the pinned toolkit's nvcc on
/// PATH (cudarc's build script asks it for the CUDA version) and as candle's NVCC (with `full`),
/// or the stand-in nvcc that writes empty kernel outputs (type checks and tests that launch none
/// of candle's own kernels).
pub fn cuda_build_env(full: bool) -> Result<Vec<(&'static str, String)>, String> {
    let toolchain = Toolchain::find_or_install()?;
    let real_nvcc = toolchain.tool("nvcc");
    let mut env: Vec<(&str, String)> = vec![("CUDA_COMPUTE_CAP", "80".to_string())];
    // cudarc's build script runs `nvcc --version` from PATH; candle's finds nvcc through NVCC.
    if let Some(bin) = PathBuf::from(&real_nvcc).parent().filter(|dir| !dir.as_os_str().is_empty()) {
        let path = std::env::var("PATH").unwrap_or_default();
        env.push(("PATH", format!("{}:{path}", bin.display())));
        if let Some(home) = bin.parent() {
            env.push(("CUDA_HOME", home.display().to_string()));
        }
    }
    if full {
        env.push(("NVCC", real_nvcc));
    } else {
        let stand_in = root().join("xtask/scripts/nvcc_type_check.sh");
        env.push(("NVCC", stand_in.display().to_string()));
        env.push(("GEMV_REAL_NVCC", real_nvcc));
    }
    Ok(env)
}
