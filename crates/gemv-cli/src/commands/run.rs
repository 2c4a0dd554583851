//! `gemv run`: Y = W X for NVFP4 checkpoint tensors, on any backend, for any M (the dispatch plan
//! splits it).

use crate::backends::{BackendChoice, open};
use crate::checkpoint::{read_activations, read_weights};
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
}

/// Runs; returns a one-line summary.
pub fn run(options: &RunOptions) -> Result<String, CliError> {
    crate::safetensors::check_output_path(&options.output)?;
    let weights_file = MappedCheckpoint::open(&options.weights)?;
    let (weights, layout) = read_weights(&weights_file, &options.name)?;
    drop(weights_file);
    let input_file = MappedCheckpoint::open(&options.input)?;
    let x = read_activations(&input_file, options.input_name.as_deref(), weights.k())?;
    let m = x.m;
    let backend = open(options.backend).map_err(CliError::Backend)?;
    let tiers = ResolvedTiers::resolve(backend.as_ref(), KillSwitches::process());
    let matrix =
        DeviceMatrix::upload(backend.as_ref(), &weights.view()).map_err(|e| CliError::Backend(e.to_string()))?;
    let y = matrix.gemv(&tiers, &x.bits, m, WIDEST_TIER).map_err(|e| CliError::Backend(e.to_string()))?;
    let mut output = SafeTensors::default();
    let mut shape = x.leading.clone();
    shape.push(weights.n());
    output.tensors.insert(
        options.output_name.clone(),
        Tensor { dtype: Ok(Dtype::Bf16), shape: shape.clone(), data: bytemuck::cast_slice(&y).to_vec() },
    );
    output.write_new(&options.output)?;
    Ok(format!(
        "wrote {:?} BF16 {shape:?} to {} (X {:?}, M = {m}; {layout:?} weights {:?}, N = {}, K = {}, backend {})",
        options.output_name,
        options.output.display(),
        x.name,
        options.name,
        weights.n(),
        weights.k(),
        backend.name()
    ))
}
