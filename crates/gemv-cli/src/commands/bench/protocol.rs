//! The timing protocol: cold weights rotated through copies totalling at least
//! `cold_bytes`, device events where the backend has them, `launches` back-to-back launches per
//! timing after a warm-up, `rounds` rounds with the arms interleaved (rotated each round), and
//! the median per arm. The backend's memory copy (the "% copy" reference) is one more arm: timed
//! in every round among the kernels, its median bandwidth is the reference. Where the backend
//! has a peer GEMM (cuBLAS's BF16 GEMM on CUDA), it is timed on the same shape and M, the same
//! way, and printed beside the kernels with the NVFP4 speed-up over it; rotation peers (ggml on
//! the CPU) are arms of the rotation themselves, one per M.

use super::peers;
use super::rotation_peer::{self, RotationPeer};
use super::{Arm, BenchOptions, Measurement};
use crate::commands::progress::progress;
use gemv_backend::{BenchTimers, DeviceMatrix, GpuBackend, PeerTiming};
use gemv_conformance as conformance;
use gemv_core::{GemvShape, host_threads};

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The speed-up NVFP4 weights allow over BF16 ones when both stream at the memory's speed: 2
/// bytes per weight against 0.5625.
pub const IDEAL_PEER_SPEEDUP: f64 = 2.0 / 0.5625;

/// The tier label of a peer row.
pub const PEER_TIER: &str = "peer";

/// The pause after each step of the rotation: threads that spin for their next job after one
/// step (the CPU backend's, ggml's) are asleep before the next step's clock starts.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(2);

/// One step of the rotation.
enum Step<'a> {
    Kernels(usize, &'a Arm),
    Peer(usize, usize),
    Copy,
}

/// Times every arm on one shape (and the backend's peer GEMM, see [`peer_rows`]).
#[allow(clippy::too_many_arguments)]
pub fn measure(
    backend: &dyn BenchTimers,
    arms: &[Arm],
    label: &str,
    n: usize,
    k: usize,
    options: &BenchOptions,
    peak: Option<f64>,
    notes: &mut Vec<String>,
) -> Result<Vec<Measurement>, String> {
    let max_m = arms.iter().map(|a| a.m).max().unwrap_or(1);
    let weight_bytes = n * k / 2 + n * k / 16;
    let copies = super::memory::cold_copies(weight_bytes as u64, options.cold_bytes() as u64) as usize;
    eprintln!(
        "bench: {label} (N = {n}, K = {k}): {copies} weight copies ({} MB) for cold weights",
        (copies * weight_bytes) >> 20
    );
    let weights = conformance::matrix(n, k, 1);
    let matrices = (0..copies)
        .map(|_| DeviceMatrix::upload(backend as &dyn GpuBackend, &weights.view()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("uploading {copies} weight copies: {e}"))?;
    let x = backend.alloc(2 * max_m * k).map_err(|e| e.to_string())?;
    let y = backend.alloc(2 * max_m * n).map_err(|e| e.to_string())?;
    let x_data = conformance::activations(max_m, k, 2);
    backend.upload(x.whole(), bytemuck::cast_slice(&x_data)).map_err(|e| e.to_string())?;
    let mut ms: Vec<usize> = arms.iter().map(|a| a.m).collect();
    ms.sort_unstable();
    ms.dedup();
    let mut rotation_peers: Vec<Box<dyn RotationPeer>> = if options.peer() {
        peers::for_backend(&backend.device_info(), n, k, &ms, options.cold_bytes(), host_threads(), notes)
    } else {
        Vec::new()
    };
    // The copy reference is one more arm of the rotation, timed in every round: a host or device
    // that is busy for part of the run then slows both sides of the "% copy" ratio alike.
    let mut copy_samples = Some(Vec::with_capacity(options.rounds));
    let mut samples = vec![Vec::with_capacity(options.rounds); arms.len()];
    let mut peer_samples = vec![vec![Vec::with_capacity(options.rounds); ms.len()]; rotation_peers.len()];
    let mut steps: Vec<Step<'_>> = arms.iter().enumerate().map(|(i, arm)| Step::Kernels(i, arm)).collect();
    steps.extend(rotation_peer::peer_steps(&rotation_peers, &ms).into_iter().map(|(p, i)| Step::Peer(p, i)));
    steps.push(Step::Copy);
    let settle = !rotation_peers.is_empty();
    let total = options.rounds * (steps.len() - 1);
    let mut done = 0;
    for round in 0..options.rounds {
        for step in 0..steps.len() {
            if settle {
                std::thread::sleep(SETTLE);
            }
            let (index, arm) = match steps[(step + round) % steps.len()] {
                Step::Kernels(index, arm) => (index, arm),
                Step::Peer(p, i) => {
                    let peer = &mut rotation_peers[p];
                    let elapsed = peer.time(ms[i], options.launches);
                    peer.rest();
                    peer_samples[p][i].push(elapsed?.as_secs_f64() / options.launches as f64);
                    done += 1;
                    progress(done, total, &format!("bench {label}"), "timings");
                    continue;
                }
                Step::Copy => {
                    if let Some(rates) = copy_samples.as_mut() {
                        match backend.time_device_copy(weight_bytes, options.launches).map_err(|e| e.to_string())? {
                            Some(t) => {
                                rates.push(2.0 * (weight_bytes * options.launches) as f64 / t.as_secs_f64() / 1e9)
                            }
                            None => copy_samples = None,
                        }
                    }
                    continue;
                }
            };
            let list: Vec<_> = (0..options.launches)
                .flat_map(|i| {
                    let matrix = &matrices[i % copies];
                    arm.launches.iter().map(move |&(kernel, offset, rows)| (kernel, matrix.args(x, y, offset, rows)))
                })
                .collect();
            if round == 0 {
                backend.time_launches(&list[..arm.launches.len()], 1).map_err(|e| e.to_string())?;
            }
            let elapsed = backend.time_launches(&list, 1).map_err(|e| e.to_string())?;
            samples[index].push(elapsed.as_secs_f64() / options.launches as f64);
            done += 1;
            progress(done, total, &format!("bench {label}"), "timings");
        }
    }
    let copy_gbps = copy_samples.filter(|c| !c.is_empty()).map(|mut rates| {
        let reference = median(&mut rates);
        // Sorted by `median`: the spread shows how much the machine moved during the run.
        notes.push(format!(
            "{label}: \"% copy\" divides by a copy at {reference:.1} GB/s, the median of {} rounds ({:.1}-{:.1} GB/s)",
            rates.len(),
            rates[0],
            rates[rates.len() - 1]
        ));
        reference
    });
    let _ = backend.free(x);
    let _ = backend.free(y);
    drop(matrices);
    let mut rows: Vec<Measurement> = arms
        .iter()
        .zip(samples.iter_mut())
        .map(|(arm, samples)| {
            let seconds = median(samples);
            let bytes = GemvShape { m: arm.m, n, k }.bytes_moved() as f64;
            let gbps = bytes / seconds / 1e9;
            Measurement {
                shape: label.to_string(),
                n,
                k,
                tier: arm.kind.label().to_string(),
                kernels: arm.kernels.clone(),
                m: arm.m,
                micros: seconds * 1e6,
                gbps,
                percent_peak: peak.map(|p| 100.0 * gbps / p),
                percent_copy: copy_gbps.map(|c| 100.0 * gbps / c),
            }
        })
        .collect();
    let peer_rows_start = rows.len();
    for (peer, samples) in rotation_peers.iter().zip(peer_samples.iter_mut()) {
        for (&m, samples) in ms.iter().zip(samples.iter_mut()) {
            if !peer.covers(m) {
                continue;
            }
            let seconds = median(samples);
            let gbps = peer.bytes_moved(m) as f64 / seconds / 1e9;
            rows.push(Measurement {
                shape: label.to_string(),
                n,
                k,
                tier: PEER_TIER.into(),
                kernels: peer.name().to_string(),
                m,
                micros: seconds * 1e6,
                gbps,
                percent_peak: peak.map(|p| 100.0 * gbps / p),
                percent_copy: copy_gbps.map(|c| 100.0 * gbps / c),
            });
        }
    }
    let (ours, theirs) = rows.split_at(peer_rows_start);
    for peer in theirs {
        for row in ours.iter().filter(|r| r.m == peer.m) {
            notes.push(format!(
                "{label} M = {}: {} is {:.2}x as fast as {}",
                row.m,
                row.kernels,
                peer.micros / row.micros,
                peer.kernels
            ));
        }
    }
    if options.peer() {
        let peers = peer_rows(backend, &rows, options, peak, copy_gbps, notes);
        rows.extend(peers);
    }
    Ok(rows)
}

/// The backend's peer GEMM at each M of `ours` (same shape, cold copies, launches and rounds),
/// with a note per kernel row giving its speed-up over the peer. A backend without a peer adds
/// nothing; a peer that cannot run here (no libcublas) adds a note saying why, not a failure.
fn peer_rows(
    backend: &dyn BenchTimers,
    ours: &[Measurement],
    options: &BenchOptions,
    peak: Option<f64>,
    copy_gbps: Option<f64>,
    notes: &mut Vec<String>,
) -> Vec<Measurement> {
    let Some(first) = ours.first() else { return Vec::new() };
    let (label, n, k) = (first.shape.clone(), first.n, first.k);
    let mut ms: Vec<usize> = ours.iter().map(|r| r.m).collect();
    ms.sort_unstable();
    ms.dedup();
    let mut rows = Vec::new();
    for (i, &m) in ms.iter().enumerate() {
        let shape = GemvShape { m, n, k };
        let timing = match backend.time_peer_gemm(shape, options.cold_bytes(), options.launches, options.rounds) {
            Ok(Some(timing)) if !timing.rounds.is_empty() => timing,
            Ok(_) => return rows,
            Err(error) => {
                notes.push(format!("no peer row on {label}: {error}"));
                return rows;
            }
        };
        progress(i + 1, ms.len(), &format!("peer {label}"), "values of M");
        let mut samples: Vec<f64> =
            timing.rounds.iter().map(|t| t.as_secs_f64() / options.launches.max(1) as f64).collect();
        let seconds = median(&mut samples);
        let gbps = PeerTiming::bytes_moved(shape) as f64 / seconds / 1e9;
        for row in ours.iter().filter(|r| r.m == m) {
            notes.push(format!(
                "{label} M = {m}: {} is {:.2}x as fast as {} (ideal {IDEAL_PEER_SPEEDUP:.2}x: 2 bytes per weight \
                 against 0.5625)",
                row.kernels,
                seconds * 1e6 / row.micros,
                timing.name
            ));
        }
        rows.push(Measurement {
            shape: label.clone(),
            n,
            k,
            tier: PEER_TIER.into(),
            kernels: format!("{} (peer, BF16 weights)", timing.name),
            m,
            micros: seconds * 1e6,
            gbps,
            percent_peak: peak.map(|p| 100.0 * gbps / p),
            percent_copy: copy_gbps.map(|c| 100.0 * gbps / c),
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::BackendChoice;
    use gemv_backend::{BufferRange, DeviceBuffer, DeviceInfo, GemvArgs, KernelHandle};
    use gemv_core::KillSwitches;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// The host backend with a stand-in peer (a fixed time per round, or an error) and a
    /// stand-in copy whose n-th call (from 1) takes n ms when `copy` is set.
    struct WithPeer {
        inner: gemv_mock::MockBackend,
        peer: std::result::Result<Duration, &'static str>,
        calls: AtomicUsize,
        copy: bool,
        copy_calls: AtomicUsize,
    }

    impl GpuBackend for WithPeer {
        fn name(&self) -> &'static str {
            self.inner.name()
        }
        fn device_info(&self) -> DeviceInfo {
            self.inner.device_info()
        }
        fn compute_capability(&self) -> Option<(i32, i32)> {
            self.inner.compute_capability()
        }
        fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
            self.inner.lookup_kernel(module, name)
        }
        fn alloc(&self, bytes: usize) -> gemv_backend::Result<DeviceBuffer> {
            self.inner.alloc(bytes)
        }
        fn free(&self, buffer: DeviceBuffer) -> gemv_backend::Result<()> {
            self.inner.free(buffer)
        }
        fn upload(&self, dst: BufferRange, data: &[u8]) -> gemv_backend::Result<()> {
            self.inner.upload(dst, data)
        }
        fn download(&self, src: BufferRange, out: &mut [u8]) -> gemv_backend::Result<()> {
            self.inner.download(src, out)
        }
        fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> gemv_backend::Result<()> {
            self.inner.launch_gemv(kernel, args)
        }
        fn synchronize(&self) -> gemv_backend::Result<()> {
            self.inner.synchronize()
        }
    }

    impl BenchTimers for WithPeer {
        fn time_device_copy(&self, _bytes: usize, _repeats: usize) -> gemv_backend::Result<Option<Duration>> {
            let call = self.copy_calls.fetch_add(1, Ordering::Relaxed) as u64 + 1;
            Ok(self.copy.then(|| Duration::from_millis(call)))
        }
        fn time_peer_gemm(
            &self,
            _shape: GemvShape,
            _cold_bytes: usize,
            _repeats: usize,
            rounds: usize,
        ) -> gemv_backend::Result<Option<PeerTiming>> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            match self.peer {
                Ok(each) => Ok(Some(PeerTiming { name: "test peer", rounds: vec![each; rounds] })),
                Err(reason) => Err(gemv_backend::Error::Unavailable { backend: "test", reason: reason.into() }),
            }
        }
    }

    fn bench(backend: &dyn BenchTimers, ms: &[usize], peer: bool) -> (Vec<Measurement>, Vec<String>) {
        let options = BenchOptions {
            backend: BackendChoice::Host,
            shapes: vec![],
            ms: ms.to_vec(),
            tiers: vec![],
            families: vec![],
            peak_gbps: None,
            json: false,
            plot: None,
            rounds: 3,
            launches: 2,
            cold_mb: 0,
            moe: vec![],
            grouped_kernels: vec![],
            chain: None,
            no_peer: !peer,
        };
        let tiers = gemv_backend::ResolvedTiers::resolve(backend, KillSwitches::default());
        let arms = super::super::arms(&tiers, backend, &options, &mut Vec::new()).expect("arms");
        let mut notes = Vec::new();
        let rows = measure(backend, &arms, "t", 64, 256, &options, None, &mut notes).expect("measure");
        (rows, notes)
    }

    fn with_peer(peer: std::result::Result<Duration, &'static str>) -> WithPeer {
        WithPeer {
            inner: gemv_mock::MockBackend::new(),
            peer,
            calls: AtomicUsize::new(0),
            copy: false,
            copy_calls: AtomicUsize::new(0),
        }
    }

    #[test]
    fn the_copy_reference_is_timed_in_every_round_and_its_median_taken() {
        let backend = WithPeer { copy: true, ..with_peer(Ok(Duration::from_millis(1))) };
        // Three rounds: copies of 1, 2 and 3 ms; the reference is the 2 ms one.
        let (rows, notes) = bench(&backend, &[1, 2], false);
        assert_eq!(backend.copy_calls.load(Ordering::Relaxed), 3, "one copy per round");
        let weight_bytes = (64 * 256 / 2 + 64 * 256 / 16) as f64;
        let reference = 2.0 * weight_bytes * 2.0 / 2e-3 / 1e9;
        for row in &rows {
            let expected = 100.0 * row.gbps / reference;
            let found = row.percent_copy.expect("a copy reference");
            assert!((found - expected).abs() < 1e-9 * expected, "M = {}: expected {expected}%, found {found}%", row.m);
        }
        let said = format!(
            "t: \"% copy\" divides by a copy at {reference:.1} GB/s, the median of 3 rounds ({:.1}-{:.1} GB/s)",
            reference * 2.0 / 3.0,
            reference * 2.0
        );
        assert!(notes.contains(&said), "{said:?} not in {notes:?}");
        // A backend without a copy is asked once, and the column stays empty.
        let backend = with_peer(Ok(Duration::from_millis(1)));
        let (rows, _) = bench(&backend, &[1], false);
        assert_eq!(backend.copy_calls.load(Ordering::Relaxed), 1);
        assert!(rows.iter().all(|r| r.percent_copy.is_none()), "{rows:?}");
    }

    #[test]
    fn a_peer_adds_a_row_per_m_and_the_speed_up_of_each_kernel_row() {
        let backend = with_peer(Ok(Duration::from_millis(4)));
        let (rows, notes) = bench(&backend, &[1, 3], true);
        let peers: Vec<&Measurement> = rows.iter().filter(|r| r.tier == PEER_TIER).collect();
        assert_eq!(peers.iter().map(|r| r.m).collect::<Vec<_>>(), vec![1, 3]);
        // 4 ms per round of 2 launches: 2000 us each; its bytes are BF16's.
        assert!(peers.iter().all(|r| (r.micros - 2000.0).abs() < 1e-6), "{peers:?}");
        let bytes = PeerTiming::bytes_moved(GemvShape { m: 3, n: 64, k: 256 }) as f64;
        assert!((peers[1].gbps - bytes / 2e-3 / 1e9).abs() < 1e-9);
        for ours in rows.iter().filter(|r| r.tier != PEER_TIER) {
            let expected =
                format!("t M = {}: {} is {:.2}x as fast as test peer", ours.m, ours.kernels, 2000.0 / ours.micros);
            assert!(notes.iter().any(|n| n.starts_with(&expected)), "{expected:?} not in {notes:?}");
        }
        assert_eq!(backend.calls.load(Ordering::Relaxed), 2, "one call per M");
    }

    #[test]
    fn a_peer_that_cannot_run_is_a_note_and_no_row() {
        let backend = with_peer(Err("no libcublas here"));
        let (rows, notes) = bench(&backend, &[1, 2], true);
        assert!(rows.iter().all(|r| r.tier != PEER_TIER), "{rows:?}");
        assert_eq!(rows.len(), 2);
        assert!(notes.iter().any(|n| n.contains("no peer row on t") && n.contains("no libcublas here")), "{notes:?}");
        assert_eq!(backend.calls.load(Ordering::Relaxed), 1, "asked once, not per M");
    }

    #[test]
    fn no_peer_is_asked_when_switched_off_or_absent() {
        let backend = with_peer(Ok(Duration::from_millis(1)));
        let (rows, notes) = bench(&backend, &[1], false);
        assert_eq!(backend.calls.load(Ordering::Relaxed), 0);
        assert!(rows.iter().all(|r| r.tier != PEER_TIER) && notes.is_empty(), "{rows:?} {notes:?}");
        // The host reference has no peer: nothing added, nothing said.
        let (rows, notes) = bench(&gemv_mock::MockBackend::new(), &[1], true);
        assert!(rows.iter().all(|r| r.tier != PEER_TIER) && notes.is_empty(), "{rows:?} {notes:?}");
    }
}
