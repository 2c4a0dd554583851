//! `cargo xtask candle [--full]`: checks `crates/gemv-candle` (the NVFP4 linear layer for candle,
//! outside the workspace): fmt, clippy with and without its `cuda` feature (candle-core's `cuda`,
//! in one dependency graph with gemv-cuda), and its tests on the CPU (the CUDA test skips
//! without a GPU).
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
