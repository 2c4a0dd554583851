//! The streaming load (`ld.global.nc` with cache hints, through the portable header's
//! `gemv_load_stream16` and a scalar form): executed from its PTX with the read-only path's checks.

use crate::harness::launch_token;
use gemv_backend::Error;
use gemv_cuda_emulator::CudaEmulator;

const THREADS: usize = 32;
const K: usize = 512;
const N: usize = 9 * THREADS;

/// Runs one of the test kernels on X = a fixed pattern (one token of K), one block of 32
/// threads; returns X and Y.
fn run(kernel: &str) -> (Vec<u16>, Result<Vec<u16>, Error>) {
    let x: Vec<u16> = (0..K as u16).map(|v| v.wrapping_mul(0x9E37)).collect();
    let packed = vec![0u8; N * K / 2];
    let y = launch_token(CudaEmulator::new(), kernel, 1, THREADS as u32, &x, &packed, N, K);
    (x, y)
}

fn fault_of(kernel: &str) -> String {
    match run(kernel).1 {
        Err(Error::KernelFault { message, .. }) => message,
        other => panic!("{kernel}: expected a kernel fault, got {other:?}"),
    }
}

#[test]
fn a_streaming_load_reads_the_bytes_a_read_only_load_reads() {
    let (x, y) = run("emu_test_stream_load");
    let y = y.expect("the streaming loads run");
    // The kernel starts at X's first 16-byte aligned element, as the test computes here.
    let skip = (16 - x.as_ptr() as usize % 16) % 16 / 2;
    for i in 0..THREADS {
        let from = skip + 8 * i;
        assert_eq!(&y[8 * i..8 * i + 8], &x[from..from + 8], "thread {i}: the 16-byte load");
        assert_eq!(y[8 * THREADS + i], x[from + 2], "thread {i}: the scalar load at +4 bytes");
    }
}

#[test]
fn a_misaligned_streaming_load_is_caught() {
    let message = fault_of("emu_test_stream_load_misaligned");
    assert!(message.contains("misaligned 16-byte read"), "{message}");
    assert!(message.contains("'x'"), "{message}");
}

#[test]
fn a_streaming_load_of_memory_the_launch_writes_is_caught() {
    let message = fault_of("emu_test_stream_load_writable");
    assert!(message.contains("from writable 'y'"), "{message}");
}
