//! `gemv quantize`: 2-D BF16/F16/F32 tensors to ModelOpt NVFP4 (`T` U8, `T_scale` F8_E4M3,
//! `T_scale_2` F32), everything else copied unchanged.

use crate::checkpoint::to_f32;
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::{Dtype, SafeTensors, Tensor};
use gemv_core::quantize_f32;
use std::path::PathBuf;

/// Arguments of `gemv quantize`.
#[derive(Debug, Clone)]
pub struct QuantizeOptions {
    /// Input file.
    pub input: PathBuf,
    /// Output file (must not exist).
    pub output: PathBuf,
    /// Tensors to quantize; empty = every 2-D float tensor whose K is a multiple of 16.
    pub names: Vec<String>,
}

fn is_float(tensor: &Tensor) -> bool {
    matches!(tensor.dtype, Ok(Dtype::Bf16 | Dtype::F16 | Dtype::F32))
}

/// Runs; returns a summary line per quantized tensor.
pub fn run(options: &QuantizeOptions) -> Result<Vec<String>, CliError> {
    crate::safetensors::check_output_path(&options.output)?;
    if let Some(name) = options.names.iter().enumerate().find_map(|(i, n)| options.names[..i].contains(n).then_some(n))
    {
        return Err(CliError::BadArgument { argument: "--names", reason: format!("{name:?} is named twice") });
    }
    let path = &options.input;
    let input = MappedCheckpoint::open(path)?;
    let selected: Vec<String> = if options.names.is_empty() {
        input
            .names()
            .filter(|name| {
                input.tensor(name).is_some_and(|t| {
                    is_float(&t) && t.shape.len() == 2 && t.shape[1] % 16 == 0 && t.shape[0] > 0 && t.shape[1] > 0
                })
            })
            .map(String::from)
            .collect()
    } else {
        options.names.clone()
    };
    let metadata = input.metadata().map(|m| serde_json::json!(m));
    let mut output = SafeTensors { tensors: Default::default(), metadata };
    let mut summary = Vec::new();
    for name in &selected {
        let tensor = input.tensor(name).ok_or_else(|| CliError::MissingTensor {
            path: path.clone(),
            name: name.clone(),
            why: "named in --names".into(),
            present: input.names().take(8).collect::<Vec<_>>().join(", "),
        })?;
        let dtype = tensor.dtype.as_ref().map(|d| d.name().to_string()).unwrap_or_else(|o| o.clone());
        let bad = |expected: &str| CliError::BadTensor {
            path: path.clone(),
            name: name.clone(),
            expected: expected.to_string(),
            found: format!("{dtype} {:?}", tensor.shape),
        };
        if !is_float(&tensor) {
            return Err(bad("a BF16, F16 or F32 tensor"));
        }
        let [n, k] = tensor.shape[..] else { return Err(bad("a 2-D tensor [N, K]")) };
        if n == 0 || k == 0 || k % 16 != 0 {
            return Err(bad("[N, K] with N >= 1 and K a positive multiple of 16"));
        }
        for suffix in ["_scale", "_scale_2"] {
            if input.contains(&format!("{name}{suffix}")) {
                return Err(bad(&format!("no existing tensor {name}{suffix} (it would be overwritten)")));
            }
        }
        let values = to_f32(&tensor).ok_or_else(|| bad("float data"))?;
        let quantized = quantize_f32(&values, n, k).map_err(|e| bad(&e.to_string()))?;
        let global = quantized.global_scale();
        let (packed, scales, _) = quantized.into_parts();
        output.tensors.insert(name.clone(), Tensor { dtype: Ok(Dtype::U8), shape: vec![n, k / 2], data: packed });
        output
            .tensors
            .insert(format!("{name}_scale"), Tensor { dtype: Ok(Dtype::F8E4M3), shape: vec![n, k / 16], data: scales });
        output.tensors.insert(
            format!("{name}_scale_2"),
            Tensor { dtype: Ok(Dtype::F32), shape: vec![], data: global.to_le_bytes().to_vec() },
        );
        summary.push(format!("quantized {name} [{n}, {k}] {dtype} -> NVFP4 (global scale {global:e})"));
    }
    for name in input.names() {
        if !selected.iter().any(|s| s == name) {
            let tensor = input.tensor(name).ok_or_else(|| CliError::Io {
                path: path.clone(),
                error: format!("tensor {name:?} vanished while copying"),
            })?;
            output.tensors.insert(name.to_string(), tensor);
        }
    }
    output.write_new(&options.output)?;
    summary.push(format!(
        "wrote {} ({} tensors quantized, {} copied)",
        options.output.display(),
        selected.len(),
        input.len().saturating_sub(selected.len())
    ));
    Ok(summary)
}
