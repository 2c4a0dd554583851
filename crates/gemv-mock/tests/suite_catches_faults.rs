//! The conformance suite must fail on broken backends: a launch hook on the host backend plants
//! one fault at a time, and the gate aimed at it must report it as a real mismatch (not as an
//! error from the hook), with a message that says what differed. The control is the same hook
//! with no fault: it passes every gate.

use gemv_backend::{BufferRange, GemvArgs, GpuBackend, GroupedArgs, Result};
use gemv_conformance::{Gate, run_gate};
use gemv_core::codec::BF16_NAN;
use gemv_mock::MockBackend;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fault {
    /// None: the hook only forwards the launch.
    Nothing,
    /// batch5 flips the lowest bit of its first output.
    FlipBatch5,
    /// rt2 returns batch8's result with the last output changed.
    Rt2Differs,
    /// Every launch moves its first output two bf16 ulps away.
    TwoUlpsOff,
    /// Launches of two or more rows swap the outputs of rows 0 and 1.
    SwapFirstRows,
    /// batch3 writes one row past m.
    DeadRowWrite,
    /// Every launch ignores the global scale.
    NoGlobalScale,
    /// Launches with N = 4097 leave the last output row unwritten.
    SkipLastRowOfWideN,
    /// A launch with M = 0 is accepted silently.
    AcceptsZeroM,
    /// NaN outputs are written as +0 instead of 0x7FC0.
    NanBecomesZero,
    /// Subnormal outputs are flushed to zero.
    FlushSubnormals,
    /// A grouped launch flips the lowest bit of its last output.
    GroupedLastOutput,
    /// A grouped launch writes one element past Y where its buffer has room.
    GroupedWritesPastY,
    /// A grouped launch clamps expert ids past E to the last expert instead of refusing them.
    GroupedClampsIds,
}

fn read_u16(mock: &MockBackend, range: BufferRange, index: usize) -> Result<u16> {
    let mut bytes = [0u8; 2];
    mock.download(range.buffer.range(range.offset + 2 * index, 2), &mut bytes)?;
    Ok(u16::from_le_bytes(bytes))
}

fn write_u16(mock: &MockBackend, range: BufferRange, index: usize, value: u16) -> Result<()> {
    mock.upload(range.buffer.range(range.offset + 2 * index, 2), &value.to_le_bytes())
}

/// Rewrites every output of a launch with `f`.
fn map_outputs(mock: &MockBackend, args: &GemvArgs, f: impl Fn(u16) -> u16) -> Result<()> {
    for i in 0..args.m * args.n {
        let v = read_u16(mock, args.y, i)?;
        write_u16(mock, args.y, i, f(v))?;
    }
    Ok(())
}

/// A grouped launch with `fault` planted.
fn faulty_grouped(mock: &MockBackend, args: &GroupedArgs, fault: Fault) -> Result<()> {
    if fault == Fault::GroupedClampsIds {
        let mut ids = vec![0u8; args.routing_read().len];
        mock.download(args.routing_read(), &mut ids)?;
        for id in ids.chunks_exact_mut(4) {
            let value = u32::from_le_bytes([id[0], id[1], id[2], id[3]]).min(args.experts as u32 - 1);
            id.copy_from_slice(&value.to_le_bytes());
        }
        mock.upload(args.routing_read(), &ids)?;
    }
    mock.launch_grouped_unhooked(args)?;
    let outputs = args.m * args.top_k * args.n;
    match fault {
        Fault::GroupedLastOutput => write_u16(mock, args.y, outputs - 1, read_u16(mock, args.y, outputs - 1)? ^ 1),
        Fault::GroupedWritesPastY if args.y.buffer.len() >= args.y.offset + 2 * (outputs + 1) => {
            write_u16(mock, args.y, outputs, 0x1234)
        }
        _ => Ok(()),
    }
}

fn faulty(fault: Fault) -> MockBackend {
    let grouped = MockBackend::new().with_grouped_hook(move |mock, args| faulty_grouped(mock, args, fault));
    grouped.with_launch_hook(move |mock, kernel, args| {
        match fault {
            Fault::NoGlobalScale => return mock.launch_unhooked(kernel, &GemvArgs { global_scale: 1.0, ..*args }),
            Fault::AcceptsZeroM if args.m == 0 => return Ok(()),
            _ => {}
        }
        mock.launch_unhooked(kernel, args)?;
        let name = kernel.spec().map_or("", |s| s.name);
        let (m, n) = (args.m, args.n);
        match fault {
            Fault::FlipBatch5 if name == "w4a16_gemv_batch5" => {
                write_u16(mock, args.y, 0, read_u16(mock, args.y, 0)? ^ 1)
            }
            Fault::Rt2Differs if name == "w4a16_gemv_batch8_rt2" => {
                write_u16(mock, args.y, m * n - 1, read_u16(mock, args.y, m * n - 1)? ^ 0x40)
            }
            Fault::TwoUlpsOff => write_u16(mock, args.y, 0, read_u16(mock, args.y, 0)?.wrapping_add(2)),
            Fault::SwapFirstRows if m >= 2 => {
                for column in 0..n {
                    let (a, b) = (read_u16(mock, args.y, column)?, read_u16(mock, args.y, n + column)?);
                    write_u16(mock, args.y, column, b)?;
                    write_u16(mock, args.y, n + column, a)?;
                }
                Ok(())
            }
            Fault::DeadRowWrite if name == "w4a16_gemv_batch3" && args.y.len >= 2 * (m + 1) * n => {
                write_u16(mock, args.y, m * n, 0x1234)
            }
            Fault::SkipLastRowOfWideN if n == 4097 => {
                (0..m).try_for_each(|t| write_u16(mock, args.y, t * n + n - 1, 0x0000))
            }
            Fault::NanBecomesZero => map_outputs(mock, args, |v| if v == BF16_NAN { 0 } else { v }),
            Fault::FlushSubnormals => map_outputs(mock, args, |v| if v & 0x7F80 == 0 { v & 0x8000 } else { v }),
            _ => Ok(()),
        }
    })
}

/// The failed cases of `gate` with `fault` planted, as `case: failure`; panics if any failure is
/// an error rather than a mismatch (the hook must not break the plumbing).
fn failures(fault: Fault, gate: Gate) -> Vec<String> {
    let failed: Vec<String> = run_gate(&faulty(fault), gate)
        .into_iter()
        .filter_map(|r| r.failure.map(|f| format!("{}: {f}", r.case)))
        .collect();
    for failure in &failed {
        assert!(!failure.contains(": error: "), "{fault:?} made gate {} fail with an error: {failure}", gate.number());
    }
    failed
}

/// Asserts that `gate` catches `fault` and that some failure mentions every one of `needles`.
fn caught(fault: Fault, gate: Gate, needles: &[&str]) {
    let failed = failures(fault, gate);
    assert!(!failed.is_empty(), "gate {} ({}) missed {fault:?}", gate.number(), gate.title());
    assert!(
        failed.iter().any(|f| needles.iter().all(|needle| f.contains(needle))),
        "gate {} caught {fault:?} but no failure mentions {needles:?}:\n{}",
        gate.number(),
        failed.join("\n")
    );
}

#[test]
fn control_the_hook_without_a_fault_passes_every_gate() {
    for gate in Gate::ALL {
        let failed = failures(Fault::Nothing, gate);
        assert!(failed.is_empty(), "gate {} failed with no fault planted:\n{}", gate.number(), failed.join("\n"));
    }
}

#[test]
fn gate1_tier_agreement_catches_a_wrong_bit() {
    caught(Fault::FlipBatch5, Gate::TierAgreement, &["w4a16_gemv_batch5", "m=1 vs host: 1 of", "Y[0][0]"]);
}

#[test]
fn gate2_register_tiled_catches_a_divergent_rt2() {
    caught(Fault::Rt2Differs, Gate::RegisterTiled, &["m=1: batch8 vs rt2: 1 of"]);
}

#[test]
fn gate3_f64_bound_catches_two_ulps() {
    caught(Fault::TwoUlpsOff, Gate::F64Bound, &["Y[0][0]: f64", "off by"]);
}

#[test]
fn gate4_row_permutation_catches_a_position_dependent_result() {
    caught(Fault::SwapFirstRows, Gate::RowPermutation, &["M=5", "outputs differ"]);
}

#[test]
fn gate5_guards_catch_a_dead_row_write() {
    caught(Fault::DeadRowWrite, Gate::Guards, &["w4a16_gemv_batch3", "dead row 2 column 0 was written"]);
}

#[test]
fn gate6_impulse_catches_a_missing_global_scale() {
    caught(Fault::NoGlobalScale, Gate::Impulse, &["column 0", "outputs differ"]);
}

#[test]
fn gate7_odd_shapes_catch_a_missing_last_row() {
    caught(Fault::SkipLastRowOfWideN, Gate::OddShapes, &["N=4097", "Y[0][4096]"]);
}

#[test]
fn gate8_bad_input_catches_an_accepted_zero_m_and_a_lost_nan() {
    caught(Fault::AcceptsZeroM, Gate::BadInput, &["rejects M = 0: accepted"]);
    caught(Fault::NanBecomesZero, Gate::BadInput, &["NaN and ±Inf in X give the contract's bits", "expected 0x7fc0"]);
    caught(Fault::NanBecomesZero, Gate::BadInput, &["NaN global scale gives 0x7FC0 everywhere"]);
}

#[test]
fn gate9_special_values_catch_flushed_subnormals_and_lost_nans() {
    caught(Fault::FlushSubnormals, Gate::SpecialValues, &["global scale subnormal", "outputs differ"]);
    caught(Fault::NanBecomesZero, Gate::SpecialValues, &["all 256 codes", "expected 0x7fc0"]);
}

#[test]
fn gate12_grouped_experts_catch_a_wrong_output_a_write_past_y_and_an_accepted_id() {
    caught(Fault::GroupedLastOutput, Gate::GroupedExperts, &["grouped launch", "outputs differ"]);
    caught(Fault::GroupedLastOutput, Gate::GroupedExperts, &["raw launch", "outputs differ"]);
    caught(Fault::GroupedWritesPastY, Gate::GroupedExperts, &["raw launch", "guard byte"]);
    caught(Fault::GroupedClampsIds, Gate::GroupedExperts, &["raw launch", "neither ExpertOutOfRange nor a NaN row"]);
    caught(Fault::TwoUlpsOff, Gate::GroupedExperts, &["separate launches", "outputs differ"]);
}
