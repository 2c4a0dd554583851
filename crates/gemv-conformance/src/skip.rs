//! Skips that are seen and counted.
//!
//! A test that cannot run on this machine (no CUDA GPU, no Vulkan adapter) calls [`skip`]: it
//! says why on stderr, appends one line to the file named by `GEMV_SKIP_LOG` (so `cargo xtask
//! test` can count skips even though the test harness hides a passing test's output), and, when
//! the requirement's `GEMV_REQUIRE_*` variable is set, fails the test instead.

use std::io::Write;

/// What a skipped test needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Requirement {
    /// A CUDA driver and GPU (`GEMV_REQUIRE_CUDA` makes its absence a failure).
    CudaGpu,
    /// A wgpu adapter, e.g. lavapipe (`GEMV_REQUIRE_WGPU`).
    WgpuAdapter,
    /// A machine WITHOUT a CUDA driver (the no-driver error path cannot run where one exists).
    NoCudaDriver,
    /// A CPU with the SIMD extension a test exercises (AVX-512, AVX2).
    CpuFeature,
    /// libcublas beside the CUDA driver (the bench's peer row; `GEMV_REQUIRE_CUBLAS`).
    Cublas,
    /// A CUDA GPU of compute capability 9.0 or newer (programmatic dependent launches).
    CudaSm90,
}

impl Requirement {
    /// Every requirement, in report order.
    pub const ALL: [Requirement; 6] = [
        Requirement::CudaGpu,
        Requirement::WgpuAdapter,
        Requirement::NoCudaDriver,
        Requirement::CpuFeature,
        Requirement::Cublas,
        Requirement::CudaSm90,
    ];

    /// The short name used in the skip log and in `GEMV_EXPECTED_SKIPS`.
    pub fn key(self) -> &'static str {
        match self {
            Requirement::CudaGpu => "cuda",
            Requirement::WgpuAdapter => "wgpu",
            Requirement::NoCudaDriver => "no-cuda-driver",
            Requirement::CpuFeature => "cpu-feature",
            Requirement::Cublas => "cublas",
            Requirement::CudaSm90 => "cuda-sm90",
        }
    }

    /// What it is, for people.
    pub fn describe(self) -> &'static str {
        match self {
            Requirement::CudaGpu => "a CUDA GPU",
            Requirement::WgpuAdapter => "a wgpu (Vulkan) adapter",
            Requirement::NoCudaDriver => "a machine without a CUDA driver",
            Requirement::CpuFeature => "a CPU with the SIMD extension under test",
            Requirement::Cublas => "libcublas (the CUDA toolkit's BLAS)",
            Requirement::CudaSm90 => "a CUDA GPU of compute capability 9.0 or newer",
        }
    }

    /// The variable that turns this skip into a failure, if any.
    pub fn require_variable(self) -> Option<&'static str> {
        match self {
            Requirement::CudaGpu => Some("GEMV_REQUIRE_CUDA"),
            Requirement::WgpuAdapter => Some("GEMV_REQUIRE_WGPU"),
            Requirement::Cublas => Some("GEMV_REQUIRE_CUBLAS"),
            Requirement::NoCudaDriver | Requirement::CpuFeature | Requirement::CudaSm90 => None,
        }
    }

    /// From [`key`](Self::key).
    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.key() == key)
    }
}

/// The variable naming the skip log.
pub const SKIP_LOG: &str = "GEMV_SKIP_LOG";

/// Records that the current test is skipped for want of `requirement`, and why.
///
/// # Panics
/// When the requirement's `GEMV_REQUIRE_*` variable is set: the skip is then a failure.
pub fn skip(requirement: Requirement, reason: &str) {
    if let Some(variable) = requirement.require_variable() {
        assert!(
            std::env::var_os(variable).is_none(),
            "{variable} is set but this machine lacks {}: {reason}",
            requirement.describe()
        );
    }
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("skipped ({test}): needs {} ({reason})", requirement.describe());
    if let Some(path) = std::env::var_os(SKIP_LOG) {
        let line = format!("{}\t{test}\t{}\n", requirement.key(), reason.replace(['\t', '\n'], " "));
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(error) = appended {
            eprintln!("cannot append to {SKIP_LOG} ({}): {error}", std::path::Path::new(&path).display());
        }
    }
}
