//! `gemv bench`'s view of the CPU backend (feature `bench`): the host copy its `% copy` is read
//! against, and which SIMD path ran each M.

use super::CpuBackend;
use crate::calibration::{Calibration, PathSelection, calibrations};
use gemv_backend::{AlignedBytes, BenchTimers, Result};
use std::time::{Duration, Instant};

impl BenchTimers for CpuBackend {
    fn timing_notes(&self) -> Vec<String> {
        match self.selection {
            PathSelection::Forced { .. } => vec![format!("cpu path: {} for every M", self.selection)],
            PathSelection::Calibrated => {
                let calibrations = calibrations();
                if calibrations.is_empty() {
                    return vec!["cpu path: calibrated at each M's first launch (none launched yet)".to_string()];
                }
                let choices: Vec<String> = calibrations.iter().map(Calibration::summary).collect();
                vec![format!(
                    "cpu path per M, calibrated at its first launch (each path timed on a slice of the weights, \
                     one thread; the others' time over the chosen one's): {}",
                    choices.join("; ")
                )]
            }
        }
    }

    /// A host memory copy on the backend's threads, through buffers of at least 128 MB so the
    /// copy streams memory rather than cache (the reference `gemv bench`'s "% copy" is read
    /// against); the median of at least five timed passes, scaled to `bytes * repeats`.
    fn time_device_copy(&self, bytes: usize, repeats: usize) -> Result<Option<Duration>> {
        const COLD_BYTES: usize = 256 << 20;
        const PASSES_MIN: usize = 5;
        let size = bytes.max(COLD_BYTES / 2);
        // Allocated like the weights (huge pages where the system offers them), so the two
        // streams meet the same page-table costs.
        let mut source = AlignedBytes::zeroed(size);
        source.fill(1);
        let mut target = AlignedBytes::zeroed(size);
        let chunk = size.div_ceil(self.threads);
        let copy = |target: &mut [u8]| {
            std::thread::scope(|scope| {
                for (from, to) in source.chunks(chunk).zip(target.chunks_mut(chunk)) {
                    scope.spawn(move || to.copy_from_slice(from));
                }
            })
        };
        copy(&mut target);
        let passes = (bytes * repeats.max(1)).div_ceil(size).max(PASSES_MIN);
        let mut times: Vec<f64> = (0..passes)
            .map(|_| {
                let start = Instant::now();
                copy(&mut target);
                start.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let per_byte = times[passes / 2] / size as f64;
        std::hint::black_box(&target);
        Ok(Some(Duration::from_secs_f64(per_byte * (bytes * repeats) as f64)))
    }
}
