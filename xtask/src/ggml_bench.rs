//! `cargo xtask ggml-bench [BENCH OPTIONS]`: `gemv bench --backend cpu` with the ggml peer rows
//! built in (the `ggml-peer` feature: llama.cpp's CPU kernels from the `llama-cpp-sys-2` crate,
//! compiled with CMake for this CPU's own instruction set, as llama.cpp's default build does).
//! The first build takes a few minutes. Not part of `test`.

use crate::provision::apt_install;
use crate::util::{has, run_with_env};

/// Whether a file name is a libclang bindgen loads (`libclang.so*`, `libclang-17.so*`), not
/// `libclang-cpp`, the C++ library some systems ship alone.
fn is_libclang(name: &str) -> bool {
    name.starts_with("libclang.so")
        || name.strip_prefix("libclang-").is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// Provisions CMake and libclang (bindgen) when missing, then builds and runs the bench.
pub fn run(options: &[String]) -> Result<(), String> {
    if !has("cmake", &["--version"]) {
        apt_install(&["cmake"])?;
    }
    let libclang =
        ["/usr/lib/llvm-14/lib", "/usr/lib/llvm-15/lib", "/usr/lib/llvm-16/lib", "/usr/lib/x86_64-linux-gnu"]
            .iter()
            .any(|dir| {
                std::fs::read_dir(dir).is_ok_and(|e| e.flatten().any(|f| is_libclang(&f.file_name().to_string_lossy())))
            });
    if !libclang {
        apt_install(&["libclang-dev"])?;
    }
    // ggml's CMake build takes the compiler's flags: the host's own instruction set, as
    // llama.cpp builds by default (GGML_NATIVE), without changing how the Rust crates compile.
    let native = if cfg!(target_arch = "aarch64") { "-mcpu=native" } else { "-march=native" };
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get()).to_string();
    let mut args =
        vec!["run", "--release", "-p", "gemv-cli", "--features", "ggml-peer", "--", "bench", "--backend", "cpu"];
    args.extend(options.iter().map(String::as_str));
    run_with_env(
        "cargo",
        &args,
        &[("CFLAGS", native), ("CXXFLAGS", native), ("CMAKE_BUILD_PARALLEL_LEVEL", threads.as_str())],
    )
}

#[cfg(test)]
mod tests {
    use super::is_libclang;

    #[test]
    fn libclang_is_told_from_the_cpp_library() {
        for name in ["libclang.so", "libclang.so.1", "libclang-14.so.1", "libclang-17.so"] {
            assert!(is_libclang(name), "{name}");
        }
        for name in ["libclang-cpp.so.14", "libclangBasic.a", "libc.so.6"] {
            assert!(!is_libclang(name), "{name}");
        }
    }
}
