//! The emulator's own checks: each planted fault must be caught with the message of the check
//! that fired (where, what, and for races both threads), and each has a control kernel, as close
//! to the fault as possible, that must pass.

//!
//! `primitives` and `tensor_core` check the emulated intrinsics (half and bf16 arithmetic, byte
//! permutes, conversions, mma) against independent references.

mod asm;
mod async_copies;
mod grid;
mod harness;
mod primitives;
mod probes;
mod stream_loads;
mod tensor_core;

use gemv_backend::Error;
use gemv_cuda::launch::THREADS_PER_BLOCK;
use gemv_cuda_emulator::{CudaEmulator, EMULATOR_SANITIZERS, ThreadOrder};
use harness::{K, fault_message, fault_message_with, launch, launch_with, passes};

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
    assert!(message.contains(" t0-31 (warp 0): shuffle #0, barrier #0;"), "{message}");
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

/// Runs a test kernel over chosen inputs: `x` holds `m * k` values, y gets `m * n`.
#[test]
fn a_prefetch_past_the_weights_is_caught_and_one_inside_passes() {
    let message = fault_message("emu_test_prefetch_past_end", 32);
    assert!(message.contains("out-of-bounds read of 1 bytes"), "{message}");
    assert!(message.contains("packed"), "{message}");
    passes("emu_test_prefetch_inside", 32);
}

#[test]
fn lanes_meeting_an_mma_with_a_shuffle_are_caught() {
    let message = fault_message("emu_test_mma_divergent", 32);
    assert!(
        message.contains("lane 31 called __shfl_xor_sync but lane 0 called mma.sync in the same shuffle"),
        "{message}"
    );
}
