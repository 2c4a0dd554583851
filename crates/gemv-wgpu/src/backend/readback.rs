//! Reading a buffer back to the host through a mapped staging copy.

use super::WgpuBackend;
use crate::error::device_error;
use gemv_backend::{GpuBackend, Result};
use std::time::Duration;

impl WgpuBackend {
    /// Reads `[start, start + size)` (4-byte aligned) of a buffer through a staging copy.
    pub(super) fn read_window(&self, buffer: &wgpu::Buffer, start: u64, size: u64) -> Result<Vec<u8>> {
        let staging = self.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gemv readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.encoder();
        encoder.copy_buffer_to_buffer(buffer, start, &staging, 0, size);
        self.submit(encoder, "download")?;
        // The callback may run on whichever thread polls the device: wait for it on a channel,
        // polling again until it arrives (another thread may be in the middle of running it).
        let (sender, receiver) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |result| {
            let _ = sender.send(result);
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mapped = loop {
            self.synchronize()?;
            match receiver.recv_timeout(Duration::from_millis(5)) {
                Ok(result) => break result,
                Err(_) if std::time::Instant::now() < deadline => continue,
                Err(_) => return Err(device_error("reading back", "the buffer was not mapped within 120 s")),
            }
        };
        mapped.map_err(|error| device_error("mapping a readback buffer", error))?;
        let bytes = staging.get_mapped_range(..).map_err(|e| device_error("reading a mapped buffer", e))?.to_vec();
        staging.unmap();
        Ok(bytes)
    }
}
