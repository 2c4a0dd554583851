//! The pinned CUDA toolchain: nvcc 13.0.88 and friends from PyPI, so that a machine with no
//! CUDA install assembles the committed PTX (written by NVRTC 12.2, see `kernels.rs`) for every
//! architecture the SASS report covers. Used from PATH when nvcc there is exactly
//! 13.0.88 and cuobjdump exists beside it; otherwise installed into a venv under target/.

use crate::util::root;
use std::path::PathBuf;
use std::process::Command;

const NVCC_VERSION: &str = "V13.0.88";
const PACKAGES: [&str; 7] = [
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cuobjdump==13.2.51",
    "nvidia-cuda-nvdisasm==13.2.51",
];

/// Where nvcc, ptxas and cuobjdump live.
pub struct Toolchain {
    bin: Option<PathBuf>,
}

impl Toolchain {
    /// The pinned toolchain, installing it under target/cuda-venv when needed.
    pub fn find_or_install() -> Result<Self, String> {
        if on_path_is_pinned() {
            eprintln!("xtask: using nvcc {NVCC_VERSION} from PATH");
            return Ok(Self { bin: None });
        }
        let venv = crate::util::pinned_venv("target/cuda-venv", &PACKAGES)?;
        let bin = crate::util::site_package(&venv, "nvidia/cu13/bin", "nvcc")?;
        Ok(Self { bin: Some(bin) })
    }

    /// The path (or bare name) of a tool.
    pub fn tool(&self, name: &str) -> String {
        match &self.bin {
            Some(bin) => bin.join(name).to_string_lossy().into_owned(),
            None => name.to_string(),
        }
    }

    /// Runs a tool, returning its stdout and stderr; fails on a non-zero exit.
    pub fn output(&self, name: &str, args: &[&str]) -> Result<(String, String), String> {
        let output = Command::new(self.tool(name))
            .args(args)
            .current_dir(root())
            .output()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if !output.status.success() {
            return Err(format!("{name} {} failed ({}):\n{stderr}", args.join(" "), output.status));
        }
        Ok((stdout, stderr))
    }
}

fn on_path_is_pinned() -> bool {
    let nvcc = Command::new("nvcc").arg("--version").output();
    let pinned = nvcc.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(NVCC_VERSION));
    pinned && Command::new("cuobjdump").arg("--version").output().is_ok_and(|o| o.status.success())
}
