//! Compiles the CUDA kernels and the SIMT emulator for the host.
//!
//! `GEMV_EMU_SANITIZE=address,undefined` (any `-fsanitize=` list) builds them under g++'s
//! sanitizers and links their runtimes into this package's binaries: `cargo xtask test` runs the
//! emulator suites that way, so an access past a kernel's local array or any other undefined
//! behaviour in a kernel fails CI even where the emulator's own checks cannot see it.
//!
//! The kernel sources come from gemv-kernels (`DEP_GEMV_KERNELS_CUDA_DIR`, its `cuda/`), the
//! emulator's runtime from `src/runtime/`. g++ compiles copies of the kernel sources (and
//! of the runtime's test kernels) in which every inline-PTX `asm` statement calls the emulator's
//! PTX executor with its template, constraints and bindings (`build/asm_rewrite.rs`), so the
//! emulator runs the PTX text the GPU runs. `GEMV_KERNELS_DIR` compiles the kernels from
//! another directory with the same files (the kernel mutation pass of `cargo xtask mutants` uses
//! it for its mutants).

fn main() {
    emulator::build();
}

#[path = "build/asm_rewrite.rs"]
#[allow(dead_code)]
mod asm_rewrite;

mod emulator {
    use std::fmt::Write as _;
    use std::path::{Path, PathBuf};

    use crate::asm_rewrite;

    /// Copies the kernel sources to `out` with every inline-PTX statement turned into a call of the
    /// emulator's PTX executor, and writes `asm_statements.inc`: every statement, for the
    /// executor's check that each one parses (`gemv_emu_check_asm`).
    fn rewrite_kernels(kernels: &Path, out: &Path) {
        std::fs::create_dir_all(out).expect("create the rewritten kernel directory");
        let mut files: Vec<PathBuf> = std::fs::read_dir(kernels)
            .expect("read the kernel directory")
            .map(|entry| entry.expect("a kernel directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "cu" || e == "cuh" || e == "h"))
            .collect();
        files.sort();
        let mut registry = String::new();
        for path in files {
            let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
            let source = std::fs::read_to_string(&path).expect("read a kernel source");
            let rewritten = asm_rewrite::rewrite(&source, &name).unwrap_or_else(|error| panic!("{error}"));
            for statement in &rewritten.statements {
                writeln!(
                    registry,
                    "GEMV_ASM_STATEMENT(\"{name}\", {}, {}, \"{}\", {})",
                    statement.line,
                    statement.template,
                    statement.constraints.join(","),
                    statement.outputs
                )
                .expect("write to a String");
            }
            std::fs::write(out.join(&name), rewritten.text).expect("write a rewritten kernel source");
        }
        std::fs::write(out.join("asm_statements.inc"), registry).expect("write asm_statements.inc");
    }

    /// The emulator's own test kernels (`runtime/test_*.cu`), their asm rewritten the same way
    /// (not listed: some of their statements are planted faults), and the memory probes' kernels
    /// they test (the kernel directory's `probes/`, into `probes/`).
    fn rewrite_test_kernels(runtime: &Path, kernels: &Path, out: &Path) {
        let probes = kernels.join("probes");
        std::fs::create_dir_all(out.join("probes")).expect("create the rewritten probes directory");
        for entry in std::fs::read_dir(&probes).expect("read the kernel directory's probes/") {
            let path = entry.expect("a probes directory entry").path();
            let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
            let source = std::fs::read_to_string(&path).expect("read a probe kernel source");
            let rewritten = asm_rewrite::rewrite(&source, &name).unwrap_or_else(|error| panic!("{error}"));
            std::fs::write(out.join("probes").join(&name), rewritten.text).expect("write a rewritten probe source");
        }
        for name in ["test_kernels.cu", "test_asm_kernels.cu", "test_async_kernels.cu", "test_probe_kernels.cu"] {
            let source = std::fs::read_to_string(runtime.join(name)).expect("read a test kernel source");
            let rewritten = asm_rewrite::rewrite(&source, name).unwrap_or_else(|error| panic!("{error}"));
            std::fs::write(out.join(name), rewritten.text).expect("write a rewritten test kernel source");
        }
    }

    pub fn build() {
        let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
        let kernels = match std::env::var_os("GEMV_KERNELS_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => {
                PathBuf::from(std::env::var_os("DEP_GEMV_KERNELS_CUDA_DIR").expect("gemv-kernels exports its cuda_dir"))
            }
        };
        let runtime = manifest.join("src/runtime");
        let rewritten = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("emulated_kernels");
        rewrite_kernels(&kernels, &rewritten);
        rewrite_test_kernels(&runtime, &kernels, &rewritten);
        println!("cargo:rerun-if-changed={}", manifest.join("build").display());
        println!("cargo:rerun-if-changed={}", kernels.display());
        println!("cargo:rerun-if-changed={}", runtime.display());
        println!("cargo:rerun-if-env-changed=GEMV_EMU_SANITIZE");
        println!("cargo:rerun-if-env-changed=GEMV_KERNELS_DIR");
        let mut build = cc::Build::new();
        build
            .cpp(true)
            .std("c++17")
            .opt_level(2)
            .define("GEMV_EMULATOR", None)
            .include(&rewritten)
            .include(&runtime)
            .flag_if_supported("-Wno-unknown-pragmas")
            .flag_if_supported("-Wno-unused-parameter")
            .files(
                [
                    "kernels.cpp",
                    "kernels_sm89.cpp",
                    "kernels_sm90_dependent.cpp",
                    "kernels_fast.cpp",
                    "kernels_fast_sm90_dependent.cpp",
                    "kernels_tests.cpp",
                    "fibers.cpp",
                    "launch.cpp",
                    "warp.cpp",
                    "memory_checks.cpp",
                    "async_copies.cpp",
                    "mbarriers.cpp",
                    "grid.cpp",
                    "ptx_parse.cpp",
                    "ptx_forms.cpp",
                    "ptx_exec.cpp",
                    "ptx_check.cpp",
                ]
                .map(|file| runtime.join(file)),
            );
        // Only explicit fused multiply-adds (`__fmaf_rn`) may fuse, as on the GPU where the PTX is
        // built with -fmad=false; with the host's FMA instruction they compile inline instead of
        // calling libm's fmaf (the emulator runs on the machine that builds it).
        build.flag("-ffp-contract=off");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("fma") {
            build.flag("-mfma");
        }
        let sanitizers = std::env::var("GEMV_EMU_SANITIZE").ok().filter(|s| !s.is_empty());
        // `gemv_cuda_emulator::EMULATOR_SANITIZERS`: what this build chose, for the tests.
        println!("cargo:rustc-env=GEMV_EMU_SANITIZERS={}", sanitizers.as_deref().unwrap_or(""));
        if let Some(sanitizers) = sanitizers {
            let flag = format!("-fsanitize={sanitizers}");
            // -fno-aggressive-loop-optimizations: a loop that runs one element past a local array is
            // undefined behaviour, which g++ would otherwise "optimise" into the in-bounds loop the
            // sanitizer then never sees.
            build
                .flag(&flag)
                .flag("-fno-omit-frame-pointer")
                .flag("-fno-sanitize-recover=all")
                .flag("-fno-aggressive-loop-optimizations")
                .flag("-g");
            // Their runtimes, for every binary linking this library (only this package's tests
            // are built this way).
            for (sanitizer, runtime) in [("address", "asan"), ("undefined", "ubsan")] {
                if sanitizers.split(',').any(|s| s.trim() == sanitizer) {
                    println!("cargo:rustc-link-lib=dylib={runtime}");
                }
            }
        }
        build.compile("gemv_cuda_emulator");
        println!("cargo:rustc-link-lib=pthread");
    }
}
