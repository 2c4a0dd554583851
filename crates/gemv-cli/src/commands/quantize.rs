//! `gemv quantize`: 2-D BF16/F16/F32 tensors to ModelOpt NVFP4 (`T` U8, `T_scale` F8_E4M3,
//! `T_scale_2` F32), everything else copied unchanged.
//!
//! As ModelOpt's export does: the output head and embeddings stay unquantized by default, and
//! the projections an engine fuses into one GEMM (`q_proj`/`k_proj`/`v_proj`, `gate_proj`/
//! `up_proj` of one parent) share one global scale, from the largest magnitude among them.
//! `--hf-quant-config` writes the `hf_quant_config.json` serving engines read to recognise an
//! NVFP4 checkpoint.

use crate::checkpoint::to_f32;
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::{Dtype, SafeTensors, Tensor};
use gemv_core::quantize_f32_with_amax;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Arguments of `gemv quantize`.
#[derive(Debug, Clone)]
pub struct QuantizeOptions {
    /// Input file.
    pub input: PathBuf,
    /// Output file (must not exist).
    pub output: PathBuf,
    /// Tensors to quantize; empty = every 2-D float tensor whose K is a multiple of 16, less
    /// [`DEFAULT_EXCLUDES`] and `exclude`.
    pub names: Vec<String>,
    /// Patterns (`*` matches any run of characters) of tensors not to quantize by default.
    pub exclude: Vec<String>,
    /// Whether fused projections share one global scale.
    pub shared_scales: bool,
    /// Whether to write `hf_quant_config.json` beside the output.
    pub hf_quant_config: bool,
}

/// Left unquantized unless named in `--names`, as ModelOpt leaves them: the output head and the
/// embeddings.
pub const DEFAULT_EXCLUDES: [&str; 2] = ["*lm_head*", "*embed*"];

/// Projection names that engines fuse into one GEMM, by the fused group they belong to.
const FUSED: [(&str, &[&str]); 2] = [("qkv", &["q_proj", "k_proj", "v_proj"]), ("gate_up", &["gate_proj", "up_proj"])];

/// `*` matches any run of characters (including none); everything else matches itself.
fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The fused group a weight belongs to: (parent, group), e.g. `layers.0.self_attn` and `qkv`
/// for `layers.0.self_attn.k_proj.weight`.
fn fused_group(name: &str) -> Option<(String, &'static str)> {
    let module = name.strip_suffix(".weight").unwrap_or(name);
    let (parent, leaf) = module.rsplit_once('.')?;
    FUSED.iter().find(|(_, members)| members.contains(&leaf)).map(|(group, _)| (parent.to_string(), *group))
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
    let config_path = options.output.with_file_name("hf_quant_config.json");
    if options.hf_quant_config && config_path.symlink_metadata().is_ok() {
        return Err(CliError::OutputExists { path: config_path });
    }
    let quantizable = |name: &str| {
        input.tensor(name).is_some_and(|t| {
            is_float(&t) && t.shape.len() == 2 && t.shape[1] % 16 == 0 && t.shape[0] > 0 && t.shape[1] > 0
        })
    };
    let excluded = |name: &str| {
        DEFAULT_EXCLUDES.iter().map(|p| p.to_string()).chain(options.exclude.clone()).any(|p| matches(&p, name))
    };
    let (selected, left_out): (Vec<String>, Vec<String>) = if options.names.is_empty() {
        let candidates: Vec<String> = input.names().filter(|name| quantizable(name)).map(String::from).collect();
        candidates.into_iter().partition(|name| !excluded(name))
    } else {
        (options.names.clone(), Vec::new())
    };
    // The shared amax of every fused group present (a first pass over the selected tensors).
    let mut group_amax: BTreeMap<(String, &str), f32> = BTreeMap::new();
    if options.shared_scales {
        for name in &selected {
            if let (Some(group), Some(values)) = (fused_group(name), input.tensor(name).as_ref().and_then(to_f32)) {
                let amax = values.iter().fold(0f32, |a, v| a.max(v.abs()));
                let entry = group_amax.entry(group).or_insert(0.0);
                *entry = entry.max(amax);
            }
        }
    }
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
        let shared = fused_group(name).and_then(|g| group_amax.get(&g).copied()).unwrap_or(0.0);
        let quantized = quantize_f32_with_amax(&values, n, k, shared).map_err(|e| bad(&e.to_string()))?;
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
        "wrote {} ({} tensors quantized, {} copied{})",
        options.output.display(),
        selected.len(),
        input.len().saturating_sub(selected.len()),
        if left_out.is_empty() { String::new() } else { format!(", left unquantized: {}", left_out.join(", ")) }
    ));
    if options.hf_quant_config {
        let modules: Vec<&str> = left_out.iter().map(|n| n.strip_suffix(".weight").unwrap_or(n)).collect();
        let config = serde_json::json!({
            "producer": {"name": "gemv", "version": env!("CARGO_PKG_VERSION")},
            "quantization": {
                "quant_algo": "NVFP4",
                "kv_cache_quant_algo": null,
                "group_size": gemv_core::GROUP_SIZE,
                "exclude_modules": modules,
            }
        });
        let text = serde_json::to_string_pretty(&config).unwrap_or_default() + "\n";
        crate::atomic_output::write_new(&config_path, |file| std::io::Write::write_all(file, text.as_bytes()))?;
        summary.push(format!("wrote {}", config_path.display()));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_fused_groups() {
        for (pattern, name, expected) in [
            ("*lm_head*", "lm_head.weight", true),
            ("*embed*", "model.embed_tokens.weight", true),
            ("*.mlp.*", "model.layers.0.mlp.up_proj.weight", true),
            ("*.mlp.*", "model.layers.0.self_attn.q_proj.weight", false),
            ("model.*.weight", "model.x.weight", true),
            ("model.*.weight", "model.x.bias", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
        ] {
            assert_eq!(matches(pattern, name), expected, "{pattern} ~ {name}");
        }
        let parent = "model.layers.3.self_attn".to_string();
        assert_eq!(fused_group("model.layers.3.self_attn.k_proj.weight"), Some((parent, "qkv")));
        assert_eq!(fused_group("model.layers.3.mlp.up_proj.weight").map(|g| g.1), Some("gate_up"));
        assert_eq!(fused_group("model.layers.3.mlp.down_proj.weight"), None);
        assert_eq!(fused_group("q_proj.weight"), None, "no parent");
    }
}
