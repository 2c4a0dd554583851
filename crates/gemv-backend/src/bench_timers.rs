//! What the benchmark asks of a backend beyond launching: device time of a span of launches, the
//! device's own copy (the bandwidth reference) and the platform's BF16 GEMM (the peer). Kept off
//! [`GpuBackend`], which is what engines and tests call; the `gemv bench` command holds its
//! backend as `dyn BenchTimers`.

use crate::{GemvArgs, GpuBackend, GroupedArgs, KernelHandle, Result};
use gemv_core::GemvShape;
use std::time::{Duration, Instant};

/// A backend the benchmark can time. Every method has a default: the host clock, no copy, no
/// peer.
pub trait BenchTimers: GpuBackend {
    /// Runs `launches` in order, `repeats` times, and returns the device time of the whole span.
    /// The default uses the host clock around a synchronised span; backends with events override.
    fn time_launches(&self, launches: &[(KernelHandle, GemvArgs)], repeats: usize) -> Result<Duration> {
        time_with_host_clock(self, launches, repeats)
    }

    /// Captures `launches` (in order) into one graph, replays it once untimed, and returns the
    /// device time of `repeats` more replays; `Ok(None)` where the backend has no graphs. A
    /// replay writes what running the launches once writes: a decode step captured once and
    /// replayed, as an engine does to take the host out of the step.
    fn time_launches_as_graph(
        &self,
        launches: &[(KernelHandle, GemvArgs)],
        repeats: usize,
    ) -> Result<Option<Duration>> {
        let _ = (launches, repeats);
        Ok(None)
    }

    /// Runs the grouped launches `launches` in order, `repeats` times, and returns the device
    /// time of the whole span (the host clock unless the backend has events).
    fn time_grouped(&self, launches: &[GroupedArgs], repeats: usize) -> Result<Duration> {
        self.synchronize()?;
        let start = Instant::now();
        for _ in 0..repeats {
            for args in launches {
                self.launch_grouped(args)?;
            }
        }
        self.synchronize()?;
        Ok(start.elapsed())
    }

    /// Device time of `repeats` device-to-device copies of `bytes` (the bandwidth reference of
    /// the performance protocol), or None when the backend has no such copy.
    fn time_device_copy(&self, bytes: usize, repeats: usize) -> Result<Option<Duration>> {
        let _ = (bytes, repeats);
        Ok(None)
    }

    /// The platform's own dense BF16 GEMM on `shape` (BF16 weights, N x K, rotated through
    /// copies that fill at least `cold_bytes`), timed `rounds` times over `repeats` runs each:
    /// the peer the bench prints beside the kernels (cuBLAS on CUDA). `Ok(None)`: this backend
    /// has no peer; an error says why a peer it would have cannot run here (e.g. no libcublas).
    fn time_peer_gemm(
        &self,
        shape: GemvShape,
        cold_bytes: usize,
        repeats: usize,
        rounds: usize,
    ) -> Result<Option<PeerTiming>> {
        let _ = (shape, cold_bytes, repeats, rounds);
        Ok(None)
    }

    /// What the bench should say under its table about how this backend ran what it timed
    /// (the CPU backend: the SIMD path of each M, and whether it was calibrated or forced).
    fn timing_notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A peer GEMM's timing ([`BenchTimers::time_peer_gemm`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerTiming {
    /// What ran, e.g. `cuBLAS BF16 GEMM`.
    pub name: &'static str,
    /// Device time of each round's repeats together.
    pub rounds: Vec<Duration>,
}

impl PeerTiming {
    /// Bytes a dense BF16 GEMM on `shape` moves at least: its weights, X and Y, two bytes each.
    pub fn bytes_moved(shape: GemvShape) -> u64 {
        let (m, n, k) = (shape.m as u64, shape.n as u64, shape.k as u64);
        2 * (n * k + m * k + m * n)
    }
}

/// Runs `launches` `repeats` times between two synchronisations and returns the host-clock span:
/// the timing of backends without device events.
pub fn time_with_host_clock<B: GpuBackend + ?Sized>(
    backend: &B,
    launches: &[(KernelHandle, GemvArgs)],
    repeats: usize,
) -> Result<Duration> {
    backend.synchronize()?;
    let start = Instant::now();
    for _ in 0..repeats {
        for (kernel, args) in launches {
            backend.launch_gemv(*kernel, args)?;
        }
    }
    backend.synchronize()?;
    Ok(start.elapsed())
}
