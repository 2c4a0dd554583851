//! [`WgpuBackend`]: buffers, cached per-tier pipelines, launches, timestamp timing.
//!
//! Limits: the device is created with the adapter's own limits (not WebGPU's defaults), so the
//! storage-binding limit is as large as the adapter allows. Each argument is bound as a window
//! of its buffer (start aligned down to the adapter's storage offset alignment); a window over
//! the limit is refused with [`Error::LimitExceeded`] naming the limit. wgpu validation and
//! allocation errors are captured with error scopes and returned, never left to the default
//! handler (which would panic).

use crate::adapter::{AdapterChoice, choose};
use crate::error::WgpuError;
use crate::shader::{rows_per_workgroup, shader_source};
use gemv_backend::{
    BufferRange, BufferTable, DeviceBuffer, DeviceInfo, DeviceKind, Error, GemvArgs, GpuBackend, KernelHandle, Result,
    TimerKind, resolved_spec,
};
use gemv_core::{KernelSpec, MODULE_NAME};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NAME: &str = "wgpu";
/// `Params` in the template: 12 u32 words.
const PARAMS_BYTES: u64 = 48;

/// The gemv kernels on a wgpu adapter.
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    timestamps: bool,
    layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
    pipelines: Mutex<HashMap<&'static str, wgpu::ComputePipeline>>,
    buffers: BufferTable<wgpu::Buffer>,
    /// Launch parameters travel as immediate data (no buffer per launch) where the device
    /// supports it; otherwise in a small uniform buffer per launch.
    immediates: bool,
    /// wgpu buffers this backend has created (allocations, staging, parameters).
    buffers_created: AtomicUsize,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend").field("adapter", &self.info.name).field("backend", &self.info.backend).finish()
    }
}

/// One argument bound as a window of its buffer.
pub(crate) struct Binding {
    buffer: wgpu::Buffer,
    start: u64,
    size: u64,
    /// Bytes from the window's start to the argument's first byte.
    inner: u64,
}

/// A failed wgpu operation as the public error.
fn device_error(operation: impl Into<String>, message: impl std::fmt::Display) -> Error {
    WgpuError::Operation { operation: operation.into(), message: message.to_string() }.into()
}

/// An error wgpu reported in an error scope, out of memory as its own kind.
fn scope_error(operation: impl Into<String>, error: &wgpu::Error) -> Error {
    let (operation, message) = (operation.into(), error.to_string());
    match error {
        wgpu::Error::OutOfMemory { .. } => WgpuError::OutOfMemory { operation, message }.into(),
        _ => WgpuError::Operation { operation, message }.into(),
    }
}

fn round_up4(value: u64) -> u64 {
    value.div_ceil(4) * 4
}

/// The whole 4-byte words around `len` bytes at `offset` (copies and writes need word
/// alignment): (window start, window size, the bytes' offset inside the window).
fn word_window(offset: usize, len: usize) -> (u64, u64, usize) {
    let offset = offset as u64;
    let start = offset - offset % 4;
    (start, round_up4(offset + len as u64) - start, (offset - start) as usize)
}

impl WgpuBackend {
    /// Opens the adapter chosen by `GEMV_WGPU_ADAPTER`, else the best one found.
    pub fn new() -> Result<Self> {
        Self::with_adapter(AdapterChoice::FromEnvironment)
    }

    /// Opens the adapter `choice` selects. No adapter is [`Error::Unavailable`].
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
        tracing::info!(adapter = %info.name, backend = ?info.backend, device_type = ?info.device_type, timestamps, immediates, "wgpu backend opened");
        Self {
            device,
            queue,
            info,
            limits,
            timestamps,
            layout,
            pipeline_layout,
            pipelines: Mutex::new(HashMap::new()),
            buffers: BufferTable::new(NAME),
            immediates,
            buffers_created: AtomicUsize::new(0),
        }
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

    fn pipeline(&self, spec: &'static KernelSpec) -> Result<wgpu::ComputePipeline> {
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pipeline) = pipelines.get(spec.name) {
            return Ok(pipeline.clone());
        }
        let source = shader_source(spec, self.immediates);
        let pipeline = self.scoped(wgpu::ErrorFilter::Validation, &format!("compiling {}", spec.name), || {
            let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(spec.name),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
            self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(spec.name),
                layout: Some(&self.pipeline_layout),
                module: &module,
                entry_point: Some(spec.name),
                compilation_options: Default::default(),
                cache: None,
            })
        })?;
        tracing::debug!(kernel = spec.name, "pipeline compiled");
        pipelines.insert(spec.name, pipeline.clone());
        Ok(pipeline)
    }

    /// The wgpu buffer behind `range`, after checking its id and the range's bounds.
    fn checked_range(&self, what: &'static str, range: BufferRange) -> Result<wgpu::Buffer> {
        self.buffers.lock().get(what, range).cloned()
    }

    /// The window of `range` that is bound: start aligned down to the storage offset alignment,
    /// end rounded up to 4 bytes (buffers are allocated in whole words).
    fn binding(&self, what: &'static str, range: BufferRange) -> Result<Binding> {
        let buffer = self.checked_range(what, range)?;
        self.window(what, buffer, range.offset as u64, range.len as u64)
    }

    /// The bound window of `len` bytes at `offset` of `buffer` (see [`Self::binding`]).
    pub(crate) fn window(&self, what: &str, buffer: wgpu::Buffer, offset: u64, len: u64) -> Result<Binding> {
        let align = u64::from(self.limits.min_storage_buffer_offset_alignment.max(4));
        let start = offset - offset % align;
        let end = round_up4(offset + len);
        let size = end - start;
        if size > self.limits.max_storage_buffer_binding_size {
            return Err(WgpuError::Limit {
                what: format!("binding {what} (max_storage_buffer_binding_size of {})", self.info.name),
                requested: size,
                limit: self.limits.max_storage_buffer_binding_size,
            }
            .into());
        }
        Ok(Binding { buffer, start, size, inner: offset - start })
    }

    /// A copy of `binding`'s window in a fresh buffer (for an input sharing Y's buffer, which
    /// cannot be bound read-only and read-write in one dispatch).
    fn detached(&self, binding: Binding, encoder: &mut wgpu::CommandEncoder) -> Binding {
        let copy = self.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gemv input copy"),
            size: binding.size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(&binding.buffer, binding.start, &copy, 0, binding.size);
        Binding { buffer: copy, start: 0, size: binding.size, inner: binding.inner }
    }

    /// Validates `args` and records one dispatch into `encoder`.
    fn encode(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        kernel: KernelHandle,
        args: &GemvArgs,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        let spec = resolved_spec(NAME, kernel)?;
        let shape = args.validate(spec)?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let too_big = |what: &str, v: usize| WgpuError::Limit {
            what: format!("{what} index range (shader indices are 32-bit)"),
            requested: v as u64,
            limit: u64::from(u32::MAX),
        };
        for (what, len) in [("x", args.x.len), ("packed", args.packed.len), ("y", args.y.len)] {
            if len >= u32::MAX as usize / 2 {
                return Err(too_big(what, len).into());
            }
        }
        let y = self.binding("y", args.y.buffer.range(args.y.offset, 2 * m * n))?;
        let mut inputs = [
            self.binding("x", args.x.buffer.range(args.x.offset, 2 * m * k))?,
            self.binding("packed", args.packed.buffer.range(args.packed.offset, n * k / 2))?,
            self.binding("scales", args.scales.buffer.range(args.scales.offset, n * k / 16))?,
        ];
        let sources = [args.x.buffer.id(), args.packed.buffer.id(), args.scales.buffer.id()];
        for (binding, source) in inputs.iter_mut().zip(sources) {
            if source == args.y.buffer.id() {
                let shared = Binding { buffer: binding.buffer.clone(), ..*binding };
                *binding = self.detached(shared, encoder);
            }
        }
        let [x, packed, scales] = &inputs;
        self.dispatch(encoder, spec, [x, packed, scales, &y], (m, n, k), args.global_scale, timestamp_writes)
    }

    /// Records one dispatch of `spec` over bound windows of X, the packed weights, the scales
    /// and Y (in that order): parameters as immediate data where the device has it (nothing
    /// created), else in a small uniform buffer.
    pub(crate) fn dispatch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        spec: &'static KernelSpec,
        [x, packed, scales, y]: [&Binding; 4],
        (m, n, k): (usize, usize, usize),
        global_scale: f32,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) -> Result<()> {
        let workgroups = (n as u64).div_ceil(u64::from(rows_per_workgroup(spec)));
        let max = u64::from(self.limits.max_compute_workgroups_per_dimension);
        let width = workgroups.min(max);
        let height = workgroups.div_ceil(width);
        if height > max {
            return Err(WgpuError::Limit {
                what: format!("dispatch of {workgroups} workgroups (max_compute_workgroups_per_dimension squared)"),
                requested: workgroups,
                limit: max * max,
            }
            .into());
        }
        let params: [u32; 12] = [
            m as u32,
            n as u32,
            k as u32,
            global_scale.to_bits(),
            (x.inner / 2) as u32,
            packed.inner as u32,
            scales.inner as u32,
            (y.inner / 2) as u32,
            width as u32,
            0,
            0,
            0,
        ];
        let pipeline = self.pipeline(spec)?;
        self.scoped(wgpu::ErrorFilter::Validation, &format!("launching {}", spec.name), || {
            let params_buffer = (!self.immediates).then(|| {
                let buffer = self.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gemv params"),
                    size: PARAMS_BYTES,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&params));
                buffer
            });
            fn entry(binding: u32, b: &Binding) -> wgpu::BindGroupEntry<'_> {
                wgpu::BindGroupEntry {
                    binding,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &b.buffer,
                        offset: b.start,
                        size: wgpu::BufferSize::new(b.size),
                    }),
                }
            }
            let mut entries = vec![entry(0, x), entry(1, packed), entry(2, scales), entry(3, y)];
            if let Some(buffer) = &params_buffer {
                entries.push(wgpu::BindGroupEntry { binding: 4, resource: buffer.as_entire_binding() });
            }
            let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(spec.name),
                layout: &self.layout,
                entries: &entries,
            });
            let mut pass =
                encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(spec.name), timestamp_writes });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            if params_buffer.is_none() {
                pass.set_immediates(0, bytemuck::cast_slice(&params));
            }
            pass.dispatch_workgroups(width as u32, height as u32, 1);
        })?;
        Ok(())
    }

    fn submit(&self, encoder: wgpu::CommandEncoder, what: &str) -> Result<()> {
        self.scoped(wgpu::ErrorFilter::Validation, what, || {
            self.queue.submit([encoder.finish()]);
        })
    }

    fn encoder(&self) -> wgpu::CommandEncoder {
        self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("gemv") })
    }

    /// Reads `[start, start + size)` (4-byte aligned) of a buffer through a staging copy.
    fn read_window(&self, buffer: &wgpu::Buffer, start: u64, size: u64) -> Result<Vec<u8>> {
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
        // The exact family only: WGSL has no tensor-core path.
        match gemv_core::kernel_in_module(module, name) {
            Some(_) if module == MODULE_NAME => KernelHandle::for_name(name),
            _ => KernelHandle::NONE,
        }
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

    fn synchronize(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| device_error("waiting for the device", e))
    }

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
