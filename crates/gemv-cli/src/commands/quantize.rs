//! `gemv quantize`: 2-D BF16/F16/F32 tensors to ModelOpt NVFP4 (`T` U8, `T_scale` F8_E4M3,
//! `T_scale_2` F32), everything else copied unchanged.
//!
//! As ModelOpt's export does: the output head and embeddings stay unquantized by default, and
//! the projections an engine fuses into one GEMM (`q_proj`/`k_proj`/`v_proj`, `gate_proj`/
//! `up_proj` of one parent) share one global scale, from the largest magnitude among them.
//! `--hf-quant-config` writes the `hf_quant_config.json` serving engines read to recognise an
//! NVFP4 checkpoint.
//!
//! The input may be sharded; the output is one file (a `.safetensors` path) or a new directory
//! of shards mirroring the input's files plus `model.safetensors.index.json`. Either way one
//! tensor is in memory at a time. Each shard appears only when complete, and the index last, so
//! an interrupted run never leaves a directory that opens as a checkpoint; on an error the
//! directory is removed.

use crate::checkpoint::to_f32;
use crate::commands::progress::progress;
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::TensorLayout;
use gemv_core::quantize_f32_with_amax;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// One tensor to quantize, validated: its name, N, K and input dtype.
struct Planned {
    name: String,
    n: usize,
    k: usize,
    dtype: String,
}

/// Where the output goes: a `.safetensors` file, or any other path: a new directory of shards
/// that mirror the input's files, with an index.
enum Destination {
    File(PathBuf),
    Directory(PathBuf),
}

/// The index a sharded output gets, as Hugging Face names it.
const INDEX: &str = "model.safetensors.index.json";

/// One output file: its quantized tensors and the tensors it copies.
struct Target<'a> {
    path: PathBuf,
    metadata: Option<serde_json::Value>,
    planned: Vec<&'a Planned>,
    copied: Vec<TensorLayout>,
}

impl Target<'_> {
    /// Every tensor of the file as its header lists it: each quantized weight's three parts,
    /// then the copies.
    fn layouts(&self) -> Vec<TensorLayout> {
        let mut layouts = Vec::new();
        for plan in &self.planned {
            let (name, n, k) = (&plan.name, plan.n, plan.k);
            layouts.push(TensorLayout {
                name: name.clone(),
                dtype: "U8".into(),
                shape: vec![n, k / 2],
                len: n * k / 2,
            });
            layouts.push(TensorLayout {
                name: format!("{name}_scale"),
                dtype: "F8_E4M3".into(),
                shape: vec![n, k / 16],
                len: n * k / 16,
            });
            layouts.push(TensorLayout { name: format!("{name}_scale_2"), dtype: "F32".into(), shape: vec![], len: 4 });
        }
        layouts.extend(self.copied.iter().cloned());
        layouts
    }
}

/// Writes every target, one tensor in memory at a time; returns the global scales in target
/// order.
fn write_targets(
    input: &MappedCheckpoint,
    targets: &[Target],
    group_amax: &BTreeMap<(String, &str), f32>,
    total: usize,
) -> Result<Vec<f32>, CliError> {
    let mut globals = Vec::new();
    for target in targets {
        let found = std::sync::Mutex::new(Vec::new());
        crate::safetensors::write_streamed(&target.path, target.metadata.as_ref(), &target.layouts(), |file| {
            let vanished = |name: &str| std::io::Error::other(format!("tensor {name:?} vanished while reading"));
            let mut found_globals = Vec::new();
            for plan in &target.planned {
                let tensor = input.tensor(&plan.name).ok_or_else(|| vanished(&plan.name))?;
                let values = to_f32(&tensor).ok_or_else(|| vanished(&plan.name))?;
                drop(tensor);
                let shared = fused_group(&plan.name).and_then(|g| group_amax.get(&g).copied()).unwrap_or(0.0);
                let quantized = quantize_f32_with_amax(&values, plan.n, plan.k, shared)
                    .map_err(|e| std::io::Error::other(format!("{}: {e}", plan.name)))?;
                let global = quantized.global_scale();
                let (packed, scales, _) = quantized.into_parts();
                file.write_all(&packed)?;
                file.write_all(&scales)?;
                file.write_all(&global.to_le_bytes())?;
                found_globals.push(global);
                progress(globals.len() + found_globals.len(), total, "quantize");
            }
            for layout in &target.copied {
                file.write_all(&input.tensor(&layout.name).ok_or_else(|| vanished(&layout.name))?.data)?;
            }
            *found.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = found_globals;
            Ok(())
        })?;
        globals.extend(found.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner));
    }
    Ok(globals)
}

/// The index of a sharded output: which file holds each tensor, and the bytes of tensor data.
fn write_index(dir: &std::path::Path, targets: &[Target]) -> Result<(), CliError> {
    let mut weight_map = serde_json::Map::new();
    let mut total_size = 0usize;
    for target in targets {
        let file = target.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for layout in target.layouts() {
            total_size += layout.len;
            weight_map.insert(layout.name, serde_json::Value::String(file.clone()));
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": total_size}, "weight_map": weight_map});
    let text = serde_json::to_string_pretty(&index).unwrap_or_default() + "\n";
    crate::atomic_output::write_new(&dir.join(INDEX), |file| file.write_all(text.as_bytes()))
}

/// The input's `config.json` (beside the file or the index, or in the directory), if it has
/// one; it must be a JSON object.
fn read_model_config(input: &Path) -> Result<Option<serde_json::Map<String, serde_json::Value>>, CliError> {
    let dir = if input.is_dir() { input } else { input.parent().unwrap_or(Path::new(".")) };
    let path = dir.join("config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read(&path).map_err(|e| CliError::Io { path: path.clone(), error: e.to_string() })?;
    match serde_json::from_slice(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        _ => Err(CliError::BadFile { path, reason: "not a JSON object".into() }),
    }
}

/// `hf_quant_config.json` at `path` (ModelOpt's file: weight-only NVFP4, `W4A16_NVFP4`, the
/// modules left unquantized) and, given the model's config, `config.json` beside it with the
/// `quantization_config` ModelOpt's export derives from it (compressed-tensors' layout,
/// `quant_method: modelopt`).
fn write_serving_configs(
    path: &Path,
    model_config: Option<&serde_json::Map<String, serde_json::Value>>,
    left_out: &[String],
) -> Result<(), CliError> {
    let modules: Vec<&str> = left_out.iter().map(|n| n.strip_suffix(".weight").unwrap_or(n)).collect();
    let producer = serde_json::json!({"name": "gemv", "version": env!("CARGO_PKG_VERSION")});
    let hf_quant_config = serde_json::json!({
        "producer": producer,
        "quantization": {
            "quant_algo": "W4A16_NVFP4",
            "kv_cache_quant_algo": null,
            "group_size": gemv_core::GROUP_SIZE,
            "exclude_modules": modules,
        }
    });
    let write_json = |path: &Path, value: &serde_json::Value| {
        let text = serde_json::to_string_pretty(value).unwrap_or_default() + "\n";
        crate::atomic_output::write_new(path, |file| file.write_all(text.as_bytes()))
    };
    write_json(path, &hf_quant_config)?;
    if let Some(config) = model_config {
        let weights =
            serde_json::json!({"dynamic": false, "num_bits": 4, "type": "float", "group_size": gemv_core::GROUP_SIZE});
        let mut config = config.clone();
        config.insert(
            "quantization_config".into(),
            serde_json::json!({
                "config_groups": {"group_0": {"weights": weights, "targets": ["Linear"]}},
                "ignore": modules,
                "quant_algo": "W4A16_NVFP4",
                "producer": producer,
                "quant_method": "modelopt",
            }),
        );
        write_json(&path.with_file_name("config.json"), &serde_json::Value::Object(config))?;
    }
    Ok(())
}

/// Runs; returns a summary line per quantized tensor. Every selected tensor is validated before
/// anything is written, and the output is streamed: one tensor in memory at a time.
pub fn run(options: &QuantizeOptions) -> Result<Vec<String>, CliError> {
    crate::safetensors::check_output_path(&options.output)?;
    let destination = if options.output.extension().is_some_and(|e| e == "safetensors") {
        Destination::File(options.output.clone())
    } else {
        Destination::Directory(options.output.clone())
    };
    if let Some(name) = options.names.iter().enumerate().find_map(|(i, n)| options.names[..i].contains(n).then_some(n))
    {
        return Err(CliError::BadArgument { argument: "--names", reason: format!("{name:?} is named twice") });
    }
    let path = &options.input;
    let input = MappedCheckpoint::open(path)?;
    let config_path = match &destination {
        Destination::File(path) => path.with_file_name("hf_quant_config.json"),
        Destination::Directory(dir) => dir.join("hf_quant_config.json"),
    };
    if options.hf_quant_config && config_path.symlink_metadata().is_ok() {
        return Err(CliError::OutputExists { path: config_path });
    }
    // A sharded output with the serving config also gets the model's config.json, with the
    // quantization_config engines read (read and checked now, before any work).
    let model_config = match &destination {
        Destination::Directory(_) if options.hf_quant_config => read_model_config(path)?,
        _ => None,
    };
    let float = |dtype: &str| matches!(dtype, "BF16" | "F16" | "F32");
    let quantizable = |name: &str| {
        input.layout(name).is_some_and(|t| {
            float(&t.dtype) && t.shape.len() == 2 && t.shape[1] % 16 == 0 && t.shape[0] > 0 && t.shape[1] > 0
        })
    };
    let patterns: Vec<String> = DEFAULT_EXCLUDES.iter().map(|p| p.to_string()).chain(options.exclude.clone()).collect();
    let (selected, left_out): (Vec<String>, Vec<String>) = if options.names.is_empty() {
        let candidates: Vec<String> = input.names().filter(|name| quantizable(name)).map(String::from).collect();
        candidates.into_iter().partition(|name| !patterns.iter().any(|p| matches(p, name)))
    } else {
        (options.names.clone(), Vec::new())
    };

    // Validate every selected tensor before any work.
    let mut planned = Vec::new();
    for name in &selected {
        let layout = input.layout(name).ok_or_else(|| CliError::MissingTensor {
            path: path.clone(),
            name: name.clone(),
            why: "named in --names".into(),
            present: input.names().take(8).collect::<Vec<_>>().join(", "),
        })?;
        let bad = |expected: &str| CliError::BadTensor {
            path: path.clone(),
            name: name.clone(),
            expected: expected.to_string(),
            found: format!("{} {:?}", layout.dtype, layout.shape),
        };
        if !float(&layout.dtype) {
            return Err(bad("a BF16, F16 or F32 tensor"));
        }
        let [n, k] = layout.shape[..] else { return Err(bad("a 2-D tensor [N, K]")) };
        if n == 0 || k == 0 || k % 16 != 0 {
            return Err(bad("[N, K] with N >= 1 and K a positive multiple of 16"));
        }
        for suffix in ["_scale", "_scale_2"] {
            if input.contains(&format!("{name}{suffix}")) {
                return Err(bad(&format!("no existing tensor {name}{suffix} (it would be overwritten)")));
            }
        }
        planned.push(Planned { name: name.clone(), n, k, dtype: layout.dtype });
    }

    // The shared amax of every fused group present (one tensor in memory at a time).
    let mut group_amax: BTreeMap<(String, &str), f32> = BTreeMap::new();
    if options.shared_scales {
        for plan in &planned {
            if let (Some(group), Some(values)) =
                (fused_group(&plan.name), input.tensor(&plan.name).as_ref().and_then(to_f32))
            {
                let amax = values.iter().fold(0f32, |a, v| a.max(v.abs()));
                let entry = group_amax.entry(group).or_insert(0.0);
                *entry = entry.max(amax);
            }
        }
    }

    // The outputs: one file, or one shard per input file. Each holds its quantized tensors'
    // three parts, then its other tensors copied.
    let copied_names: Vec<&str> = input.names().filter(|name| !selected.iter().any(|s| s == name)).collect();
    let targets: Vec<Target> = match &destination {
        Destination::File(path) => vec![Target {
            path: path.clone(),
            metadata: input.metadata().map(|m| serde_json::json!(m)),
            planned: planned.iter().collect(),
            copied: copied_names.iter().filter_map(|name| input.layout(name)).collect(),
        }],
        Destination::Directory(dir) => input
            .files()
            .iter()
            .map(|file| Target {
                path: dir.join(file.path.file_name().unwrap_or(file.path.as_os_str())),
                metadata: file.metadata.map(|m| serde_json::json!(m)),
                planned: planned.iter().filter(|p| file.names.contains(&p.name.as_str())).collect(),
                copied: file
                    .names
                    .iter()
                    .filter(|name| copied_names.contains(name))
                    .filter_map(|name| input.layout(name))
                    .collect(),
            })
            .collect(),
    };
    if let Destination::Directory(dir) = &destination {
        std::fs::create_dir(dir).map_err(|e| CliError::BadOutput { path: dir.clone(), reason: e.to_string() })?;
    }
    let written = write_targets(&input, &targets, &group_amax, planned.len()).and_then(|globals| {
        if let Destination::Directory(dir) = &destination {
            if options.hf_quant_config {
                write_serving_configs(&config_path, model_config.as_ref(), &left_out)?;
            }
            write_index(dir, &targets)?;
        }
        Ok(globals)
    });
    let globals = match written {
        Ok(globals) => globals,
        Err(error) => {
            if let Destination::Directory(dir) = &destination {
                // Created by this run: nothing of it is worth keeping.
                let _ = std::fs::remove_dir_all(dir);
            }
            return Err(error);
        }
    };
    let copied = copied_names;
    let mut summary: Vec<String> = targets
        .iter()
        .flat_map(|t| t.planned.iter().copied())
        .zip(&globals)
        .map(|(p, global)| {
            format!("quantized {} [{}, {}] {} -> NVFP4 (global scale {global:e})", p.name, p.n, p.k, p.dtype)
        })
        .collect();
    summary.push(format!(
        "wrote {}{} ({} tensors quantized, {} copied{})",
        options.output.display(),
        match &destination {
            Destination::File(_) => String::new(),
            Destination::Directory(_) => format!(": {} shards and {INDEX}", targets.len()),
        },
        planned.len(),
        copied.len(),
        if left_out.is_empty() { String::new() } else { format!(", left unquantized: {}", left_out.join(", ")) }
    ));
    if options.hf_quant_config {
        if let Destination::File(_) = &destination {
            write_serving_configs(&config_path, None, &left_out)?;
        }
        summary.push(format!("wrote {}", config_path.display()));
        if model_config.is_some() {
            summary.push(format!(
                "wrote {} with its quantization_config",
                config_path.with_file_name("config.json").display()
            ));
        }
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
