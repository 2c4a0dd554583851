//! The conformance suite must fail on broken backends: a launch hook on the host backend plants
//! one fault at a time and the relevant gate has to report it.

use gemv_backend::conformance::{Gate, run_gate};
use gemv_backend::{BufferRange, GemvArgs, GpuBackend, Result};
use gemv_mock::MockBackend;

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// batch5 flips the lowest bit of its first output.
    FlipBatch5,
    /// batch3 writes one row past m.
    DeadRowWrite,
    /// rt2 returns batch8's result with the last output changed.
    Rt2Differs,
    /// every launch ignores the global scale.
    NoGlobalScale,
    /// a launch with M = 0 is accepted silently.
    AcceptsZeroM,
}

/// XORs one byte of a range with `mask`.
fn corrupt(mock: &MockBackend, range: BufferRange, byte: usize, mask: u8) -> Result<()> {
    let at = range.buffer.range(range.offset + byte, 1);
    let mut data = [0u8; 1];
    mock.download(at, &mut data)?;
    mock.upload(at, &[data[0] ^ mask])
}

fn faulty(fault: Fault) -> MockBackend {
    MockBackend::new().with_launch_hook(move |mock, kernel, args| {
        match fault {
            Fault::NoGlobalScale => return mock.launch_unhooked(kernel, &GemvArgs { global_scale: 1.0, ..*args }),
            Fault::AcceptsZeroM if args.m == 0 => return Ok(()),
            _ => {}
        }
        mock.launch_unhooked(kernel, args)?;
        let name = kernel.spec().map_or("", |s| s.name);
        let rows = 2 * args.m * args.n;
        match fault {
            Fault::FlipBatch5 if name == "w4a16_gemv_batch5" => corrupt(mock, args.y, 0, 1),
            Fault::DeadRowWrite if name == "w4a16_gemv_batch3" && args.y.len >= rows + 2 * args.n => {
                corrupt(mock, args.y, rows, 0xFF)
            }
            Fault::Rt2Differs if name == "w4a16_gemv_batch8_rt2" => corrupt(mock, args.y, rows - 1, 0x40),
            _ => Ok(()),
        }
    })
}

fn failures(fault: Fault, gate: Gate) -> usize {
    run_gate(&faulty(fault), gate).iter().filter(|r| !r.passed()).count()
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
fn a_hooked_backend_without_a_fault_passes_the_same_gates() {
    // AcceptsZeroM only acts on M = 0, which the guard gate never launches.
    assert_eq!(failures(Fault::AcceptsZeroM, Gate::Guards), 0);
}
