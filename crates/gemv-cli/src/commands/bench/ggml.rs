//! ggml's matrix multiply (llama.cpp's CPU backend, from the sources the `llama-cpp-sys-2` crate
//! ships) as the CPU bench's peer: `Y = W X` for M tokens with W in ggml's 4-bit formats, run the
//! way llama.cpp runs a layer: one `mul_mat` graph on the CPU backend with its own thread pool,
//! weights in the CPU_REPACK buffer type (ggml rearranges q4_0 and q4_K at load, eight rows
//! interleaved), activations quantized to 8 bits by ggml inside the operation.

use super::memory::cold_copies;
use super::rotation_peer::RotationPeer;
use llama_cpp_sys_2 as sys;
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_void};
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where ggml keeps a peer's weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Plain rows in the CPU buffer type.
    Plain,
    /// The CPU_REPACK buffer type: rearranged at load (rows interleaved), llama.cpp's default.
    Repacked,
    /// The AMX buffer type, on CPUs with AMX and builds for them: timed at M = 1 only (llama.cpp's
    /// AMX path has ended in SIGILL from M = 2 on a Xeon guest).
    Amx,
}

/// The formats timed: ggml's fastest 4-bit layouts on x86 and Arm (repacked q4_0 and q4_K), q4_0
/// in the AMX buffer type where ggml offers it, and its NVFP4 (same bytes per weight as ours; no
/// repacked layout).
const FORMATS: [(&str, sys::ggml_type, Layout); 4] = [
    ("q4_0", sys::GGML_TYPE_Q4_0, Layout::Repacked),
    ("q4_K", sys::GGML_TYPE_Q4_K, Layout::Repacked),
    ("q4_0", sys::GGML_TYPE_Q4_0, Layout::Amx),
    ("nvfp4", sys::GGML_TYPE_NVFP4, Layout::Plain),
];

/// What ggml logged about repacking the last tensor set (it names the layout it chose).
static REPACK_LOG: Mutex<String> = Mutex::new(String::new());

/// Forgets what ggml logged about repacking, before a tensor is set.
pub(super) fn clear_repack_log() {
    REPACK_LOG.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
}

/// ggml's log, to `tracing` (debug), keeping what it says about repacking.
unsafe extern "C" fn log(_level: sys::ggml_log_level, text: *const c_char, _user: *mut c_void) {
    if text.is_null() {
        return;
    }
    // SAFETY: ggml passes a NUL-terminated string that lives for the call.
    let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    tracing::debug!(target: "ggml", "{}", text.trim_end());
    if text.contains("repack") {
        let mut log = REPACK_LOG.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        log.clone_from(&text.trim().to_string());
    }
}

/// The layout of the tensors set since [`REPACK_LOG`] was last cleared, from what ggml logged:
/// `repacked q4_0_8x8` where it repacked them (`repacked` asks whether they were put in the
/// repacking buffer type), `plain rows` otherwise.
pub(super) fn layout_set(repacked: bool) -> String {
    let repack_log = REPACK_LOG.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    match repack_log.rsplit_once("with ") {
        Some((_, layout)) if repacked => format!("repacked {}", layout.trim()),
        _ if repacked => "plain rows: ggml has no repacked layout for this shape or CPU".into(),
        _ => "plain rows".into(),
    }
}

/// The CPU backend and its thread pool, shared by the peers.
pub(super) struct Runtime {
    pub(super) backend: sys::ggml_backend_t,
    pub(super) pool: *mut sys::ggml_threadpool,
    pub(super) repack: sys::ggml_backend_buffer_type_t,
    amx: sys::ggml_backend_buffer_type_t,
}

impl Runtime {
    /// ggml's CPU backend with a pool of `threads` threads, its log sent to `tracing`.
    pub(super) fn new(threads: usize) -> Result<Self, String> {
        let threads = i32::try_from(threads).map_err(|_| format!("{threads} threads"))?;
        // SAFETY: plain constructors of ggml's C API; each result is checked before use, and the
        // parameters struct is ggml's own default, passed by pointer for the call only.
        unsafe {
            sys::ggml_log_set(Some(log), std::ptr::null_mut());
            sys::ggml_cpu_init();
            let backend = sys::ggml_backend_cpu_init();
            if backend.is_null() {
                return Err("ggml_backend_cpu_init failed".into());
            }
            let mut params = sys::ggml_threadpool_params_default(threads);
            let pool = sys::ggml_threadpool_new(&mut params);
            if pool.is_null() {
                sys::ggml_backend_free(backend);
                return Err("ggml_threadpool_new failed".into());
            }
            sys::ggml_backend_cpu_set_threadpool(backend, pool);
            sys::ggml_backend_cpu_set_n_threads(backend, threads);
            let runtime =
                Self { backend, pool, repack: extra_buffer_type(b"CPU_REPACK"), amx: extra_buffer_type(b"AMX") };
            Ok(runtime)
        }
    }

    /// What this ggml build runs on, as ggml reports it.
    pub(super) fn features(&self) -> String {
        // SAFETY: ggml's feature queries take no arguments and only read what it detected.
        let flags = unsafe {
            [
                ("AVX2", sys::ggml_cpu_has_avx2()),
                ("AVX-512", sys::ggml_cpu_has_avx512()),
                ("AVX-512 VNNI", sys::ggml_cpu_has_avx512_vnni()),
                ("AVX-VNNI", sys::ggml_cpu_has_avx_vnni()),
                ("NEON", sys::ggml_cpu_has_neon()),
                ("dot product", sys::ggml_cpu_has_dotprod()),
                ("int8 matmul", sys::ggml_cpu_has_matmul_int8()),
            ]
        };
        let present: Vec<&str> = flags.iter().filter(|(_, has)| *has != 0).map(|(name, _)| *name).collect();
        if present.is_empty() { "no SIMD extension".into() } else { present.join(", ") }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: both were made by `new` and are freed once, the backend (which uses the pool)
        // first; no graph runs any more (the peers holding the runtime are gone).
        unsafe {
            sys::ggml_backend_free(self.backend);
            sys::ggml_threadpool_free(self.pool);
        }
    }
}

/// The CPU backend's extra buffer type of that name (`CPU_REPACK`, `AMX`; null where ggml has
/// none).
fn extra_buffer_type(name: &[u8]) -> sys::ggml_backend_buffer_type_t {
    // SAFETY: the CPU backend's registry is static; the function ggml returns for
    // "ggml_backend_dev_get_extra_bufts" has the signature `ggml_backend_dev_get_extra_bufts_t`
    // names, and returns a null-terminated array of static buffer types.
    unsafe {
        let registry = sys::ggml_backend_cpu_reg();
        let device = sys::ggml_backend_reg_dev_get(registry, 0);
        let address = sys::ggml_backend_reg_get_proc_address(registry, c"ggml_backend_dev_get_extra_bufts".as_ptr());
        if address.is_null() || device.is_null() {
            return std::ptr::null_mut();
        }
        let extra: sys::ggml_backend_dev_get_extra_bufts_t = std::mem::transmute(address);
        let Some(extra) = extra else { return std::ptr::null_mut() };
        let mut types = extra(device);
        while !types.is_null() && !(*types).is_null() {
            if CStr::from_ptr(sys::ggml_backend_buft_name(*types)).to_bytes() == name {
                return *types;
            }
            types = types.add(1);
        }
        std::ptr::null_mut()
    }
}

/// A ggml context and the backend buffer holding its tensors.
pub(super) struct Tensors {
    pub(super) context: *mut sys::ggml_context,
    pub(super) buffer: sys::ggml_backend_buffer_t,
}

impl Drop for Tensors {
    fn drop(&mut self) {
        // SAFETY: made together by `allocate`; the buffer (which holds the tensors' data) first.
        unsafe {
            if !self.buffer.is_null() {
                sys::ggml_backend_buffer_free(self.buffer);
            }
            sys::ggml_free(self.context);
        }
    }
}

/// A context for `tensors` tensor headers and `graphs` graphs (no data: allocated later).
pub(super) fn context(tensors: usize, graphs: usize) -> Result<*mut sys::ggml_context, String> {
    // SAFETY: the sizes are ggml's own overheads; `no_alloc` leaves tensor data to a buffer.
    let context = unsafe {
        let size = sys::ggml_tensor_overhead() * tensors + sys::ggml_graph_overhead() * graphs + 1024;
        sys::ggml_init(sys::ggml_init_params { mem_size: size, mem_buffer: std::ptr::null_mut(), no_alloc: true })
    };
    if context.is_null() { Err("ggml_init failed".into()) } else { Ok(context) }
}

/// The graphs of one M: X `[m][k]` f32 and, per weight copy, `Y = W X` in one graph.
struct Graphs {
    _tensors: Tensors,
    graphs: Vec<*mut sys::ggml_cgraph>,
}

/// One format's peer.
pub struct GgmlPeer {
    name: String,
    weight_bytes: u64,
    k: usize,
    n: usize,
    next: usize,
    // Dropped in this order: the graphs (which use the weights), the weights, then the runtime.
    graphs: BTreeMap<usize, Graphs>,
    _weights: Tensors,
    runtime: Rc<Runtime>,
}

impl GgmlPeer {
    fn new(
        runtime: Rc<Runtime>,
        (format, kind, layout): (&str, sys::ggml_type, Layout),
        weights: &[f32],
        (n, k): (usize, usize),
        ms: &[usize],
        cold_bytes: usize,
    ) -> Result<Self, String> {
        let (rows, columns) =
            (i64::try_from(n).map_err(|e| e.to_string())?, i64::try_from(k).map_err(|e| e.to_string())?);
        let quantized = quantize(kind, weights, n, k)?;
        let weight_bytes = quantized.len();
        let copies = cold_copies(weight_bytes as u64, cold_bytes as u64) as usize;
        let buffer_type = match layout {
            Layout::Repacked if !runtime.repack.is_null() => runtime.repack,
            Layout::Amx if !runtime.amx.is_null() => runtime.amx,
            Layout::Amx => return Err(format!("{format}: ggml has no AMX buffer type here")),
            // SAFETY: a static buffer type.
            _ => unsafe { sys::ggml_backend_cpu_buffer_type() },
        };
        let repacked = layout == Layout::Repacked;
        clear_repack_log();
        let weights = {
            let context = context(copies, 0)?;
            // SAFETY: `context` is valid; the tensors' data is allocated in one buffer of the
            // chosen type, then set from `quantized` (exactly one tensor's bytes each), which is
            // where the repacking buffer type rearranges them.
            unsafe {
                let tensors: Vec<*mut sys::ggml_tensor> =
                    (0..copies).map(|_| sys::ggml_new_tensor_2d(context, kind, columns, rows)).collect();
                let buffer = sys::ggml_backend_alloc_ctx_tensors_from_buft(context, buffer_type);
                let held = Tensors { context, buffer };
                if buffer.is_null() || tensors.iter().any(|t| t.is_null()) {
                    return Err(format!("allocating {copies} {format} weight copies"));
                }
                for &tensor in &tensors {
                    sys::ggml_backend_tensor_set(tensor, quantized.as_ptr().cast(), 0, weight_bytes);
                }
                (held, tensors)
            }
        };
        let layout = if layout == Layout::Amx { "AMX buffer type".into() } else { layout_set(repacked) };
        let (held, tensors) = weights;
        let mut graphs = BTreeMap::new();
        for &m in ms {
            graphs.insert(m, graphs_for(&tensors, k, m)?);
        }
        Ok(Self {
            name: format!("ggml {format} ({layout})"),
            weight_bytes: weight_bytes as u64,
            k,
            n,
            next: 0,
            graphs,
            _weights: held,
            runtime,
        })
    }
}

/// Weights like the kernels' (values in [-1, 1)) for an `n x k` matrix, to be quantized by ggml.
pub(super) fn sample_weights(n: usize, k: usize) -> Vec<f32> {
    (0..n * k).map(|i| (((i * 2_654_435_761) >> 7) % 2001) as f32 / 1000.0 - 1.0).collect()
}

/// `weights` (`n` rows of `k`) in ggml's format `kind`, quantized by ggml (`n` rows of
/// `ggml_row_size(kind, k)` bytes).
pub(super) fn quantize(kind: sys::ggml_type, weights: &[f32], n: usize, k: usize) -> Result<Vec<u8>, String> {
    let (rows, columns) = (i64::try_from(n).map_err(|e| e.to_string())?, i64::try_from(k).map_err(|e| e.to_string())?);
    assert!(weights.len() >= n * k, "{n} x {k} weights");
    // SAFETY: `kind` is one of ggml's types; the call only computes a size.
    let row_bytes = unsafe { sys::ggml_row_size(kind, columns) };
    let mut quantized = vec![0u8; row_bytes * n];
    // SAFETY: `weights` holds n rows of k f32 (asserted) and `quantized` n rows of `row_bytes`;
    // no importance matrix (null) is needed for the types the peers use (q4_0, q4_K, nvfp4).
    unsafe {
        sys::ggml_quantize_chunk(
            kind,
            weights.as_ptr(),
            quantized.as_mut_ptr().cast(),
            0,
            rows,
            columns,
            std::ptr::null(),
        );
    }
    Ok(quantized)
}

/// X `[m][k]` (f32, filled) and `Y = W X` for each weight tensor, one graph each.
fn graphs_for(weights: &[*mut sys::ggml_tensor], k: usize, m: usize) -> Result<Graphs, String> {
    let context = context(2 * weights.len() + 1, weights.len())?;
    let columns = i64::try_from(k).map_err(|e| e.to_string())?;
    let tokens = i64::try_from(m).map_err(|e| e.to_string())?;
    let x_values: Vec<f32> = (0..m * k).map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 1001.0).collect();
    // SAFETY: every tensor and graph lives in `context`, which `Tensors` frees last; the data is
    // allocated in one CPU buffer before X is set with exactly its bytes.
    unsafe {
        let x = sys::ggml_new_tensor_2d(context, sys::GGML_TYPE_F32, columns, tokens);
        let graphs: Vec<*mut sys::ggml_cgraph> = weights
            .iter()
            .map(|&w| {
                let y = sys::ggml_mul_mat(context, w, x);
                let graph = sys::ggml_new_graph(context);
                sys::ggml_build_forward_expand(graph, y);
                graph
            })
            .collect();
        let buffer = sys::ggml_backend_alloc_ctx_tensors_from_buft(context, sys::ggml_backend_cpu_buffer_type());
        let tensors = Tensors { context, buffer };
        if buffer.is_null() || x.is_null() || graphs.iter().any(|g| g.is_null()) {
            return Err(format!("allocating the graphs of M = {m}"));
        }
        sys::ggml_backend_tensor_set(x, x_values.as_ptr().cast(), 0, 4 * m * k);
        Ok(Graphs { _tensors: tensors, graphs })
    }
}

impl RotationPeer for GgmlPeer {
    fn name(&self) -> &str {
        &self.name
    }

    fn bytes_moved(&self, m: usize) -> u64 {
        // Weights, X and Y as f32 (what ggml's CPU operation reads and writes).
        self.weight_bytes + 4 * (m * self.k + m * self.n) as u64
    }

    fn time(&mut self, m: usize, launches: usize) -> Result<Duration, String> {
        let graphs = &self.graphs.get(&m).ok_or(format!("{}: no graphs for M = {m}", self.name))?.graphs;
        // SAFETY: the pool belongs to the runtime this peer holds.
        unsafe { sys::ggml_threadpool_resume(self.runtime.pool) };
        let start = Instant::now();
        for _ in 0..launches {
            let graph = graphs[self.next % graphs.len()];
            self.next += 1;
            // SAFETY: the graph and the tensors it uses live as long as `self`; the backend is the
            // runtime's.
            let status = unsafe { sys::ggml_backend_graph_compute(self.runtime.backend, graph) };
            if status != sys::GGML_STATUS_SUCCESS {
                return Err(format!("{}: ggml_backend_graph_compute returned {status}", self.name));
            }
        }
        Ok(start.elapsed())
    }

    fn covers(&self, m: usize) -> bool {
        self.graphs.contains_key(&m)
    }

    fn rest(&mut self) {
        // SAFETY: as in `time`; a paused pool's threads sleep until `time` resumes it.
        unsafe { sys::ggml_threadpool_pause(self.runtime.pool) };
    }
}

/// The ggml peers for `n x k` at every M of `ms`, on `threads` threads, and a note on what ran.
pub fn peers(
    n: usize,
    k: usize,
    ms: &[usize],
    cold_bytes: usize,
    threads: usize,
) -> Result<(Vec<Box<dyn RotationPeer>>, String), String> {
    let runtime = Rc::new(Runtime::new(threads)?);
    let weights = sample_weights(n, k);
    let mut peers: Vec<Box<dyn RotationPeer>> = Vec::new();
    let mut skipped = Vec::new();
    for format in FORMATS {
        // SAFETY: only reads ggml's type table.
        let block = usize::try_from(unsafe { sys::ggml_blck_size(format.1) }).unwrap_or(0);
        if block == 0 || !k.is_multiple_of(block) {
            skipped.push(format!("{} needs K % {block} == 0", format.0));
            continue;
        }
        let ms = match format.2 {
            Layout::Amx if runtime.amx.is_null() => {
                skipped.push(format!("{} in the AMX buffer type (this CPU or ggml build has no AMX)", format.0));
                continue;
            }
            Layout::Amx if !ms.contains(&1) => {
                skipped.push(format!("{} in the AMX buffer type (timed at M = 1 only)", format.0));
                continue;
            }
            Layout::Amx => &[1][..],
            _ => ms,
        };
        peers.push(Box::new(GgmlPeer::new(Rc::clone(&runtime), format, &weights, (n, k), ms, cold_bytes)?));
    }
    let mut about = format!(
        "ggml peer rows: llama.cpp's CPU matrix multiply ({}; {threads} threads, activations quantized to 8 bits by \
         ggml)",
        runtime.features()
    );
    if !skipped.is_empty() {
        about.push_str(&format!("; not timed: {}", skipped.join(", ")));
    }
    Ok((peers, about))
}
