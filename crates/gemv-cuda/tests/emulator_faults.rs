//! The emulator's own checks: each planted fault must be caught with the message of the check
//! that fired (where, what, and for races both threads), and each has a control kernel, as close
//! to the fault as possible, that must pass.

use gemv_backend::Error;
use gemv_cuda::launch::THREADS_PER_BLOCK;
use gemv_cuda::{CudaEmulator, EMULATOR_SANITIZERS, HostLaunch, ThreadOrder};

const M: usize = 1;
const N: usize = 64;
const K: usize = 32;

fn launch_with(kernel: &str, grid: u32, block: u32, order: ThreadOrder) -> Result<Vec<u16>, Error> {
    let x: Vec<u16> = (0..M * K).map(|i| i as u16).collect();
    let packed = vec![0u8; N * K / 2];
    let scales = vec![0u8; N * K / 16];
    let mut y = vec![0u16; M * N];
    CudaEmulator::new().with_thread_order(order).launch_on_host(HostLaunch {
        kernel,
        grid,
        block,
        x: &x,
        packed: &packed,
        scales: &scales,
        y: &mut y,
        global_scale: 1.0,
        m: M,
        n: N,
        k: K,
    })?;
    Ok(y)
}

fn launch(kernel: &str, block: u32) -> Result<Vec<u16>, Error> {
    launch_with(kernel, 2, block, ThreadOrder::Forward)
}

fn fault_message_with(kernel: &str, block: u32, order: ThreadOrder) -> String {
    match launch_with(kernel, 2, block, order) {
        Err(Error::KernelFault { kernel: name, message }) => {
            assert_eq!(name, kernel);
            eprintln!("{kernel} ({order:?}): {message}");
            message
        }
        other => panic!("{kernel}: expected a kernel fault, got {other:?}"),
    }
}

fn fault_message(kernel: &str, block: u32) -> String {
    fault_message_with(kernel, block, ThreadOrder::Forward)
}

fn passes(kernel: &str, block: u32) -> Vec<u16> {
    for order in [ThreadOrder::Forward, ThreadOrder::Reversed] {
        if let Err(error) = launch_with(kernel, 2, block, order) {
            panic!("control kernel {kernel} ({order:?}) must pass: {error}");
        }
    }
    launch(kernel, block).unwrap_or_default()
}

// ---- Global memory ----

#[test]
fn a_write_past_the_buffer_is_caught_with_block_thread_and_offset() {
    let message = fault_message("emu_test_write_past_end", 64);
    assert!(message.starts_with("block (0,0,0) thread (0,0,0): out-of-bounds write of 2 bytes"), "{message}");
    assert!(message.contains("0 bytes past the end of 'y' (128 bytes)"), "{message}");
}

#[test]
fn a_read_before_the_buffer_is_caught() {
    let message = fault_message("emu_test_read_before_start", 32);
    assert!(message.contains("out-of-bounds read of 1 bytes: 1 bytes before 'packed'"), "{message}");
}

#[test]
fn a_write_to_an_input_is_caught() {
    let message = fault_message("emu_test_write_read_only", 32);
    assert!(message.contains("thread (3,0,0): write of 2 bytes to read-only 'x' at offset 2"), "{message}");
}

#[test]
fn ldg_of_memory_the_launch_writes_is_caught_and_ldg_of_an_input_passes() {
    let message = fault_message("emu_test_ldg_writable", 32);
    assert!(message.contains("__ldg of 2 bytes from writable 'y' at offset 0"), "{message}");
    let y = passes("emu_test_copy_x", 32);
    assert_eq!(&y[..K], &(0..K as u16).collect::<Vec<_>>()[..]);
}

#[test]
fn a_misaligned_vector_load_is_caught() {
    let message = fault_message("emu_test_misaligned_vector", 32);
    assert!(message.contains("misaligned 16-byte read at offset 2 of 'x' (address % 16 = 2)"), "{message}");
}

// ---- Barriers and deadlock ----

#[test]
fn a_divergent_syncthreads_is_caught() {
    let message = fault_message("emu_test_divergent_syncthreads", 64);
    assert!(
        message.contains("__syncthreads #0 is not reached by thread 32, which exited (divergent barrier)"),
        "{message}"
    );
}

#[test]
fn a_barrier_inside_a_shuffle_is_a_deadlock() {
    let message = fault_message("emu_test_deadlock", 32);
    assert!(message.starts_with("block (0,0,0): deadlock: no thread can proceed; waiting:"), "{message}");
    assert!(message.contains("t5(shuffle #0, barrier #0)") && message.contains("t0(shuffle #0"), "{message}");
}

// ---- Shuffles ----

#[test]
fn a_correct_warp_sum_passes_in_both_orders() {
    let y = passes("emu_test_warp_sum", 64);
    assert!(y.iter().all(|&v| v == (0..32).sum::<u16>()), "{y:?}");
}

#[test]
fn a_mask_leaving_out_the_calling_lane_is_caught() {
    let message = fault_message("emu_test_mask_excludes_caller", 32);
    assert!(message.contains("__shfl_xor_sync: mask 0x0000ffff leaves out the calling lane 16"), "{message}");
}

#[test]
fn reading_a_lane_outside_the_mask_is_caught_and_a_16_wide_shuffle_passes() {
    let message = fault_message("emu_test_reads_outside_mask", 32);
    assert!(message.contains("lane 15 reads lane 16, which is not in mask 0x0000ffff"), "{message}");
    let y = passes("emu_test_half_warp_down", 32);
    assert_eq!(y[14], 15);
    assert_eq!(y[15], 15, "lane 15 keeps its own value at width 16");
}

#[test]
fn a_shuffle_waiting_for_an_exited_lane_is_caught() {
    let message = fault_message("emu_test_exited_lane", 32);
    assert!(message.contains("__shfl_xor_sync #0: mask 0xffffffff waits for lane 0, which exited"), "{message}");
}

#[test]
fn lanes_meeting_at_different_shuffle_kinds_are_caught() {
    let message = fault_message("emu_test_shuffle_kind_mismatch", 32);
    assert!(
        message.contains("lane 31 called __shfl_down_sync but lane 0 called __shfl_xor_sync in the same shuffle"),
        "{message}"
    );
}

#[test]
fn lanes_meeting_with_different_widths_are_caught() {
    let message = fault_message("emu_test_shuffle_width_mismatch", 32);
    assert!(message.contains("lane 31 used width 32 but lane 0 used width 16"), "{message}");
}

// ---- Launch bounds ----

#[test]
fn a_block_over_the_launch_bound_is_refused_and_one_within_runs() {
    assert_eq!(CudaEmulator::launch_bound("emu_test_bounded_64"), Some(64));
    let message = fault_message("emu_test_bounded_64", 128);
    assert!(message.contains("a block of 128 threads exceeds the kernel's launch bound of 64 threads"), "{message}");
    passes("emu_test_bounded_64", 64);
}

#[test]
fn every_registry_kernel_is_bounded_at_the_launchers_block_size() {
    for spec in gemv_core::KERNELS {
        assert_eq!(CudaEmulator::launch_bound(spec.name), Some(THREADS_PER_BLOCK), "{}", spec.name);
    }
}

// ---- Shared memory ----

#[test]
fn a_barrier_exchange_through_shared_memory_passes_in_both_orders() {
    let y = passes("emu_test_shared_exchange", 32);
    // Block b, thread t writes the value of thread 31 - t: 31 - t + b.
    for (i, &v) in y.iter().enumerate() {
        let (block, thread) = (i / 32, i % 32);
        assert_eq!(usize::from(v), 31 - thread + block, "y[{i}]");
    }
    let y = passes("emu_test_shared_vectors", 256);
    assert_eq!(y[0], 1 + 2 + 3 + 1);
}

/// `kernel` (a block of 32) must fault on thread 0's write and thread 1's read of `values[element]`.
fn assert_race(kernel: &str, element: usize) {
    let message = fault_message(kernel, 32);
    let expected = format!(
        "shared-memory race on 'values' element {element}: thread 0 wrote it and thread 1 read it with no __syncthreads"
    );
    assert!(message.contains(&expected), "{message}");
}

#[test]
fn reading_a_neighbours_slot_without_a_barrier_is_a_race_naming_both_threads() {
    assert_race("emu_test_shared_race", 0);
}

#[test]
fn a_race_on_an_element_inside_a_vector_is_caught() {
    // Thread 0 stores elements 0..3; thread 1 then reads element 2 (the race checker tracks every
    // element a vector access covers, not only its first).
    assert_race("emu_test_shared_vector_race", 2);
}

#[test]
fn two_threads_writing_one_slot_without_a_barrier_is_a_race() {
    let message = fault_message("emu_test_shared_write_race", 32);
    assert!(message.contains("race on 'slot' element 0: thread 0 wrote it and thread 1 wrote it"), "{message}");
    // Reversed order finds the same race from the other end.
    let message = fault_message_with("emu_test_shared_write_race", 32, ThreadOrder::Reversed);
    assert!(message.contains("thread 31 wrote it and thread 30 wrote it"), "{message}");
}

#[test]
fn reading_shared_memory_no_thread_of_the_block_wrote_is_caught() {
    // Block 1 writes the slot first and passes; block 0 reads it unwritten (on a GPU it would see
    // whatever an earlier block left there).
    let message = fault_message("emu_test_shared_uninitialised", 32);
    assert!(message.starts_with("block (0,0,0)"), "{message}");
    assert!(
        message.contains("shared read of 'values' element 1, which no thread of this block has written"),
        "{message}"
    );
}

#[test]
fn a_shared_access_past_the_array_is_caught() {
    let message = fault_message("emu_test_shared_out_of_bounds", 64);
    assert!(
        message
            .contains("thread (32,0,0): out-of-bounds shared write of 4 bytes at element 32 of 'values' (32 elements)"),
        "{message}"
    );
    passes("emu_test_shared_out_of_bounds", 32);
}

#[test]
fn a_shared_access_past_the_array_is_caught_in_blocks_the_race_checker_does_not_track() {
    let kernel = "emu_test_shared_out_of_bounds_in_block_3";
    match launch_with(kernel, 4, 32, ThreadOrder::Forward) {
        Err(Error::KernelFault { message, .. }) => assert!(
            message.starts_with(
                "block (3,0,0) thread (3,0,0): out-of-bounds shared read of 16 bytes at element 44 of 'values' (32 elements)"
            ),
            "{message}"
        ),
        other => panic!("{kernel}: expected a kernel fault, got {other:?}"),
    }
    let y = launch_with(kernel, 3, 32, ThreadOrder::Forward).unwrap_or_else(|e| panic!("control (3 blocks): {e}"));
    // Y holds 64 outputs (blocks 0 and 1); block 2 read in bounds, or the launch would have failed.
    assert_eq!(y, [5u16; 64], "every thread of the control read 1 + 4");
}

#[test]
fn shared_memory_over_the_block_limit_is_caught() {
    let message = fault_message("emu_test_shared_too_large", 32);
    assert!(
        message.contains("shared array 'values' of 49156 bytes brings the block to 49156 bytes of shared memory, over the 49152-byte static limit"),
        "{message}"
    );
}

#[test]
fn unknown_kernels_are_a_typed_error() {
    assert!(matches!(launch("no_such_kernel", 32), Err(Error::KernelFault { .. })));
}

// ---- Local arrays: the sanitized build ----

/// Set in the child process that runs the planted write past a local array.
const RUN_PLANTED_OVERFLOW: &str = "GEMV_EMU_RUN_PLANTED_OVERFLOW";

/// A write one past a thread's local array is invisible to the emulator (a thread's locals live
/// on the host's stack), so `cargo xtask test` runs this suite again built with
/// `GEMV_EMU_SANITIZE=address,undefined` ([`EMULATOR_SANITIZERS`]), where UndefinedBehaviorSanitizer
/// stops the process at the write. The planted fault therefore runs in a child process (this test again, with
/// [`RUN_PLANTED_OVERFLOW`] set), whose failure and message the parent asserts. In a build without
/// the sanitizers only the control runs: the fault would corrupt this process's stack unseen.
#[test]
fn a_write_past_a_local_array_is_caught_by_the_sanitized_build() {
    if std::env::var_os(RUN_PLANTED_OVERFLOW).is_some() {
        let _ = launch("emu_test_local_array_one_past", 32);
        return;
    }
    // 0 + 1 + 2 + 3 (as an integer), every write inside the array.
    assert_eq!(passes("emu_test_local_array_filled", 32)[0], 6);
    // The message asserted below is UndefinedBehaviorSanitizer's; a build without it cannot say it.
    if !EMULATOR_SANITIZERS.split(',').any(|sanitizer| sanitizer.trim() == "undefined") {
        eprintln!(
            "the planted write past a local array runs only in a build with GEMV_EMU_SANITIZE naming `undefined` \
             (this build: {:?})",
            EMULATOR_SANITIZERS
        );
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let child = std::process::Command::new(exe)
        .args(["a_write_past_a_local_array_is_caught_by_the_sanitized_build", "--exact", "--nocapture"])
        .env(RUN_PLANTED_OVERFLOW, "1")
        .output()
        .expect("the test binary runs again");
    let stderr = String::from_utf8_lossy(&child.stderr);
    eprintln!("child ({}): {stderr}", child.status);
    assert!(!child.status.success(), "the sanitized build let a write past a local array pass:\n{stderr}");
    assert!(stderr.contains("index 4 out of bounds for type 'float [4]'"), "{stderr}");
}

// ---- Bit and half-precision primitives, against an independent reference ----

/// Runs a test kernel over chosen inputs: `x` holds `m * k` values, y gets `m * n`.
fn run_on(kernel: &str, x: &[u16], m: usize, n: usize, k: usize) -> Vec<u16> {
    assert_eq!(x.len(), m * k);
    let packed = vec![0u8; n * k / 2];
    let scales = vec![0u8; n * k / 16];
    let mut y = vec![0u16; m * n];
    let block = 256;
    let grid = (m * k).div_ceil(block) as u32;
    CudaEmulator::new()
        .launch_on_host(HostLaunch {
            kernel,
            grid,
            block: block as u32,
            x,
            packed: &packed,
            scales: &scales,
            y: &mut y,
            global_scale: 1.0,
            m,
            n,
            k,
        })
        .unwrap_or_else(|error| panic!("{kernel}: {error}"));
    y
}

/// Every binary16 code, as m = 1024 rows of k = 64 (y has room for two outputs per input).
fn every_half_code() -> (Vec<u16>, usize, usize, usize) {
    ((0..=u16::MAX).collect(), 1024, 128, 64)
}

/// binary16 bits to their exact value (None for NaN).
fn half_value(bits: u16) -> Option<f64> {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1F);
    let mantissa = f64::from(bits & 0x3FF);
    match exponent {
        0 => Some(sign * mantissa * 2f64.powi(-24)),
        31 if mantissa == 0.0 => Some(sign * f64::INFINITY),
        31 => None,
        _ => Some(sign * (1024.0 + mantissa) * 2f64.powi(exponent - 25)),
    }
}

/// An exact value to binary16 bits, rounding to nearest even (None for NaN).
fn half_bits_rounded(value: f64) -> Option<u16> {
    if value.is_nan() {
        return None;
    }
    let sign = if value.is_sign_negative() { 0x8000u16 } else { 0 };
    let magnitude = value.abs();
    if magnitude >= 65520.0 {
        return Some(sign | 0x7C00);
    }
    // The quantum of the binade (subnormals share the smallest normal binade's quantum).
    let exponent = if magnitude == 0.0 { -14 } else { magnitude.log2().floor().max(-14.0) as i32 };
    let exponent = if magnitude >= 2f64.powi(exponent + 1) { exponent + 1 } else { exponent };
    let quantum = 2f64.powi(exponent - 10);
    let units = (magnitude / quantum).round_ties_even();
    let rounded = units * quantum;
    let bits = if rounded < 2f64.powi(-14) {
        (rounded * 2f64.powi(24)) as u16
    } else {
        let binade = rounded.log2().floor() as i32;
        let mantissa = rounded / 2f64.powi(binade - 10) - 1024.0;
        (((binade + 15) as u16) << 10) | mantissa as u16
    };
    Some(sign | bits)
}

#[test]
fn the_reference_rounding_is_itself_right_on_known_values() {
    assert_eq!(half_bits_rounded(1.0), Some(0x3C00));
    assert_eq!(half_bits_rounded(65504.0), Some(0x7BFF));
    assert_eq!(half_bits_rounded(65519.99), Some(0x7BFF));
    assert_eq!(half_bits_rounded(65520.0), Some(0x7C00));
    assert_eq!(half_bits_rounded(2f64.powi(-24)), Some(0x0001));
    assert_eq!(half_bits_rounded(2f64.powi(-25)), Some(0x0000), "a tie rounds to even zero");
    assert_eq!(half_bits_rounded(3.0 * 2f64.powi(-25)), Some(0x0002), "a tie rounds to even 2");
    assert_eq!(half_bits_rounded(-(1.0 + 2f64.powi(-11))), Some(0xBC00), "a tie rounds to even");
    assert_eq!(half_bits_rounded(1.0 + 3.0 * 2f64.powi(-11)), Some(0x3C02));
    assert_eq!(half_bits_rounded(2f64.powi(-14) - 2f64.powi(-26)), Some(0x0400), "rounds up into the normals");
    for bits in 0..=u16::MAX {
        if let Some(value) = half_value(bits) {
            assert_eq!(half_bits_rounded(value), Some(bits), "round trip of {bits:#06x}");
        }
    }
}

/// `fma.rn.f32`: one rounding, and a NaN result is the GPU's one f32 NaN, 0x7FFFFFFF, whatever
/// made it (0 x infinity, infinity - infinity, an input NaN of either sign and any payload). With
/// x86's NaNs (0xFFC00000, or the input's payload) bit 0 of a NaN was always clear here, so
/// the exact kernel's finiteness test with its mask mutated to 0x7F800001 (mutant #1072) would
/// have passed on the emulator and failed on a GPU.
#[test]
fn fma_is_fused_and_its_nan_is_the_gpus_one_nan() {
    let one_plus = 1.0 + 2f32.powi(-12);
    let cases: [(f32, f32, f32, u32); 7] = [
        (1.5, 2.0, 0.25, 3.25f32.to_bits()),
        // (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24 exactly; rounding the product first would give 2^-11.
        (one_plus, one_plus, -1.0, (2f32.powi(-11) + 2f32.powi(-24)).to_bits()),
        (0.0, f32::INFINITY, 1.0, 0x7FFF_FFFF),
        (f32::INFINITY, -1.0, f32::INFINITY, 0x7FFF_FFFF),
        (f32::from_bits(0x7FC1_2345), 1.0, 0.0, 0x7FFF_FFFF),
        (1.0, f32::from_bits(0xFFC0_0000), 2.0, 0x7FFF_FFFF),
        (f32::from_bits(0x7F80_0001), 1.0, 0.0, 0x7FFF_FFFF),
    ];
    let mut x = Vec::new();
    for &(a, b, c, _) in &cases {
        for v in [a, b, c] {
            x.extend([(v.to_bits() & 0xFFFF) as u16, (v.to_bits() >> 16) as u16]);
        }
    }
    x.resize(64, 0);
    let y = run_on("emu_test_fmaf", &x, 1, 64, 64);
    for (i, &(a, b, c, expected)) in cases.iter().enumerate() {
        let found = u32::from(y[2 * i]) | (u32::from(y[2 * i + 1]) << 16);
        eprintln!("fma({a:e}, {b:e}, {c:e}) = {found:#010x}");
        assert_eq!(found, expected, "fma({a:e}, {b:e}, {c:e}): expected {expected:#010x}, found {found:#010x}");
    }
}

#[test]
fn half_to_float_matches_the_reference_on_every_code() {
    let (x, m, n, k) = every_half_code();
    let y = run_on("emu_test_half_to_float", &x, m, n, k);
    let mut mismatches = 0;
    for (i, &h) in x.iter().enumerate() {
        let found = f32::from_bits(u32::from(y[2 * i]) | (u32::from(y[2 * i + 1]) << 16));
        let ok = match half_value(h) {
            Some(expected) => found.to_bits() == (expected as f32).to_bits(),
            None => found.is_nan(),
        };
        if !ok {
            mismatches += 1;
            if mismatches <= 5 {
                eprintln!("cvt.f32.f16 {h:#06x}: expected {:?}, found {found:e}", half_value(h));
            }
        }
    }
    assert_eq!(mismatches, 0, "{mismatches} of 65536 codes convert wrongly");
}

/// Runs a two-lane product kernel (`emu_test_hmul2`, `emu_test_bf16x2_mul`) over every 16-bit
/// code `a` against the code `(7i + 3) mod 65536`, compares both halves with `expected(a, b)`
/// and returns the expected codes (for the caller's regime counts).
fn product_sweep(kernel: &str, expected: impl Fn(u16, u16) -> u16) -> Vec<(u16, u16, u16)> {
    let (x, m, n, k) = every_half_code();
    let y = run_on(kernel, &x, m, n, k);
    let count = x.len();
    let mut mismatches = 0;
    let mut products = Vec::with_capacity(count);
    for i in 0..count {
        let (a, b) = (x[i], x[(7 * i + 3) % count]);
        let want = expected(a, b);
        for (half, found) in [y[2 * i], y[2 * i + 1]].into_iter().enumerate() {
            if found != want {
                mismatches += 1;
                if mismatches <= 5 {
                    eprintln!("{kernel}: {a:#06x} x {b:#06x} (half {half}): expected {want:#06x}, found {found:#06x}");
                }
            }
        }
        products.push((a, b, want));
    }
    assert_eq!(mismatches, 0, "{kernel}: {mismatches} products differ");
    products
}

/// `mul.rn.f16x2` with one operand's low or high half in both lanes (the sm_89 build's scale
/// multiply): the same products as `hmul2`, whatever the other halves hold.
#[test]
fn broadcast_hmul2_multiplies_by_the_chosen_half() {
    let products = product_sweep("emu_test_hmul2_broadcast", |a, b| match (half_value(a), half_value(b)) {
        (Some(a), Some(b)) => half_bits_rounded(a * b).unwrap_or(0x7FFF),
        _ => 0x7FFF,
    });
    assert_eq!(products.len(), 65536);
}

/// `cvt.rn.f16x2.e4m3x2` (the sm_89 build's scales): both E4M3 codes of every 16-bit pattern,
/// low byte to the low half, each exactly its E4M3 value (gemv-core's codec), NaN codes NaN.
#[test]
fn e4m3x2_conversion_is_exact_on_every_code_pair() {
    let (x, m, n, k) = every_half_code();
    let y = run_on("emu_test_e4m3x2_to_f16x2", &x, m, n, k);
    let mut mismatches = 0;
    for (i, &codes) in x.iter().enumerate() {
        for (half, code) in [(y[2 * i], codes as u8), (y[2 * i + 1], (codes >> 8) as u8)] {
            let expected = gemv_core::codec::decode_e4m3(code);
            let ok = match half_value(half) {
                Some(found) => found == f64::from(expected) && found.is_sign_negative() == expected.is_sign_negative(),
                None => expected.is_nan(),
            };
            if !ok {
                mismatches += 1;
                if mismatches <= 5 {
                    eprintln!("e4m3 {code:#04x} (in {codes:#06x}): expected {expected:e}, found {half:#06x}");
                }
            }
        }
    }
    assert_eq!(mismatches, 0, "{mismatches} of 131072 conversions wrong");
}

#[test]
fn hmul2_is_the_correctly_rounded_product_with_canonical_nan() {
    let products = product_sweep("emu_test_hmul2", |a, b| match (half_value(a), half_value(b)) {
        (Some(a), Some(b)) => half_bits_rounded(a * b).unwrap_or(0x7FFF),
        _ => 0x7FFF,
    });
    let (mut subnormal, mut overflow, mut nan) = (0, 0, 0);
    for &(a, b, expected) in &products {
        subnormal += usize::from(expected & 0x7C00 == 0 && expected & 0x3FF != 0);
        overflow += usize::from(expected & 0x7FFF == 0x7C00 && (a & 0x7C00) != 0x7C00 && (b & 0x7C00) != 0x7C00);
        nan += usize::from(expected == 0x7FFF);
    }
    eprintln!("hmul2: {} products, {subnormal} subnormal, {overflow} overflowing, {nan} NaN", products.len());
    assert!(subnormal > 100 && overflow > 100 && nan > 100, "the sweep must reach every rounding regime");
}

#[test]
fn prmt_selects_bytes_like_the_reference() {
    let (m, n, k) = (16, 128, 64);
    let mut state = 0x9E37_79B9u32;
    let x: Vec<u16> = (0..m * k)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u16
        })
        .collect();
    let y = run_on("emu_test_prmt", &x, m, n, k);
    let word = |i: usize| u32::from(x[i]) | (u32::from(x[i + 1]) << 16);
    let (mut checked, mut replicated) = (0, 0);
    for i in 0..m * k - 5 {
        let bytes = u64::from(word(i)) | (u64::from(word(i + 2)) << 32);
        let selector = u32::from(x[i + 4]);
        let expected = (0..4).fold(0u32, |d, lane| {
            let nibble = (selector >> (4 * lane)) & 0xF;
            let byte = ((bytes >> (8 * (nibble & 7))) & 0xFF) as u32;
            // Bit 3: the selected byte's sign bit, replicated over the byte.
            let byte = match (nibble & 8, byte & 0x80) {
                (0, _) => byte,
                (_, 0) => 0,
                _ => 0xFF,
            };
            d | byte << (8 * lane)
        });
        replicated += (0..4).filter(|lane| (selector >> (4 * lane)) & 8 != 0).count();
        let found = u32::from(y[2 * i]) | (u32::from(y[2 * i + 1]) << 16);
        assert_eq!(found, expected, "prmt({:#010x}, {:#010x}, {selector:#06x})", word(i), word(i + 2));
        checked += 1;
    }
    assert_eq!(checked, m * k - 5);
    assert!(replicated > 1000, "sign replication must be exercised ({replicated} selector nibbles)");
}

#[test]
fn a_prefetch_past_the_weights_is_caught_and_one_inside_passes() {
    let message = fault_message("emu_test_prefetch_past_end", 32);
    assert!(message.contains("out-of-bounds read of 1 bytes"), "{message}");
    assert!(message.contains("packed"), "{message}");
    passes("emu_test_prefetch_inside", 32);
}

// ---- Tensor-core primitives ----

/// An exact value to bf16 bits, rounding to nearest even with subnormals kept (None for NaN).
fn bf16_bits_rounded(value: f64) -> Option<u16> {
    if value.is_nan() {
        return None;
    }
    let sign = if value.is_sign_negative() { 0x8000u16 } else { 0 };
    let magnitude = value.abs();
    if magnitude == 0.0 {
        return Some(sign);
    }
    if magnitude.is_infinite() {
        return Some(sign | 0x7F80);
    }
    // The quantum of the binade (subnormals share the smallest normal binade's quantum).
    let binade = (((magnitude.to_bits() >> 52) & 0x7FF) as i32 - 1023).max(-126);
    let quantum = 2f64.powi(binade - 7);
    let rounded = (magnitude / quantum).round_ties_even() * quantum;
    if rounded >= 2f64.powi(128) {
        return Some(sign | 0x7F80);
    }
    Some(sign | ((rounded as f32).to_bits() >> 16) as u16)
}

fn bf16_value(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

#[test]
fn bf16x2_mul_is_the_correctly_rounded_product_with_canonical_nan() {
    // Exact in f64: 8 x 8 significant bits.
    let products =
        product_sweep("emu_test_bf16x2_mul", |a, b| bf16_bits_rounded(bf16_value(a) * bf16_value(b)).unwrap_or(0x7FFF));
    let (mut subnormal, mut rounded, mut overflow, mut nan) = (0, 0, 0, 0);
    for &(a, b, expected) in &products {
        let exact = bf16_value(a) * bf16_value(b);
        subnormal += usize::from(expected & 0x7F80 == 0 && expected & 0x7F != 0);
        rounded += usize::from(exact.is_finite() && bf16_value(expected) != exact);
        overflow += usize::from(expected & 0x7FFF == 0x7F80 && exact.is_finite());
        nan += usize::from(expected == 0x7FFF);
    }
    eprintln!(
        "bf16x2 mul: {} products, {subnormal} subnormal, {rounded} rounded, {overflow} overflowing, {nan} NaN",
        products.len()
    );
    assert!(subnormal > 100 && rounded > 100 && overflow > 100 && nan > 100, "the sweep must reach every regime");
}

#[test]
fn mma_multiplies_the_fragments_of_the_ptx_layout_in_the_documented_order() {
    // Two warps, each its own A (16 x 16), B (16 x 8) and C (16 x 8) of bf16 values in [-8, 8).
    let (warps, k) = (2usize, 64usize);
    let mut state = 0x2545_F491u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let x: Vec<u16> = (0..warps * 512)
        .map(|_| {
            let value = (next() % 4096) as f32 / 256.0 - 8.0;
            (value.to_bits() >> 16) as u16
        })
        .collect();
    let (m, n) = (x.len() / k, warps * 128);
    let mut y = vec![0u16; m * n];
    let packed = vec![0u8; n * k / 2];
    let scales = vec![0u8; n * k / 16];
    CudaEmulator::new()
        .launch_on_host(HostLaunch {
            kernel: "emu_test_mma",
            grid: 1,
            block: (32 * warps) as u32,
            x: &x,
            packed: &packed,
            scales: &scales,
            y: &mut y,
            global_scale: 1.0,
            m,
            n,
            k,
        })
        .unwrap_or_else(|error| panic!("emu_test_mma: {error}"));
    let value = |bits: u16| f32::from_bits(u32::from(bits) << 16);
    for warp in 0..warps {
        let base = &x[512 * warp..];
        for r in 0..16 {
            for c in 0..8 {
                let mut expected = value(base[384 + 8 * r + c]);
                for kk in 0..16 {
                    expected = value(base[16 * r + kk]).mul_add(value(base[256 + 8 * kk + c]), expected);
                }
                let at = 256 * warp + 2 * (8 * r + c);
                let found = f32::from_bits(u32::from(y[at]) | (u32::from(y[at + 1]) << 16));
                assert_eq!(
                    found.to_bits(),
                    expected.to_bits(),
                    "warp {warp} D[{r}][{c}]: expected {expected}, found {found}"
                );
            }
        }
    }
}

#[test]
fn lanes_meeting_an_mma_with_a_shuffle_are_caught() {
    let message = fault_message("emu_test_mma_divergent", 32);
    assert!(
        message.contains("lane 31 called __shfl_xor_sync but lane 0 called mma.sync in the same shuffle"),
        "{message}"
    );
}
