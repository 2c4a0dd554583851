//! `gemv run`: Y = W X for NVFP4 checkpoint tensors, on any backend, for any M (the dispatch plan
//! splits it).

use crate::activations::locate_activations;
use crate::backends::{BackendChoice, open};
use crate::checkpoint::{expert_count, locate_weights};
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::{Dtype, TensorLayout};
use gemv_backend::{DeviceKind, DeviceMatrix, GpuBackend, ResolvedTiers};
use gemv_core::{FamilyChoice, GemvCall, KillSwitches};
use std::io::Write;

/// Arguments of `gemv run`, as clap parses them.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOptions {
    /// The weights: a safetensors file, a sharded checkpoint's `*.safetensors.index.json`, or
    /// the directory holding it. Files are memory-mapped; only the named layer is read.
    #[arg(long)]
    pub weights: std::path::PathBuf,
    /// Tensor prefix: reads PREFIX.weight, PREFIX.weight_scale, PREFIX.weight_scale_2 (or
    /// PREFIX.weight_packed, PREFIX.weight_scale, PREFIX.weight_global_scale). The weight
    /// tensor's own name (PREFIX.weight) works too.
    #[arg(long)]
    pub name: String,
    /// safetensors file with X: BF16, F16 or F32, shaped `[K]`, `[M, K]` or `[..., K]` (leading
    /// dimensions are flattened into M; Y keeps them, with N in place of K). F16 and F32 are
    /// rounded to BF16 (to nearest even), the kernels' input type, and a note says so.
    #[arg(long)]
    pub input: std::path::PathBuf,
    /// Name of X in the input file (default: `x`, or the file's only tensor).
    #[arg(long)]
    pub input_name: Option<String>,
    /// Output safetensors file; must not exist.
    #[arg(long)]
    pub output: std::path::PathBuf,
    /// Name of Y in the output file.
    #[arg(long, default_value = "y")]
    pub output_name: String,
    /// Backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// For a mixture-of-experts weight stored as one 3-D tensor [E, N, K/2] (scales
    /// [E, N, K/16], global scale a scalar or `[E]`): the expert to use, or `all` (Y then gains
    /// a leading dimension E).
    #[arg(long, value_parser = parse_experts)]
    pub expert: Option<Experts>,
    /// A routed mixture-of-experts layer: safetensors file with the routing, an integer tensor
    /// [M, top_k] (or [..., top_k]) of expert ids, one row per token of X. --name is then a 3-D
    /// expert tensor [E, N, K/2] or per-expert tensors named with {i} (e.g.
    /// model.layers.3.mlp.experts.{i}.down_proj); Y is [..., top_k, N], each token through its
    /// experts in grouped launches.
    #[arg(long)]
    pub routing: Option<std::path::PathBuf>,
    /// Name of the routing in its file (default: `routing`, or the file's only tensor).
    #[arg(long, requires = "routing")]
    pub routing_name: Option<String>,
}

/// `--expert`: one expert of a 3-D `[E, N, K/2]` weight, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experts {
    /// Expert E.
    One(usize),
    /// Every expert; Y gains a leading dimension E.
    All,
}

/// Parses `--expert`: a number or `all`.
pub fn parse_experts(text: &str) -> Result<Experts, String> {
    match text.trim() {
        "all" => Ok(Experts::All),
        number => number.parse().map(Experts::One).map_err(|_| format!("{text:?}: expected an expert number or `all`")),
    }
}

/// The most bytes of X or Y one piece of the work holds: M is split into pieces of rows this
/// size at most (each row's result depends on that row alone, so the bits are the same).
pub(super) const PIECE_BYTES: usize = 64 << 20;

/// Copies of the weights that live in host memory while a backend holds them: the host copy read
/// from the checkpoint, plus the device buffers of every backend that is not a real GPU (the CPU
/// backend also keeps its own arrangement of them).
pub(super) fn host_copies(kind: DeviceKind) -> u64 {
    match kind {
        DeviceKind::Gpu => 1,
        DeviceKind::Cpu => 3,
        _ => 2,
    }
}

/// Runs; returns a one-line summary. Everything is validated and sized before any work: the
/// output's bytes against the free disk, the weights' and one piece's bytes against the
/// available memory. X is read and Y written in pieces of rows, so neither is held whole.
pub fn run(options: &RunOptions) -> Result<String, CliError> {
    if let Some(routing) = &options.routing {
        return super::routed::run_routed(options, routing);
    }
    crate::safetensors::check_tensor_name("--output-name", &options.output_name)?;
    crate::safetensors::check_output_path(&options.output)?;
    let weights_file = MappedCheckpoint::open(&options.weights)?;
    // locate_weights checks an expert number and asks for --expert on a 3-D tensor.
    let experts: Vec<Option<usize>> = match (expert_count(&weights_file, &options.name)?, options.expert) {
        (Some(count), Some(Experts::All)) => (0..count).map(Some).collect(),
        (None, Some(Experts::All)) => {
            let reason = format!("{:?} is a 2-D weight, not an expert tensor", options.name);
            return Err(CliError::BadArgument { argument: "--expert", reason });
        }
        (_, Some(Experts::One(e))) => vec![Some(e)],
        (_, None) => vec![None],
    };
    let Some(first) = experts.first() else {
        return Err(CliError::BadArgument { argument: "--expert", reason: "the tensor holds no experts".into() });
    };
    // Every expert of a tensor has the same shape and layout.
    let weights = locate_weights(&weights_file, &options.name, *first)?;
    let (n, k, layout) = (weights.n, weights.k, weights.layout);
    let input_file = MappedCheckpoint::open(&options.input)?;
    let x = locate_activations(&input_file, options.input_name.as_deref(), k)?;
    let m = x.m;
    let mut shape = x.leading.clone();
    shape.push(n);
    if options.expert == Some(Experts::All) {
        shape.insert(0, experts.len());
    }
    let y_len = output_len(options, &shape)?;

    let backend = open(options.backend).map_err(CliError::BackendUnavailable)?;
    let rows_per_piece = (PIECE_BYTES / (4 * n.max(k))).clamp(1, m);
    let piece_bytes = (rows_per_piece as u64) * (n.max(k) as u64) * 4;
    let weight_bytes = weights.bytes().and_then(|w| w.checked_mul(host_copies(backend.device_info().kind)));
    crate::resources::check_memory(
        || format!("layer {:?} (N = {n}, K = {k}) on backend {}", options.name, backend.name()),
        weight_bytes.and_then(|w| w.checked_add(2 * piece_bytes)),
    )?;
    let tiers = ResolvedTiers::resolve(backend.as_ref(), KillSwitches::process());

    write_y(options, &shape, y_len, |file| {
        for expert in &experts {
            let weights = locate_weights(&weights_file, &options.name, *expert).and_then(|w| w.read(&weights_file))?;
            let matrix = DeviceMatrix::upload(backend.as_ref() as &dyn GpuBackend, &weights.view())?;
            drop(weights);
            let mut row = 0;
            while row < m {
                let rows = rows_per_piece.min(m - row);
                let bits = x.rows(&input_file, row..row + rows)?;
                let y = matrix.call(&tiers, &bits, &GemvCall::new(rows).with_family(FamilyChoice::Exact))?;
                file.write_all(bytemuck::cast_slice(&y))
                    .map_err(|e| CliError::Io { path: options.output.clone(), error: e.to_string() })?;
                row += rows;
            }
        }
        Ok(())
    })?;
    let conversion = match x.dtype() {
        Dtype::Bf16 => String::new(),
        other => {
            format!("\nnote: X is {}; it was rounded to BF16 (to nearest even), the kernels' input type", other.name())
        }
    };
    Ok(format!(
        "wrote {:?} BF16 {shape:?} to {} (X {:?}, M = {m}; {layout:?} weights {:?}{}, N = {n}, K = {k}, \
         backend {}){conversion}",
        options.output_name,
        options.output.display(),
        x.name,
        options.name,
        match options.expert {
            Some(Experts::One(e)) => format!(", expert {e}"),
            Some(Experts::All) => format!(", {} experts", experts.len()),
            None => String::new(),
        },
        backend.name()
    ))
}

/// The bytes of a BF16 Y of `shape`, checked against the free disk at the output and this
/// machine's address space.
pub(super) fn output_len(options: &RunOptions, shape: &[usize]) -> Result<usize, CliError> {
    let y_bytes = shape.iter().try_fold(2u64, |bytes, &d| bytes.checked_mul(d as u64));
    crate::resources::check_disk(&options.output, y_bytes.and_then(|b| b.checked_add(4096)))?;
    y_bytes.and_then(|b| usize::try_from(b).ok()).ok_or_else(|| CliError::BadOutput {
        path: options.output.clone(),
        reason: "Y does not fit in this machine's address space".into(),
    })
}

/// Writes Y (`shape`, `y_len` bytes of BF16) to the output as `fill` produces it, streamed; an
/// error of `fill` (a backend's, a read's) is returned as it is, keeping its exit status.
pub(super) fn write_y(
    options: &RunOptions,
    shape: &[usize],
    y_len: usize,
    fill: impl Fn(&mut std::fs::File) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let failure = std::cell::RefCell::new(None);
    let layouts =
        [TensorLayout { name: options.output_name.clone(), dtype: "BF16".into(), shape: shape.to_vec(), len: y_len }];
    let written = crate::safetensors::write_streamed(&options.output, None, &layouts, |file| {
        fill(file).map_err(|error| {
            let message = error.to_string();
            failure.borrow_mut().get_or_insert(error);
            std::io::Error::other(message)
        })
    });
    written.map_err(|error| failure.into_inner().unwrap_or(error))
}
