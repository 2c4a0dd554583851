//! `cargo xtask kernels [--check]`: kernels/cuda/*.cu -> PTX committed under kernels/ptx/
//! (embedded by gemv-kernels with include_str!, so building gemv-cuda needs no toolkit), after
//! generating their entry list (kernels/cuda/kernel_table.h) from the kernel registry.
//!
//! The PTX comes from NVRTC 12.2 (pinned, from PyPI): its PTX ISA 8.2 loads on every driver from
//! the 535 branch (CUDA 12.2) on, where nvcc 13's ISA 9.0 needs a 580 driver. The rest of the
//! toolchain (ptxas, cuobjdump for `cargo xtask sass`) stays nvcc 13's, which assembles ISA 8.2
//! and knows every architecture we report.

use crate::util::root;
use gemv_core::{MODULE_BUILDS, ModuleBuild};
use std::path::{Path, PathBuf};

/// Every build of a source file (`gemv_core::MODULE_BUILDS`, the one table gemv-cuda loads
/// from), oldest architecture first. A .cu file with no build is an error.
pub fn builds_of(source: &Path) -> Result<Vec<&'static ModuleBuild>, String> {
    let stem = source.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut builds: Vec<_> = MODULE_BUILDS.iter().filter(|build| build.source == stem).collect();
    builds.sort_by_key(|build| build.minimum);
    if builds.is_empty() {
        return Err(format!("{} has no build in gemv_core::MODULE_BUILDS (its target architecture)", source.display()));
    }
    Ok(builds)
}

/// The CUDA kernel sources (in gemv-kernels, which ships them with their PTX).
pub const KERNEL_DIR: &str = "kernels/cuda";
/// Where the committed PTX lives.
pub const PTX_DIR: &str = "kernels/ptx";

/// Every kernel source: kernels/cuda/*.cu.
pub fn sources() -> Result<Vec<PathBuf>, String> {
    let dir = root().join(KERNEL_DIR);
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cu"))
        .collect();
    sources.sort();
    Ok(sources)
}

/// Every file of the kernel sources the mutation pass mutates: the `.cu` sources and the headers
/// they include (`*.cuh`, `*.h`), in name order.
pub fn mutated_files() -> Result<Vec<PathBuf>, String> {
    files_in(&root().join(KERNEL_DIR))
}

/// The kernel source files (`*.cu`, `*.cuh`, `*.h`) in `dir`, in name order.
pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cu" || ext == "cuh" || ext == "h"))
        .collect();
    files.sort();
    Ok(files)
}

/// The `.cu` sources whose PTX a change to `file` can change: itself, or for a header every
/// source beside it (each includes the portable header; the table header goes with them).
pub fn sources_affected_by(file: &Path) -> Result<Vec<PathBuf>, String> {
    if file.extension().is_some_and(|ext| ext == "cu") {
        return Ok(vec![file.to_path_buf()]);
    }
    let dir = file.parent().ok_or_else(|| format!("{} has no folder", file.display()))?;
    Ok(files_in(dir)?.into_iter().filter(|path| path.extension().is_some_and(|ext| ext == "cu")).collect())
}

/// Every (source, build) pair, sources in name order and each source's builds oldest first.
pub fn builds() -> Result<Vec<(PathBuf, &'static ModuleBuild)>, String> {
    let mut all = Vec::new();
    for source in sources()? {
        for build in builds_of(&source)? {
            all.push((source.clone(), build));
        }
    }
    Ok(all)
}

/// The pinned NVRTC, the PTX ISA it writes, and its venv.
const NVRTC_PACKAGE: &str = "nvidia-cuda-nvrtc-cu12==12.2.140";
/// The PTX ISA version of the committed PTX (a test in gemv-cuda pins it too).
pub const PTX_ISA: &str = "8.2";
const NVRTC_SCRIPT: &str = "xtask/scripts/nvrtc_ptx.py";

/// The pinned NVRTC: a python in a venv under target/ and the library's path.
pub struct Nvrtc {
    python: PathBuf,
    library: PathBuf,
}

impl Nvrtc {
    /// Installs the pinned NVRTC into target/nvrtc-venv on first use.
    pub fn find_or_install() -> Result<Self, String> {
        let venv = crate::util::pinned_venv("target/nvrtc-venv", &[NVRTC_PACKAGE])?;
        let library = crate::util::site_package(&venv, "nvidia/cuda_nvrtc/lib", "libnvrtc.so.12")?;
        Ok(Self { python: venv.join("bin/python"), library: library.join("libnvrtc.so.12") })
    }
}

/// The capability the emulator emulates to run `build` (`--emulate`): its target's minimum.
pub fn emulated_capability(build: &ModuleBuild) -> String {
    format!("{}.{}", build.minimum.0, build.minimum.1)
}

/// Compiles one build of a source to PTX at `out`, with extra `-D` defines (none for the shipped
/// PTX). Headers come from the source's own directory (the mutation pass compiles copies).
pub fn compile(nvrtc: &Nvrtc, source: &Path, build: &ModuleBuild, out: &Path, defines: &[&str]) -> Result<(), String> {
    let defines: Vec<&str> = build.defines.iter().chain(defines).copied().collect();
    nvrtc.ptx(source, &build.virtual_arch(), out, &defines)
}

impl Nvrtc {
    /// Compiles `source` for the virtual architecture `arch` (e.g. `compute_90`) to PTX at `out`,
    /// as the kernels are: headers from the source's own directory and kernels/cuda, `-fmad=false`
    /// (only the explicit `__fmaf_rn` fuse, exactly what the emulator computes).
    pub fn ptx(&self, source: &Path, arch: &str, out: &Path, defines: &[&str]) -> Result<(), String> {
        let arch = format!("-arch={arch}");
        let include = format!("-I{}", source.parent().unwrap_or(&root().join(KERNEL_DIR)).display());
        let kernels = format!("-I{}", root().join(KERNEL_DIR).display());
        let (out, source) = (out.to_string_lossy(), source.to_string_lossy());
        let script = root().join(NVRTC_SCRIPT);
        let (script, library) = (script.to_string_lossy(), self.library.to_string_lossy());
        let mut args =
            vec![&*script, &*library, &*source, &*out, &arch, "-std=c++17", "-fmad=false", &include, &kernels];
        let defines: Vec<String> = defines.iter().map(|d| format!("-D{d}")).collect();
        args.extend(defines.iter().map(String::as_str));
        crate::util::run(&self.python.to_string_lossy(), &args)
    }
}

/// Builds every PTX; with `check`, builds into target/ and fails if the committed files differ.
pub fn run(check: bool) -> Result<(), String> {
    crate::kernel_table::run(check)?;
    let nvrtc = Nvrtc::find_or_install()?;
    let out_dir = if check { root().join("target/kernels-check") } else { root().join(PTX_DIR) };
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let mut stale = Vec::new();
    for (source, build) in builds()? {
        let stem = build.ptx;
        let out = out_dir.join(format!("{stem}.ptx"));
        compile(&nvrtc, &source, build, &out, &[])?;
        let text = std::fs::read_to_string(&out).map_err(|e| format!("cannot read {}: {e}", out.display()))?;
        if !text.lines().any(|line| line.trim() == format!(".version {PTX_ISA}")) {
            return Err(format!("{} is not PTX ISA {PTX_ISA}: is the pinned NVRTC in use?", out.display()));
        }
        if check {
            let committed = root().join(PTX_DIR).join(format!("{stem}.ptx"));
            let fresh = std::fs::read(&out).map_err(|e| e.to_string())?;
            if std::fs::read(&committed).ok() != Some(fresh) {
                stale.push(committed.display().to_string());
            }
        } else {
            eprintln!("xtask: wrote {}", out.display());
        }
    }
    if stale.is_empty() {
        if check {
            eprintln!("xtask: committed PTX is fresh");
        }
        Ok(())
    } else {
        Err(format!("stale PTX (run `cargo xtask kernels`): {}", stale.join(", ")))
    }
}
