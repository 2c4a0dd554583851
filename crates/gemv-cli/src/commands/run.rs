//! `gemv run`: Y = W X for NVFP4 checkpoint tensors, on any backend, for any M (the dispatch plan
//! splits it).

use crate::backends::{BackendChoice, open};
use crate::checkpoint::{read_activations, read_weights};
use crate::error::CliError;
use crate::safetensors::{Dtype, SafeTensors, Tensor};
use gemv_backend::{DeviceMatrix, ResolvedTiers};
use gemv_core::{KillSwitches, WIDEST_TIER};
use std::path::PathBuf;

/// Arguments of `gemv run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Weights file.
    pub weights: PathBuf,
    /// Tensor prefix (e.g. `layers.0.up`).
    pub name: String,
    /// Activations file.
    pub input: PathBuf,
    /// Activation tensor name.
    pub input_name: String,
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
    let weights_file = SafeTensors::read(&options.weights)?;
    let (weights, layout) = read_weights(&weights_file, &options.weights, &options.name)?;
    let input_file = SafeTensors::read(&options.input)?;
    let (x, m) = read_activations(&input_file, &options.input, &options.input_name, weights.k())?;
    let backend = open(options.backend).map_err(CliError::Backend)?;
    let tiers = ResolvedTiers::resolve(backend.as_ref(), KillSwitches::process());
    let matrix =
        DeviceMatrix::upload(backend.as_ref(), &weights.view()).map_err(|e| CliError::Backend(e.to_string()))?;
    let y = matrix.gemv(&tiers, &x, m, WIDEST_TIER).map_err(|e| CliError::Backend(e.to_string()))?;
    let mut output = SafeTensors::default();
    output.tensors.insert(
        options.output_name.clone(),
        Tensor { dtype: Ok(Dtype::Bf16), shape: vec![m, weights.n()], data: bytemuck::cast_slice(&y).to_vec() },
    );
    output.write_new(&options.output)?;
    Ok(format!(
        "wrote {:?} BF16 [{m}, {}] to {} ({layout:?} weights {:?}, N = {}, K = {}, backend {})",
        options.output_name,
        weights.n(),
        options.output.display(),
        options.name,
        weights.n(),
        weights.k(),
        backend.name()
    ))
}
