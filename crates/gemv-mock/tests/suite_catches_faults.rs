//! The conformance suite must fail on broken backends: a wrapper around the host backend plants
//! one fault at a time and the relevant gate has to report it.

use gemv_backend::conformance::{Gate, run_gate};
use gemv_backend::{BufferRange, DeviceBuffer, DeviceInfo, GemvArgs, GpuBackend, KernelHandle, Result};
use gemv_mock::MockBackend;

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// batch5 flips the lowest bit of its first output.
    FlipBatch5,
    /// batch3 writes one row past m.
    DeadRowWrite,
    /// rt2 returns batch8's result with the last output zeroed.
    Rt2Differs,
    /// every launch ignores the global scale.
    NoGlobalScale,
    /// launches accept any M silently by clamping.
    AcceptsZeroM,
}

struct Faulty {
    inner: MockBackend,
    fault: Fault,
}

impl Faulty {
    fn corrupt(&self, range: BufferRange, byte: usize, f: impl FnOnce(u8) -> u8) -> Result<()> {
        let mut data = [0u8; 1];
        let at = range.buffer.range(range.offset + byte, 1);
        self.inner.download(at, &mut data)?;
        self.inner.upload(at, &[f(data[0])])
    }
}

impl GpuBackend for Faulty {
    fn name(&self) -> &'static str {
        "faulty"
    }
    fn device_info(&self) -> DeviceInfo {
        self.inner.device_info()
    }
    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        self.inner.lookup_kernel(module, name)
    }
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.inner.alloc(bytes)
    }
    fn free(&self, buffer: DeviceBuffer) -> Result<()> {
        self.inner.free(buffer)
    }
    fn upload(&self, dst: BufferRange, data: &[u8]) -> Result<()> {
        self.inner.upload(dst, data)
    }
    fn download(&self, src: BufferRange, out: &mut [u8]) -> Result<()> {
        self.inner.download(src, out)
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let name = kernel.spec().map_or("", |s| s.name);
        match self.fault {
            Fault::NoGlobalScale => return self.inner.launch_gemv(kernel, &GemvArgs { global_scale: 1.0, ..*args }),
            Fault::AcceptsZeroM if args.m == 0 => return Ok(()),
            _ => {}
        }
        self.inner.launch_gemv(kernel, args)?;
        match self.fault {
            Fault::FlipBatch5 if name == "w4a16_gemv_batch5" => self.corrupt(args.y, 0, |b| b ^ 1),
            Fault::DeadRowWrite if name == "w4a16_gemv_batch3" && args.y.len >= 2 * (args.m + 1) * args.n => {
                self.corrupt(args.y, 2 * args.m * args.n, |b| b ^ 0xFF)
            }
            Fault::Rt2Differs if name == "w4a16_gemv_batch8_rt2" => {
                self.corrupt(args.y, 2 * args.m * args.n - 1, |b| b ^ 0x40)
            }
            _ => Ok(()),
        }
    }
}

fn failures(fault: Fault, gate: Gate) -> usize {
    let backend = Faulty { inner: MockBackend::new(), fault };
    run_gate(&backend, gate).iter().filter(|r| !r.passed()).count()
}

#[test]
fn tier_agreement_catches_a_wrong_bit() {
    assert!(failures(Fault::FlipBatch5, Gate::TierAgreement) > 0);
}

#[test]
fn guards_catch_a_dead_row_write() {
    assert!(failures(Fault::DeadRowWrite, Gate::Guards) > 0);
}

#[test]
fn register_tiled_gate_catches_a_divergent_rt2() {
    assert!(failures(Fault::Rt2Differs, Gate::RegisterTiled) > 0);
}

#[test]
fn f64_and_impulse_catch_a_missing_global_scale() {
    assert!(failures(Fault::NoGlobalScale, Gate::F64Bound) > 0);
    assert!(failures(Fault::NoGlobalScale, Gate::Impulse) > 0);
}

#[test]
fn bad_input_catches_an_accepted_zero_m() {
    assert!(failures(Fault::AcceptsZeroM, Gate::BadInput) > 0);
}

#[test]
fn a_clean_backend_passes_the_same_gates() {
    let backend = Faulty { inner: MockBackend::new(), fault: Fault::AcceptsZeroM };
    assert!(run_gate(&backend, Gate::Guards).iter().all(|r| r.passed()));
}
