//! `gemv run`: Y = W X for NVFP4 checkpoint tensors, on any backend, for any M (the dispatch plan
//! splits it).

use crate::backends::{BackendChoice, open};
use crate::checkpoint::{expert_count, read_activations, read_weights};
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::{Dtype, SafeTensors, Tensor};
use gemv_backend::{DeviceMatrix, ResolvedTiers};
use gemv_core::{KillSwitches, WIDEST_TIER};
use std::path::PathBuf;

/// Arguments of `gemv run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Weights: a safetensors file, a sharded checkpoint's index, or its directory.
    pub weights: PathBuf,
    /// Tensor prefix (e.g. `layers.0.up`) or the weight tensor's own name.
    pub name: String,
    /// Activations file.
    pub input: PathBuf,
    /// Activation tensor name (None: `x`, or the file's only tensor).
    pub input_name: Option<String>,
    /// Output file (must not exist).
    pub output: PathBuf,
    /// Output tensor name.
    pub output_name: String,
    /// Backend.
    pub backend: BackendChoice,
    /// For a 3-D expert tensor: which expert(s).
    pub expert: Option<Experts>,
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

/// Runs; returns a one-line summary.
pub fn run(options: &RunOptions) -> Result<String, CliError> {
    crate::safetensors::check_output_path(&options.output)?;
    let weights_file = MappedCheckpoint::open(&options.weights)?;
    // read_weights checks an expert number and asks for --expert on a 3-D tensor.
    let experts: Vec<Option<usize>> = match (expert_count(&weights_file, &options.name)?, options.expert) {
        (Some(count), Some(Experts::All)) => (0..count).map(Some).collect(),
        (None, Some(Experts::All)) => {
            let reason = format!("{:?} is a 2-D weight, not an expert tensor", options.name);
            return Err(CliError::BadArgument { argument: "--expert", reason });
        }
        (_, Some(Experts::One(e))) => vec![Some(e)],
        (_, None) => vec![None],
    };
    let input_file = MappedCheckpoint::open(&options.input)?;
    let backend = open(options.backend).map_err(CliError::Backend)?;
    let tiers = ResolvedTiers::resolve(backend.as_ref(), KillSwitches::process());
    let mut y = Vec::new();
    let (mut summary, mut m, mut shape) = (None, 0, Vec::new());
    // X is read once, with the first expert's K (every expert of a tensor has the same shape).
    let mut x = None;
    for expert in &experts {
        let (weights, layout) = read_weights(&weights_file, &options.name, *expert)?;
        let x = match &x {
            Some(x) => x,
            None => x.insert(read_activations(&input_file, options.input_name.as_deref(), weights.k())?),
        };
        let matrix =
            DeviceMatrix::upload(backend.as_ref(), &weights.view()).map_err(|e| CliError::Backend(e.to_string()))?;
        y.extend(matrix.gemv(&tiers, &x.bits, x.m, WIDEST_TIER).map_err(|e| CliError::Backend(e.to_string()))?);
        m = x.m;
        shape = x.leading.clone();
        shape.push(weights.n());
        summary = Some((layout, x.name.clone(), weights.n(), weights.k()));
    }
    if options.expert == Some(Experts::All) {
        shape.insert(0, experts.len());
    }
    let Some((layout, x_name, n, k)) = summary else {
        return Err(CliError::BadArgument { argument: "--expert", reason: "the tensor holds no experts".into() });
    };
    let mut output = SafeTensors::default();
    output.tensors.insert(
        options.output_name.clone(),
        Tensor { dtype: Ok(Dtype::Bf16), shape: shape.clone(), data: bytemuck::cast_slice(&y).to_vec() },
    );
    output.write_new(&options.output)?;
    Ok(format!(
        "wrote {:?} BF16 {shape:?} to {} (X {x_name:?}, M = {m}; {layout:?} weights {:?}{}, N = {n}, K = {k}, \
         backend {})",
        options.output_name,
        options.output.display(),
        options.name,
        match options.expert {
            Some(Experts::One(e)) => format!(", expert {e}"),
            Some(Experts::All) => format!(", {} experts", experts.len()),
            None => String::new(),
        },
        backend.name()
    ))
}
