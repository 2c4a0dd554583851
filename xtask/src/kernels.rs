//! `cargo xtask kernels [--check]`: crates/gemv-cuda/kernels/*.cu -> PTX committed under
//! crates/gemv-cuda/ptx/ (embedded with include_str!, so building gemv-cuda needs no toolkit).

use crate::cuda_toolchain::Toolchain;
use crate::util::root;
use std::path::PathBuf;

/// The lowest architecture the scalar family needs (warp shuffles, __ldg).
pub const PTX_ARCH: &str = "compute_75";
/// The CUDA kernel sources (inside the crate that embeds and emulates them, so that the crate
/// packages on its own).
pub const KERNEL_DIR: &str = "crates/gemv-cuda/kernels";
/// Where the committed PTX lives.
pub const PTX_DIR: &str = "crates/gemv-cuda/ptx";

/// Every kernel source: crates/gemv-cuda/kernels/*.cu.
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

/// Compiles one source to PTX at `out`, with extra `-D` defines (none for the shipped PTX).
pub fn compile(
    toolchain: &Toolchain,
    source: &std::path::Path,
    out: &std::path::Path,
    defines: &[&str],
) -> Result<(), String> {
    let arch = format!("-arch={PTX_ARCH}");
    let include = format!("-I{}", root().join(KERNEL_DIR).display());
    let out = out.to_string_lossy();
    let source = source.to_string_lossy();
    // -fmad=false: only the kernels' explicit __fmaf_rn fuse, exactly what the emulator computes.
    let mut args = vec!["-ptx", &arch, "-O3", "-std=c++17", "-fmad=false", &include];
    let defines: Vec<String> = defines.iter().map(|d| format!("-D{d}")).collect();
    args.extend(defines.iter().map(String::as_str));
    args.extend(["-o", &out, &source]);
    toolchain.output("nvcc", &args)?;
    Ok(())
}

/// Builds every PTX; with `check`, builds into target/ and fails if the committed files differ.
pub fn run(check: bool) -> Result<(), String> {
    let toolchain = Toolchain::find_or_install()?;
    let out_dir = if check { root().join("target/kernels-check") } else { root().join(PTX_DIR) };
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let mut stale = Vec::new();
    for source in sources()? {
        let stem = source.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let out = out_dir.join(format!("{stem}.ptx"));
        compile(&toolchain, &source, &out, &[])?;
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
