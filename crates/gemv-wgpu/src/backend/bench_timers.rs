//! `gemv bench`'s view of the wgpu backend (feature `bench`): a span of launches timed by the
//! device's timestamp queries where the adapter has them, else by the host clock.

use super::WgpuBackend;
use gemv_backend::{BenchTimers, GemvArgs, KernelHandle, Result};
use std::time::Duration;

impl BenchTimers for WgpuBackend {
    fn time_launches(&self, launches: &[(KernelHandle, GemvArgs)], repeats: usize) -> Result<Duration> {
        let total = launches.len() * repeats;
        if !self.timestamps || total == 0 {
            return gemv_backend::time_with_host_clock(self, launches, repeats);
        }
        let queries = self.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("gemv timing"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolve = self.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gemv timing"),
            size: 16,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let mut encoder = self.encoder();
        let mut index = 0;
        for _ in 0..repeats {
            for (kernel, args) in launches {
                let writes = wgpu::ComputePassTimestampWrites {
                    query_set: &queries,
                    beginning_of_pass_write_index: (index == 0).then_some(0),
                    end_of_pass_write_index: (index + 1 == total).then_some(1),
                };
                let timed = index == 0 || index + 1 == total;
                self.encode(&mut encoder, *kernel, args, timed.then_some(writes))?;
                index += 1;
            }
        }
        encoder.resolve_query_set(&queries, 0..2, &resolve, 0);
        self.submit(encoder, "timed launches")?;
        let ticks = self.read_window(&resolve, 0, 16)?;
        let begin = u64::from_le_bytes(ticks[0..8].try_into().unwrap_or_default());
        let end = u64::from_le_bytes(ticks[8..16].try_into().unwrap_or_default());
        let nanos = end.saturating_sub(begin) as f64 * f64::from(self.queue.get_timestamp_period());
        Ok(Duration::from_nanos(nanos as u64))
    }
}
