//! ggml's routed mixture-of-experts multiply as peer arms of `gemv bench --moe`: llama.cpp's MoE
//! feed-forward operation, `ggml_mul_mat_id`, over one stacked expert tensor `[E][N][K]` in the
//! CPU_REPACK buffer type (ggml rearranges each expert's rows at load, as llama.cpp does for a
//! model's stacked experts), X `[M][1][K]` broadcast over the slots and the routing as an
//! `[M][top_k]` tensor of expert ids, one graph per routing, on ggml's own thread pool.

use super::ggml::{Runtime, Tensors, clear_repack_log, context, layout_set, quantize, sample_weights};
use super::moe::{MoePeer, MoeShape};
use llama_cpp_sys_2 as sys;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The formats timed: ggml's repacked 4-bit layouts (its fastest on x86 and Arm).
const FORMATS: [(&str, sys::ggml_type); 2] = [("q4_0", sys::GGML_TYPE_Q4_0), ("q4_K", sys::GGML_TYPE_Q4_K)];

/// The graphs of one M: one per routing, each with its ids and Y, over one X.
struct Graphs {
    _tensors: Tensors,
    graphs: Vec<*mut sys::ggml_cgraph>,
    routings: Vec<Vec<u32>>,
}

/// One format's MoE peer.
pub struct GgmlMoePeer {
    name: String,
    expert_bytes: u64,
    shape: MoeShape,
    // Dropped in this order: the graphs (which use the experts), the experts, then the runtime.
    graphs: BTreeMap<usize, Graphs>,
    experts: *mut sys::ggml_tensor,
    _weights: Tensors,
    runtime: Rc<Runtime>,
}

impl GgmlMoePeer {
    fn new(runtime: Rc<Runtime>, (format, kind): (&str, sys::ggml_type), shape: &MoeShape) -> Result<Self, String> {
        let int = |value: usize| i64::try_from(value).map_err(|e| e.to_string());
        let (rows, columns, count) = (int(shape.n)?, int(shape.k)?, int(shape.experts)?);
        // Quantized by ggml once and held by every expert, as the bench's own stack holds one
        // matrix's bytes in each.
        let one = quantize(kind, &sample_weights(shape.n, shape.k), shape.n, shape.k)?;
        let expert_bytes = one.len();
        let mut quantized = vec![0u8; expert_bytes * shape.experts];
        for expert in quantized.chunks_exact_mut(expert_bytes) {
            expert.copy_from_slice(&one);
        }
        if runtime.repack.is_null() {
            return Err("ggml has no CPU_REPACK buffer type here".into());
        }
        clear_repack_log();
        let context = context(1, 0)?;
        // SAFETY: `context` is valid; the stack's data is allocated in one buffer of the
        // repacking type and set from `quantized` (exactly the tensor's bytes), which is where
        // ggml rearranges it.
        let (weights, experts) = unsafe {
            let experts = sys::ggml_new_tensor_3d(context, kind, columns, rows, count);
            let buffer = sys::ggml_backend_alloc_ctx_tensors_from_buft(context, runtime.repack);
            let held = Tensors { context, buffer };
            if buffer.is_null() || experts.is_null() {
                return Err(format!("allocating {} {format} experts", shape.experts));
            }
            sys::ggml_backend_tensor_set(experts, quantized.as_ptr().cast(), 0, quantized.len());
            (held, experts)
        };
        Ok(Self {
            name: format!("ggml {format} ({})", layout_set(true)),
            expert_bytes: expert_bytes as u64,
            shape: shape.clone(),
            graphs: BTreeMap::new(),
            experts,
            _weights: weights,
            runtime,
        })
    }

    /// X `[m][1][k]` (f32, filled) and, for each routing, its ids `[m][top_k]` and
    /// `Y = mul_mat_id(experts, X, ids)` in a graph of its own.
    fn graphs_for(&self, m: usize, routings: &[Vec<u32>]) -> Result<Graphs, String> {
        let (k, top_k) = (self.shape.k, self.shape.top_k);
        let int = |value: usize| i64::try_from(value).map_err(|e| e.to_string());
        let context = context(1 + 3 * routings.len(), routings.len())?;
        let x_values: Vec<f32> = (0..m * k).map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 1001.0).collect();
        // SAFETY: every tensor and graph lives in `context`, which `Tensors` frees last; the data
        // is allocated in one CPU buffer before X and the ids are set with exactly their bytes.
        unsafe {
            let x = sys::ggml_new_tensor_3d(context, sys::GGML_TYPE_F32, int(k)?, 1, int(m)?);
            let mut ids = Vec::with_capacity(routings.len());
            let mut graphs = Vec::with_capacity(routings.len());
            for _ in routings {
                let id = sys::ggml_new_tensor_2d(context, sys::GGML_TYPE_I32, int(top_k)?, int(m)?);
                let y = sys::ggml_mul_mat_id(context, self.experts, x, id);
                let graph = sys::ggml_new_graph(context);
                sys::ggml_build_forward_expand(graph, y);
                ids.push(id);
                graphs.push(graph);
            }
            let buffer = sys::ggml_backend_alloc_ctx_tensors_from_buft(context, sys::ggml_backend_cpu_buffer_type());
            let tensors = Tensors { context, buffer };
            if buffer.is_null() || x.is_null() || ids.iter().any(|t| t.is_null()) || graphs.iter().any(|g| g.is_null())
            {
                return Err(format!("allocating the MoE graphs of M = {m}"));
            }
            sys::ggml_backend_tensor_set(x, x_values.as_ptr().cast(), 0, 4 * m * k);
            for (&id, routing) in ids.iter().zip(routings) {
                let values: Vec<i32> = routing.iter().map(|&e| e as i32).collect();
                sys::ggml_backend_tensor_set(id, values.as_ptr().cast(), 0, 4 * values.len());
            }
            Ok(Graphs { _tensors: tensors, graphs, routings: routings.to_vec() })
        }
    }
}

impl MoePeer for GgmlMoePeer {
    fn name(&self) -> &str {
        &self.name
    }

    fn expert_bytes(&self) -> u64 {
        self.expert_bytes
    }

    fn time(&mut self, m: usize, routings: &[Vec<u32>]) -> Result<Duration, String> {
        if self.graphs.get(&m).is_none_or(|graphs| graphs.routings != routings) {
            let graphs = self.graphs_for(m, routings)?;
            self.graphs.insert(m, graphs);
        }
        let graphs = &self.graphs[&m].graphs;
        // SAFETY: the pool belongs to the runtime this peer holds.
        unsafe { sys::ggml_threadpool_resume(self.runtime.pool) };
        let start = Instant::now();
        for &graph in graphs {
            // SAFETY: the graph and the tensors it uses live as long as `self`; the backend is the
            // runtime's.
            let status = unsafe { sys::ggml_backend_graph_compute(self.runtime.backend, graph) };
            if status != sys::GGML_STATUS_SUCCESS {
                return Err(format!("{}: ggml_backend_graph_compute returned {status}", self.name));
            }
        }
        Ok(start.elapsed())
    }

    fn rest(&mut self) {
        // SAFETY: as in `time`; a paused pool's threads sleep until `time` resumes it.
        unsafe { sys::ggml_threadpool_pause(self.runtime.pool) };
    }
}

/// The ggml MoE peers of `shape` on `threads` threads, and a note on what ran.
pub fn peers(shape: &MoeShape, threads: usize) -> Result<(Vec<Box<dyn MoePeer>>, String), String> {
    let runtime = Rc::new(Runtime::new(threads)?);
    let mut peers: Vec<Box<dyn MoePeer>> = Vec::new();
    let mut skipped = Vec::new();
    for format in FORMATS {
        // SAFETY: only reads ggml's type table.
        let block = usize::try_from(unsafe { sys::ggml_blck_size(format.1) }).unwrap_or(0);
        if block == 0 || !shape.k.is_multiple_of(block) {
            skipped.push(format!("{} needs K % {block} == 0", format.0));
            continue;
        }
        peers.push(Box::new(GgmlMoePeer::new(Rc::clone(&runtime), format, shape)?));
    }
    let mut about = format!(
        "ggml peer arms: llama.cpp's ggml_mul_mat_id over stacked experts ({}; {threads} threads, activations \
         quantized to 8 bits by ggml)",
        runtime.features()
    );
    if !skipped.is_empty() {
        about.push_str(&format!("; not timed: {}", skipped.join(", ")));
    }
    Ok((peers, about))
}
