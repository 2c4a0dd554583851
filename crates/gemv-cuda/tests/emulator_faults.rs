//! The emulator's own checks: planted faults must be caught, with where and what.

use gemv_backend::Error;
use gemv_cuda::{CudaEmulator, HostLaunch};

fn launch(kernel: &str, block: u32) -> Result<Vec<u16>, Error> {
    let (m, n, k) = (1, 64, 32);
    let x = vec![0u16; m * k];
    let packed = vec![0u8; n * k / 2];
    let scales = vec![0u8; n * k / 16];
    let mut y = vec![0u16; m * n];
    CudaEmulator::new().launch_on_host(HostLaunch {
        kernel,
        grid: 2,
        block,
        x: &x,
        packed: &packed,
        scales: &scales,
        y: &mut y,
        global_scale: 1.0,
        m,
        n,
        k,
    })?;
    Ok(y)
}

fn fault_message(kernel: &str, block: u32) -> String {
    match launch(kernel, block) {
        Err(Error::KernelFault { kernel: name, message }) => {
            assert_eq!(name, kernel);
            eprintln!("{kernel}: {message}");
            message
        }
        other => panic!("{kernel}: expected a kernel fault, got {other:?}"),
    }
}

#[test]
fn a_write_past_the_buffer_is_caught_with_block_thread_and_offset() {
    let message = fault_message("emu_test_write_past_end", 64);
    assert!(message.contains("block (0,0,0) thread (0,0,0)"), "{message}");
    assert!(message.contains("out-of-bounds write"), "{message}");
    assert!(message.contains("past the end of 'y'"), "{message}");
}

#[test]
fn a_read_before_the_buffer_is_caught() {
    let message = fault_message("emu_test_read_before_start", 32);
    assert!(message.contains("out-of-bounds read of 1 bytes"), "{message}");
}

#[test]
fn a_divergent_syncthreads_is_caught() {
    let message = fault_message("emu_test_divergent_syncthreads", 64);
    assert!(message.contains("__syncthreads"), "{message}");
    assert!(message.contains("divergent barrier") || message.contains("deadlock"), "{message}");
}

#[test]
fn a_shuffle_mask_leaving_out_a_participating_lane_is_caught() {
    let message = fault_message("emu_test_partial_shuffle_mask", 32);
    assert!(message.contains("__shfl_down_sync"), "{message}");
    // Lane 15 reading lane 16 (outside the mask) or lane 16 calling with a mask without itself:
    // whichever the deterministic schedule meets first.
    assert!(message.contains("leaves out the calling lane") || message.contains("not in mask"), "{message}");
}

#[test]
fn a_misaligned_vector_load_is_caught() {
    let message = fault_message("emu_test_misaligned_vector", 32);
    assert!(message.contains("misaligned 16-byte read"), "{message}");
}

#[test]
fn a_correct_barrier_exchange_passes() {
    let y = launch("emu_test_shared_exchange", 32).expect("a correct kernel runs");
    // Block b, thread t writes the value of thread 31 - t: 31 - t + b.
    for (i, &v) in y.iter().enumerate() {
        let (block, thread) = (i / 32, i % 32);
        assert_eq!(usize::from(v), 31 - thread + block, "y[{i}]");
    }
}

#[test]
fn unknown_kernels_are_a_typed_error() {
    assert!(matches!(launch("no_such_kernel", 32), Err(Error::KernelFault { .. })));
}
