//! The memory microbenchmarks' kernels (kernels/cuda/probes/memory_probes.cuh), proven before a
//! GPU times them: each fold equals the host's XOR of the bytes it must read, in every thread
//! order, the ring's mbarrier protocol included; the chain step reads its predecessor's result
//! only after griddepcontrol.wait; the chase ends where the host's walk ends.

use crate::harness::launch_token;
use gemv_backend::Error;
use gemv_cuda_emulator::{CudaEmulator, ThreadOrder};

const ORDERS: [ThreadOrder; 4] =
    [ThreadOrder::Forward, ThreadOrder::Reversed, ThreadOrder::Seeded(3), ThreadOrder::Seeded(4)];

/// The weights' bytes: n rows of k / 2, a fixed pseudo-random pattern.
fn weights(n: usize, k: usize) -> Vec<u8> {
    let mut state = 0x2545_F491u32;
    (0..n * k / 2)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect()
}

/// The XOR of the little-endian words of `vectors` 16-byte vectors of `bytes` from its first
/// 16-byte aligned byte (where the probes start).
fn xor_of_words(bytes: &[u8], vectors: usize) -> u32 {
    let skip = (16 - bytes.as_ptr() as usize % 16) % 16;
    bytes[skip..skip + 16 * vectors]
        .chunks_exact(4)
        .fold(0, |acc, w| acc ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// The XOR of the per-warp folds a probe wrote as half-word pairs from y[first].
fn xor_of_folds(y: &[u16], first: usize) -> u32 {
    y[first..].chunks_exact(2).fold(0, |acc, p| acc ^ (u32::from(p[0]) | (u32::from(p[1]) << 16)))
}

struct Run {
    x: Vec<u16>,
    packed: Vec<u8>,
    y: Result<Vec<u16>, Error>,
}

fn run(emulator: CudaEmulator, kernel: &str, grid: u32, block: u32, x: Vec<u16>, n: usize, k: usize) -> Run {
    let packed = weights(n, k);
    let y = launch_token(emulator, kernel, grid, block, &x, &packed, n, k);
    Run { x, packed, y }
}

#[test]
fn the_stream_probes_fold_every_word_once_in_every_order() {
    let (n, k) = (64, 512);
    for kernel in ["emu_probe_stream_ldg", "emu_probe_stream_hinted"] {
        for order in ORDERS {
            let out = run(CudaEmulator::new().with_thread_order(order), kernel, 2, 64, vec![0; k], n, k);
            let y = out.y.unwrap_or_else(|e| panic!("{kernel} ({order:?}): {e}"));
            // The kernel leaves the last three whole vectors out, so its last tile is partial.
            let skip = (16 - out.packed.as_ptr() as usize % 16) % 16;
            let vectors = (out.packed.len() - skip) / 16 - 3;
            assert_eq!(xor_of_folds(&y, 0), xor_of_words(&out.packed, vectors), "{kernel} ({order:?})");
        }
    }
}

#[test]
fn the_bulk_ring_probe_folds_every_stage_once_in_every_order() {
    let (n, k) = (64, 512);
    for order in ORDERS {
        let out = run(CudaEmulator::new().with_thread_order(order), "emu_probe_ring", 2, 96, vec![0; k], n, k);
        let y = out.y.unwrap_or_else(|e| panic!("emu_probe_ring ({order:?}): {e}"));
        let skip = (16 - out.packed.as_ptr() as usize % 16) % 16;
        // Whole 2 KB stages only; two blocks, so each slot of the two-stage ring is refilled.
        let stages = (out.packed.len() - skip) / 2048;
        assert!(stages >= 7, "{stages} stages");
        assert_eq!(xor_of_folds(&y, 0), xor_of_words(&out.packed, stages * 128), "{order:?}");
    }
}

#[test]
fn the_chain_probe_reads_its_predecessor_only_after_the_wait() {
    let (n, k) = (64, 256);
    for dependent in [false, true] {
        for order in ORDERS {
            let emulator = CudaEmulator::new().with_thread_order(order).with_dependent_launch(dependent);
            let out = run(emulator, "emu_probe_chain", 2, 128, vec![41; k], n, k);
            let y = out.y.unwrap_or_else(|e| panic!("emu_probe_chain (dependent {dependent}, {order:?}): {e}"));
            assert_eq!(y[0], out.x[0] + 1);
            let skip = (16 - out.packed.as_ptr() as usize % 16) % 16;
            let vectors = (out.packed.len() - skip) / 16;
            assert_eq!(xor_of_folds(&y, 2), xor_of_words(&out.packed, vectors), "{order:?}");
        }
    }
}

#[test]
fn the_chase_probe_ends_where_the_walk_ends() {
    // One cycle through every index of X, in a scrambled order; the kernel takes n = 200 hops.
    let (n, k) = (200, 256);
    let mut cycle: Vec<u16> = (1..k as u16).map(|i| (i * 97) % k as u16).collect();
    cycle.push(0);
    let mut x = vec![0u16; k];
    let mut at = 0u16;
    for &next in &cycle {
        x[usize::from(at)] = next;
        at = next;
    }
    let walked = (0..n).fold(0u16, |at, _| x[usize::from(at)]);
    assert_ne!(walked, 0, "the walk must not end at its start");
    let out = run(CudaEmulator::new(), "emu_probe_chase", 1, 32, x, n, k);
    assert_eq!(out.y.expect("the chase runs")[0], walked);
}
