//! [`WgpuBackend`]: the device, its buffers, and the `GpuBackend` implementation. Launches are
//! recorded by `dispatch` (pipelines, parameters, bind groups), arguments bound as windows of
//! their buffers by `binding`, and buffers read back by `readback`.
//!
//! Limits: the device is created with the adapter's own limits (not WebGPU's defaults), so the
//! storage-binding limit is as large as the adapter allows. Each argument is bound as a window
//! of its buffer (start aligned down to the adapter's storage offset alignment); a window over
//! the limit is refused with [`gemv_backend::Error::LimitExceeded`] naming the limit. wgpu validation and
//! allocation errors are captured with error scopes and returned, never left to the default
//! handler (which would panic).

use crate::adapter::{AdapterChoice, choose};
use crate::error::{WgpuError, device_error, scope_error};
use binding::{round_up4, word_window};
use dispatch::PARAMS_BYTES;
use gemv_backend::{
    BufferRange, BufferTable, DeviceBuffer, DeviceInfo, DeviceKind, GemvArgs, GpuBackend, GroupedArgs, KernelHandle,
    ResolvedTiers, Result, TimerKind,
};
use gemv_core::{KillSwitches, MODULE_NAME};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[cfg(feature = "bench")]
mod bench_timers;
mod binding;
mod dispatch;
mod grouped;
mod readback;

pub(crate) use binding::Binding;
pub(crate) use grouped::GroupedDims;

const NAME: &str = "wgpu";

/// The gemv kernels on a wgpu adapter.
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    timestamps: bool,
    layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
    /// A grouped launch's bindings (two more: the global scales and the routing).
    grouped_layout: wgpu::BindGroupLayout,
    grouped_pipeline_layout: wgpu::PipelineLayout,
    pipelines: Mutex<HashMap<&'static str, wgpu::ComputePipeline>>,
    buffers: BufferTable<wgpu::Buffer>,
    /// Launch parameters travel as immediate data (no buffer per launch) where the device
    /// supports it; otherwise in a small uniform buffer per launch.
    immediates: bool,
    /// wgpu buffers this backend has created (allocations, staging, parameters).
    buffers_created: AtomicUsize,
    /// The tier table over the WGSL kernels, resolved once under the process's kill switches.
    tiers: ResolvedTiers,
}

/// The exact family only: WGSL has no tensor-core path.
fn lookup(module: &str, name: &str) -> KernelHandle {
    match gemv_core::kernel_in_module(module, name) {
        Some(_) if module == MODULE_NAME => KernelHandle::for_name(name),
        _ => KernelHandle::NONE,
    }
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend").field("adapter", &self.info.name).field("backend", &self.info.backend).finish()
    }
}

impl WgpuBackend {
    /// Opens the adapter chosen by `GEMV_WGPU_ADAPTER`, else the best one found.
    pub fn new() -> Result<Self> {
        Self::with_adapter(AdapterChoice::FromEnvironment)
    }

    /// Opens the adapter `choice` selects. No adapter is [`gemv_backend::Error::Unavailable`].
    pub fn with_adapter(choice: AdapterChoice) -> Result<Self> {
        let descriptor = wgpu::InstanceDescriptor {
            backends: wgpu::Backends::PRIMARY,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        };
        let instance = wgpu::Instance::new(descriptor);
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY));
        let adapter = choose(adapters, &choice).map_err(WgpuError::NoAdapter)?;
        let info = adapter.get_info();
        let required_features = adapter.features() & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::IMMEDIATES);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("gemv"),
            required_features,
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|source| WgpuError::DeviceRequest { adapter: info.name.clone(), source })?;
        device.on_uncaptured_error(Arc::new(|error| tracing::error!(%error, "uncaptured wgpu error")));
        Ok(Self::from_parts(device, queue, info))
    }

    /// A backend on an existing device (this crate's or an engine's): layouts for the features
    /// and limits the device was created with.
    pub(crate) fn from_parts(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> Self {
        let limits = device.limits();
        let timestamps = device.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let immediates = device.features().contains(wgpu::Features::IMMEDIATES)
            && u64::from(limits.max_immediate_size) >= PARAMS_BYTES;
        let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let mut entries = vec![storage(0, true), storage(1, true), storage(2, true), storage(3, false)];
        if !immediates {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: 4,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        let layout = device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some("gemv"), entries: &entries });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("gemv"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: if immediates { PARAMS_BYTES as u32 } else { 0 },
        });
        let grouped_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("gemv grouped"),
            entries: &grouped::grouped_layout_entries(immediates),
        });
        let grouped_pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("gemv grouped"),
            bind_group_layouts: &[Some(&grouped_layout)],
            immediate_size: if immediates { PARAMS_BYTES as u32 } else { 0 },
        });
        tracing::info!(adapter = %info.name, backend = ?info.backend, device_type = ?info.device_type, timestamps, immediates, "wgpu backend opened");
        Self {
            device,
            queue,
            info,
            limits,
            timestamps,
            layout,
            pipeline_layout,
            grouped_layout,
            grouped_pipeline_layout,
            pipelines: Mutex::new(HashMap::new()),
            buffers: BufferTable::new(NAME),
            immediates,
            buffers_created: AtomicUsize::new(0),
            tiers: ResolvedTiers::resolve_with(NAME, lookup, KillSwitches::process(), None),
        }
    }

    /// The tier table the engine path plans with (resolved once, under the kill switches of the
    /// environment when the backend was made).
    pub fn tiers(&self) -> &ResolvedTiers {
        &self.tiers
    }

    /// How many wgpu buffers this backend has created so far (allocations, staging copies, and
    /// parameter buffers where the device lacks immediate data). A launch on a device with
    /// immediate data creates none; tests count it.
    pub fn buffers_created(&self) -> usize {
        self.buffers_created.load(Ordering::Relaxed)
    }

    /// Whether launch parameters travel as immediate data (no buffer per launch).
    pub fn uses_immediates(&self) -> bool {
        self.immediates
    }

    /// Creates a buffer, counted.
    fn create_buffer(&self, descriptor: &wgpu::BufferDescriptor<'_>) -> wgpu::Buffer {
        self.buffers_created.fetch_add(1, Ordering::Relaxed);
        self.device.create_buffer(descriptor)
    }

    /// The adapter's description.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// Lowers the storage-binding limit this backend allows (never raises it above the
    /// device's): to bound memory per dispatch, or to exercise the refusal path in tests.
    pub fn with_max_binding_size(mut self, bytes: u64) -> Self {
        self.limits.max_storage_buffer_binding_size = self.limits.max_storage_buffer_binding_size.min(bytes);
        self
    }

    /// The largest storage binding a launch may use, in bytes.
    pub fn max_binding_size(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size
    }

    /// The largest buffer this device allocates, in bytes.
    pub fn max_buffer_size(&self) -> u64 {
        self.limits.max_buffer_size
    }

    fn scoped<T>(&self, filter: wgpu::ErrorFilter, what: &str, f: impl FnOnce() -> T) -> Result<T> {
        let scope = self.device.push_error_scope(filter);
        let value = f();
        match pollster::block_on(scope.pop()) {
            None => Ok(value),
            Some(error) => Err(scope_error(what, &error)),
        }
    }

    fn submit(&self, encoder: wgpu::CommandEncoder, what: &str) -> Result<()> {
        self.scoped(wgpu::ErrorFilter::Validation, what, || {
            self.queue.submit([encoder.finish()]);
        })
    }

    fn encoder(&self) -> wgpu::CommandEncoder {
        self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("gemv") })
    }
}

impl GpuBackend for WgpuBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: NAME,
            name: self.info.name.clone(),
            architecture: format!("{:?} {}", self.info.backend, self.info.driver).trim().to_string(),
            kind: if self.info.device_type == wgpu::DeviceType::Cpu {
                DeviceKind::SoftwareGpu
            } else {
                DeviceKind::Gpu
            },
            peak_bandwidth_gbps: None,
            timer: if self.timestamps { TimerKind::DeviceEvents } else { TimerKind::HostClock },
            multiply_add: gemv_backend::MultiplyAdd::DriverChoice,
        }
    }

    fn lookup_kernel(&self, module: &str, name: &str) -> KernelHandle {
        lookup(module, name)
    }

    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        let size = round_up4(bytes.max(1) as u64);
        if size > self.limits.max_buffer_size {
            return Err(WgpuError::Limit {
                what: format!("a buffer (max_buffer_size of {})", self.info.name),
                requested: size,
                limit: self.limits.max_buffer_size,
            }
            .into());
        }
        let buffer = self.scoped(wgpu::ErrorFilter::OutOfMemory, &format!("allocating {size} bytes"), || {
            self.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gemv"),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        Ok(self.buffers.insert(bytes, buffer))
    }

    fn free(&self, buffer: DeviceBuffer) -> Result<()> {
        self.buffers.remove(buffer).map(|wgpu_buffer| wgpu_buffer.destroy())
    }

    fn upload(&self, dst: BufferRange, data: &[u8]) -> Result<()> {
        dst.check_host_len("upload", data.len())?;
        let buffer = self.checked_range("upload", dst)?;
        if data.is_empty() {
            return Ok(());
        }
        let offset = dst.offset as u64;
        if offset.is_multiple_of(4) && data.len().is_multiple_of(4) {
            return self
                .scoped(wgpu::ErrorFilter::Validation, "upload", || self.queue.write_buffer(&buffer, offset, data));
        }
        // Unaligned: read the enclosing words, patch them, write them back.
        let (start, size, inner) = word_window(dst.offset, data.len());
        let mut window = self.read_window(&buffer, start, size)?;
        window[inner..inner + data.len()].copy_from_slice(data);
        self.scoped(wgpu::ErrorFilter::Validation, "upload", || self.queue.write_buffer(&buffer, start, &window))
    }

    fn download(&self, src: BufferRange, out: &mut [u8]) -> Result<()> {
        src.check_host_len("download", out.len())?;
        let buffer = self.checked_range("download", src)?;
        if out.is_empty() {
            return Ok(());
        }
        let (start, size, inner) = word_window(src.offset, out.len());
        let window = self.read_window(&buffer, start, size)?;
        out.copy_from_slice(&window[inner..inner + out.len()]);
        Ok(())
    }

    fn launch_gemv(&self, kernel: KernelHandle, args: &GemvArgs) -> Result<()> {
        let mut encoder = self.encoder();
        self.encode(&mut encoder, kernel, args, None)?;
        self.submit(encoder, "launch")
    }

    fn launch_grouped(&self, args: &GroupedArgs) -> Result<()> {
        let mut encoder = self.encoder();
        self.encode_grouped(&mut encoder, args)?;
        self.submit(encoder, "grouped launch")
    }

    fn synchronize(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| device_error("waiting for the device", e))
    }
}
