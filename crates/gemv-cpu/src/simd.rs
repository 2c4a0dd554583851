//! The instruction sets the tile kernels are written for, detected at run time, and the float
//! modes they need.

/// Forces a path for the whole process (`portable`, `neon`, `avx2`, `avx512`, `avx512products`,
/// `avx512bf16`); read when a backend is created without an explicit path. The CI runs the
/// conformance suite with `portable` too.
pub const SIMD_VARIABLE: &str = "GEMV_CPU_SIMD";

/// A tile kernel's instruction set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimdPath {
    /// AVX-512 BF16: the AVX-512 decode, then two elements of a group per instruction
    /// (`vdpbf16ps`, each product added and rounded in turn, as the contract's fused
    /// multiply-adds), for activations that keep every product and partial sum off the
    /// subnormals (nonzero finite |x| from 2^-109 to 2^116) and two tokens or more; the
    /// AVX-512F kernel otherwise. Only where the CPU's instruction rounds after each product
    /// (checked once).
    Avx512Bf16,
    /// AVX-512F: a tile's 16 rows in one vector, a 16-entry signed E2M1 table in one permute.
    Avx512,
    /// AVX-512F for one token: an activation's products by the 16 signed E2M1 values, made once
    /// for four tiles (64 rows), a weight's looked up by its code and multiplied by its group's
    /// scale in one fused multiply-add (no multiply per weight), for activations whose products
    /// cannot overflow (finite |x| < 2^116); the AVX-512F kernel otherwise and from two tokens.
    Avx512Products,
    /// AVX2 with FMA: 8 rows per vector, E2M1 looked up by byte shuffles.
    Avx2,
    /// NEON (aarch64): 4 rows per vector, E2M1 looked up by byte table look-ups.
    Neon,
    /// Plain Rust over 16-lane arrays with exact fused multiply-adds: any CPU (LLVM vectorises
    /// it where it can).
    Portable,
}

/// The fewest tokens a launch runs on the pair kernel: with one, a pass is bound by the decode,
/// which costs the pair kernel more than the AVX-512F kernel's one multiply per 16 weights
/// (docs/cpu.md).
pub(crate) const PAIR_TOKENS_MIN: usize = 2;

impl SimdPath {
    /// Every path, in the order [`best`](Self::best) ranks them.
    pub const ALL: [SimdPath; 6] = [
        SimdPath::Avx512Bf16,
        SimdPath::Avx512,
        SimdPath::Avx512Products,
        SimdPath::Avx2,
        SimdPath::Neon,
        SimdPath::Portable,
    ];

    /// The name used by [`SIMD_VARIABLE`] and in device names.
    pub fn name(self) -> &'static str {
        match self {
            SimdPath::Avx512Bf16 => "avx512bf16",
            SimdPath::Avx512 => "avx512",
            SimdPath::Avx512Products => "avx512products",
            SimdPath::Avx2 => "avx2",
            SimdPath::Neon => "neon",
            SimdPath::Portable => "portable",
        }
    }

    /// Every path's name, comma-separated.
    pub fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    /// From [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|path| path.name() == name)
    }

    /// The architecture whose instructions the path uses (None: any).
    pub fn architecture(self) -> Option<&'static str> {
        match self {
            SimdPath::Avx512Bf16 | SimdPath::Avx512 | SimdPath::Avx512Products | SimdPath::Avx2 => Some("x86_64"),
            SimdPath::Neon => Some("aarch64"),
            SimdPath::Portable => None,
        }
    }

    /// Why this CPU cannot run the path (None where it can): the path of another architecture,
    /// or instructions this CPU lacks.
    pub fn unsupported_reason(self) -> Option<String> {
        if self.is_supported() {
            return None;
        }
        let here = std::env::consts::ARCH;
        Some(match self.architecture() {
            Some(arch) if arch != here => format!("{} is an {arch} path and this CPU is {here}", self.name()),
            _ => format!("this {here} CPU lacks the {} path's instructions", self.name()),
        })
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            SimdPath::Avx512Bf16 => crate::dpbf16_probe::adds_in_turn(),
            #[cfg(target_arch = "x86_64")]
            SimdPath::Avx512 | SimdPath::Avx512Products => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            SimdPath::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            SimdPath::Avx512Bf16 | SimdPath::Avx512 | SimdPath::Avx512Products | SimdPath::Avx2 => false,
            #[cfg(target_arch = "aarch64")]
            SimdPath::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[cfg(not(target_arch = "aarch64"))]
            SimdPath::Neon => false,
            SimdPath::Portable => true,
        }
    }

    /// Whether a launch of `m` tokens on this path reads X as bf16 pairs (where X allows; see
    /// [`SimdPath::Avx512Bf16`]).
    pub(crate) fn reads_pairs(self, m: usize) -> bool {
        self == SimdPath::Avx512Bf16 && m >= PAIR_TOKENS_MIN
    }

    /// Whether a launch of `m` tokens on this path runs the one-token products kernel (where X
    /// allows; see [`SimdPath::Avx512Products`]).
    pub(crate) fn reads_products(self, m: usize) -> bool {
        self == SimdPath::Avx512Products && m == 1
    }

    /// The path whose kernels run X widened to f32 where this path's own kernel does not apply
    /// (the pair kernel below two tokens or for X it cannot take; the products kernel above one
    /// token or for X whose products could overflow).
    pub(crate) fn widened(self) -> Self {
        match self {
            SimdPath::Avx512Bf16 | SimdPath::Avx512Products => SimdPath::Avx512,
            path => path,
        }
    }

    /// The path a launch of `m` tokens runs on where X allows this path's own kernel: this path,
    /// or [`widened`](Self::widened) where its kernel does not take `m` tokens.
    pub(crate) fn runs(self, m: usize) -> Self {
        match self {
            SimdPath::Avx512Bf16 if !self.reads_pairs(m) => self.widened(),
            SimdPath::Avx512Products if !self.reads_products(m) => self.widened(),
            path => path,
        }
    }

    /// The first path of [`ALL`](Self::ALL) this CPU supports: the order they were fastest in on
    /// AMD Zen 5. Which is fastest depends on the CPU (on an Intel Xeon the pair kernel is
    /// slower than the AVX-512F one), so a backend times them instead
    /// ([`CpuBackend::calibrated`](crate::CpuBackend::calibrated)).
    pub fn best() -> Self {
        Self::ALL.into_iter().find(|path| path.is_supported()).unwrap_or(SimdPath::Portable)
    }
}

/// Clears the flush-to-zero and denormals-are-zero bits of this thread's float control register
/// (x86's MXCSR, aarch64's FPCR): the contract keeps subnormal products and sums, and a host
/// application may have set them (a new thread inherits its creator's setting). The CPU
/// backend's worker threads call it first.
pub(crate) fn exact_float_mode() {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    set_control(control() & !FLUSH_MODES);
}

/// Runs `f` with [`exact_float_mode`] on this thread and restores the thread's own modes after
/// (also when `f` panics): the calling thread of a launch computes a share of it.
pub(crate) fn with_exact_float_mode<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        struct Restore(Control);
        impl Drop for Restore {
            fn drop(&mut self) {
                set_control(self.0);
            }
        }
        let saved = control();
        let _restore = Restore(saved);
        set_control(saved & !FLUSH_MODES);
        f()
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    f()
}

/// The float control register's width.
#[cfg(target_arch = "x86_64")]
type Control = u32;
#[cfg(target_arch = "aarch64")]
type Control = u64;

/// The flush-to-zero (bit 15) and denormals-are-zero (bit 6) bits of the SSE control register.
#[cfg(target_arch = "x86_64")]
const FLUSH_MODES: u32 = (1 << 15) | (1 << 6);

/// This thread's SSE control register.
#[cfg(target_arch = "x86_64")]
fn control() -> u32 {
    let mut control: u32 = 0;
    // SAFETY: `stmxcsr` stores the 32-bit control register to the address given, a valid,
    // writable local.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut control, options(nostack, preserves_flags)) };
    control
}

/// Loads this thread's SSE control register. Callers only change the flush-mode bits of a value
/// [`control`] read (or restore one), which change how this thread treats subnormals and unmask
/// no exception.
#[cfg(target_arch = "x86_64")]
fn set_control(control: u32) {
    // SAFETY: `ldmxcsr` loads the 32-bit value at the address given, a valid local; see above
    // for why the value is safe to load.
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &control, options(nostack, preserves_flags, readonly)) };
}

/// FPCR's flush-to-zero bit (FZ, bit 24): with it, single-precision subnormal inputs and results
/// become zero.
#[cfg(target_arch = "aarch64")]
const FLUSH_MODES: u64 = 1 << 24;

/// This thread's FPCR.
#[cfg(target_arch = "aarch64")]
fn control() -> u64 {
    let control: u64;
    // SAFETY: reading FPCR has no effect beyond the read.
    unsafe { std::arch::asm!("mrs {}, fpcr", out(reg) control, options(nomem, nostack, preserves_flags)) };
    control
}

/// Writes this thread's FPCR. Callers only change the flush-to-zero bit of a value [`control`]
/// read (or restore one), which changes how this thread treats subnormals and traps nothing.
#[cfg(target_arch = "aarch64")]
fn set_control(control: u64) {
    // SAFETY: see above for why the value is safe to write.
    unsafe { std::arch::asm!("msr fpcr, {}", in(reg) control, options(nomem, nostack, preserves_flags)) };
}
