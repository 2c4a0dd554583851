//! gemv-candle's CUDA test as a release binary for the device pack (`candle_cuda`).
//!
//! candle-core binds cudarc with `dynamic-linking`: its binaries link libcuda, libcublas and
//! libcurand by name, which this machine (no driver, a pip toolkit without those libraries) does
//! not have. The binary is linked against stand-ins instead: shared libraries with the CUDA 13
//! sonames (the pinned toolkit's, which cudarc binds) that define the symbols the binary takes
//! from each library. The GPU machine's loader then binds them to its own libraries of those
//! sonames, and a machine without them says which is missing before the test starts.
//!
//! Two links: the first leaves the CUDA symbols unresolved and lists them (`nm -u`); the second,
//! with stand-ins that define them, records the libraries as needed (`--as-needed` drops a
//! library that defines nothing the binary uses). The test launches gemv's kernels and copies,
//! none of candle's own, so candle's kernels are built by the stand-in nvcc (empty).

use crate::util::root;
use std::path::Path;
use std::process::Command;

const MANIFEST: &str = "crates/gemv-candle/Cargo.toml";
const TARGET_DIR: &str = "target/gemv-candle-cuda-release";
const STUB_DIR: &str = "target/gemv-candle-cuda-release/link-stubs";

/// The CUDA libraries by symbol prefix (longest first) and their CUDA 13 sonames.
const LIBRARIES: [(&str, &str, &str); 6] = [
    ("cublasLt", "cublasLt", "libcublasLt.so.13"),
    ("cublas", "cublas", "libcublas.so.13"),
    ("curand", "curand", "libcurand.so.10"),
    ("nvrtc", "nvrtc", "libnvrtc.so.13"),
    ("cuda", "cudart", "libcudart.so.13"),
    ("cu", "cuda", "libcuda.so.1"),
];

/// The library a symbol comes from: its prefix followed by an upper-case letter or `_`.
fn library_of(symbol: &str) -> Option<usize> {
    LIBRARIES.iter().position(|(prefix, _, _)| {
        symbol.strip_prefix(prefix).is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase() || c == '_'))
    })
}

/// Writes and compiles the stand-in libraries, each defining `symbols` of its own.
fn write_stubs(dir: &Path, symbols: &[String]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (index, (_, name, soname)) in LIBRARIES.iter().enumerate() {
        let source: String = symbols
            .iter()
            .filter(|symbol| library_of(symbol) == Some(index))
            .map(|symbol| format!("void {symbol}(void) {{}}\n"))
            .collect();
        let c_file = dir.join(format!("{name}.c"));
        std::fs::write(&c_file, source).map_err(|e| format!("cannot write {}: {e}", c_file.display()))?;
        let library = dir.join(format!("lib{name}.so"));
        let status = Command::new("cc")
            .args(["-shared", "-o"])
            .arg(&library)
            .arg(format!("-Wl,-soname,{soname}"))
            .arg(&c_file)
            .status()
            .map_err(|e| format!("cannot run cc: {e}"))?;
        if !status.success() {
            return Err(format!("cc failed on {}", c_file.display()));
        }
    }
    Ok(())
}

/// The binary's undefined symbols that a CUDA library defines.
fn cuda_symbols(binary: &str) -> Result<Vec<String>, String> {
    let output = Command::new("nm").args(["-u", binary]).output().map_err(|e| format!("cannot run nm: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .map(|symbol| symbol.split('@').next().unwrap_or(symbol).to_string())
        .filter(|symbol| library_of(symbol).is_some())
        .collect())
}

fn build(env: &[(&str, String)]) -> Result<String, String> {
    crate::util::cargo_json_executable(
        &[
            "test",
            "--release",
            "--manifest-path",
            MANIFEST,
            "--features",
            "cuda",
            "--test",
            "cuda",
            "--no-run",
            "--target-dir",
            TARGET_DIR,
            "--message-format=json",
        ],
        env,
        "cuda",
    )
}

/// Builds the test binary and returns its path.
pub fn build_binary() -> Result<String, String> {
    let stubs = root().join(STUB_DIR);
    write_stubs(&stubs, &[])?;
    let mut env = crate::candle::cuda_build_env(false)?;
    env.push((
        "RUSTFLAGS",
        format!("-L native={} -C link-arg=-Wl,--unresolved-symbols=ignore-in-object-files", stubs.display()),
    ));
    let first = build(&env)?;
    let symbols = cuda_symbols(&first)?;
    write_stubs(&stubs, &symbols)?;
    // Cargo does not track the stand-ins; a missing output makes it link again.
    std::fs::remove_file(&first).map_err(|e| format!("cannot remove {first}: {e}"))?;
    let binary = build(&env)?;
    let needed =
        Command::new("readelf").args(["-d", &binary]).output().map_err(|e| format!("cannot run readelf: {e}"))?;
    let needed = String::from_utf8_lossy(&needed.stdout);
    let missing: Vec<&str> = LIBRARIES
        .iter()
        .enumerate()
        .filter(|(index, _)| symbols.iter().any(|symbol| library_of(symbol) == Some(*index)))
        .map(|(_, (_, _, soname))| *soname)
        .filter(|soname| !needed.contains(soname))
        .collect();
    if !missing.is_empty() {
        return Err(format!("{binary} does not record {} as needed", missing.join(", ")));
    }
    eprintln!(
        "xtask: candle_cuda takes {} CUDA symbols from {} libraries",
        symbols.len(),
        LIBRARIES.iter().filter(|(_, _, soname)| needed.contains(soname)).count()
    );
    Ok(binary)
}

#[cfg(test)]
mod tests {
    use super::{LIBRARIES, library_of};

    #[test]
    fn each_symbol_goes_to_its_library() {
        let library = |symbol| library_of(symbol).map(|index| LIBRARIES[index].1);
        assert_eq!(library("cuInit"), Some("cuda"));
        assert_eq!(library("cuMemAlloc_v2"), Some("cuda"));
        assert_eq!(library("cudaMalloc"), Some("cudart"));
        assert_eq!(library("cublasCreate_v2"), Some("cublas"));
        assert_eq!(library("cublasLtCreate"), Some("cublasLt"));
        assert_eq!(library("curandCreateGenerator"), Some("curand"));
        assert_eq!(library("nvrtcCompileProgram"), Some("nvrtc"));
        assert_eq!(library("cucumber"), None);
        assert_eq!(library("memcpy"), None);
    }
}
