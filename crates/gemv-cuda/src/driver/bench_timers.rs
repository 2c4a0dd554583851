//! `gemv bench`'s view of the CUDA backend (feature `bench`): spans of launches and the device's
//! own copy timed by device events, and cuBLAS's BF16 GEMM as the peer (feature `cublas-peer`).

#[cfg(not(feature = "cublas-peer"))]
use super::NAME;
use super::{CudaBackend, driver_error};
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
#[cfg(not(feature = "cublas-peer"))]
use gemv_backend::Error;
use gemv_backend::{BenchTimers, GemvArgs, GroupedArgs, KernelHandle, PeerTiming, Result};
use gemv_core::GemvShape;
use std::time::Duration;

impl BenchTimers for CudaBackend {
    fn time_launches(&self, launches: &[(KernelHandle, GemvArgs)], repeats: usize) -> Result<Duration> {
        let buffers = self.buffers.lock();
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.stream.record_event(timing).map_err(driver_error("recording an event"))?;
        for _ in 0..repeats {
            for (kernel, args) in launches {
                self.launch_locked(&buffers, *kernel, args)?;
            }
        }
        let end = self.stream.record_event(timing).map_err(driver_error("recording an event"))?;
        end.synchronize().map_err(driver_error("waiting for an event"))?;
        let ms = start.elapsed_ms(&end).map_err(driver_error("reading event time"))?;
        Ok(Duration::from_secs_f64(f64::from(ms) / 1e3))
    }

    /// On a stream of its own (the backend's legacy default stream cannot be captured), after
    /// the work queued before it: every launch prepared first (addresses taken outside the
    /// capture), then captured, instantiated, replayed once and timed over `repeats` replays.
    fn time_launches_as_graph(
        &self,
        launches: &[(KernelHandle, GemvArgs)],
        repeats: usize,
    ) -> Result<Option<Duration>> {
        let buffers = self.buffers.lock();
        let prepared =
            launches.iter().map(|(kernel, args)| self.prepare(&buffers, *kernel, args)).collect::<Result<Vec<_>>>()?;
        let stream = self.context.new_stream().map_err(driver_error("creating a stream to capture on"))?;
        self.stream.synchronize().map_err(driver_error("synchronize before a capture"))?;
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver_error("beginning a graph capture"))?;
        // SAFETY: the stream is of this backend's context; the `buffers` lock keeps every prepared
        // buffer alive until the last replay below has finished (`end.synchronize()`).
        let captured = prepared.iter().try_for_each(|launch| unsafe { self.enqueue_prepared(&stream, launch) });
        // The capture always ends, so that a failed enqueue leaves the stream usable.
        let graph = stream.end_capture(CUgraphInstantiate_flags(0)).map_err(driver_error("ending a graph capture"));
        captured?;
        let Some(graph) = graph? else {
            return Err(gemv_backend::Error::Unsupported { backend: super::NAME, what: "an empty graph capture" });
        };
        graph.launch().map_err(driver_error("replaying a graph (warm-up)"))?;
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = stream.record_event(timing).map_err(driver_error("recording an event"))?;
        for _ in 0..repeats {
            graph.launch().map_err(driver_error("replaying a graph"))?;
        }
        let end = stream.record_event(timing).map_err(driver_error("recording an event"))?;
        end.synchronize().map_err(driver_error("waiting for an event"))?;
        let ms = start.elapsed_ms(&end).map_err(driver_error("reading event time"))?;
        Ok(Some(Duration::from_secs_f64(f64::from(ms) / 1e3)))
    }

    fn time_grouped(&self, launches: &[GroupedArgs], repeats: usize) -> Result<Duration> {
        let buffers = self.buffers.lock();
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.stream.record_event(timing).map_err(driver_error("recording an event"))?;
        for _ in 0..repeats {
            for args in launches {
                self.launch_grouped_locked(&buffers, args)?;
            }
        }
        let end = self.stream.record_event(timing).map_err(driver_error("recording an event"))?;
        end.synchronize().map_err(driver_error("waiting for an event"))?;
        let ms = start.elapsed_ms(&end).map_err(driver_error("reading event time"))?;
        Ok(Duration::from_secs_f64(f64::from(ms) / 1e3))
    }

    fn time_device_copy(&self, bytes: usize, repeats: usize) -> Result<Option<Duration>> {
        // Copied through buffers larger than any target's L2 (H200: 50 MB), like the rotated
        // weight copies the kernels stream: a weight-sized copy would stay in L2 and measure it.
        const COLD_COPY_BYTES: usize = 256 << 20;
        let size = bytes.max(COLD_COPY_BYTES);
        let source = self.stream.alloc_zeros::<u8>(size).map_err(driver_error("copy source"))?;
        let mut target = self.stream.alloc_zeros::<u8>(size).map_err(driver_error("copy target"))?;
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        self.stream.memcpy_dtod(&source, &mut target).map_err(driver_error("warm-up copy"))?;
        let start = self.stream.record_event(timing).map_err(driver_error("recording an event"))?;
        for _ in 0..repeats {
            self.stream.memcpy_dtod(&source, &mut target).map_err(driver_error("device copy"))?;
        }
        let end = self.stream.record_event(timing).map_err(driver_error("recording an event"))?;
        end.synchronize().map_err(driver_error("waiting for an event"))?;
        let ms = start.elapsed_ms(&end).map_err(driver_error("reading event time"))?;
        // The time `repeats` copies of `bytes` take at the rate measured.
        Ok(Some(Duration::from_secs_f64(f64::from(ms) / 1e3 * bytes as f64 / size as f64)))
    }

    /// cuBLAS's BF16 GEMM (feature `cublas-peer`; see `cublas_peer.rs`).
    fn time_peer_gemm(
        &self,
        shape: GemvShape,
        cold_bytes: usize,
        repeats: usize,
        rounds: usize,
    ) -> Result<Option<PeerTiming>> {
        #[cfg(feature = "cublas-peer")]
        return self.time_cublas(shape, cold_bytes, repeats, rounds).map(Some);
        #[cfg(not(feature = "cublas-peer"))]
        {
            let _ = (shape, cold_bytes, repeats, rounds);
            Err(Error::Unavailable {
                backend: NAME,
                reason: "the cuBLAS peer needs gemv-cuda's `cublas-peer` feature".into(),
            })
        }
    }
}
