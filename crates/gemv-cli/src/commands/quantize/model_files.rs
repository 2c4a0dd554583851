//! The files beside the weights that make a quantized model directory loadable, as ModelOpt's
//! export writes them: `hf_quant_config.json`, `config.json` with its `quantization_config`,
//! and the input's other files that are not weights (tokenizer, generation config).

use crate::error::CliError;
use std::path::{Path, PathBuf};

/// The serving engines' quantization config, as ModelOpt's export names it.
pub const HF_QUANT_CONFIG: &str = "hf_quant_config.json";

/// The directory the input's model files live in.
fn input_directory(input: &Path) -> &Path {
    if input.is_dir() { input } else { crate::atomic_output::parent_of(input) }
}

/// The input's `config.json` (beside the file or the index, or in the directory), if it has
/// one; it must be a JSON object.
pub fn read_model_config(input: &Path) -> Result<Option<serde_json::Map<String, serde_json::Value>>, CliError> {
    let path = input_directory(input).join("config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read(&path).map_err(|e| CliError::Io { path: path.clone(), error: e.to_string() })?;
    match serde_json::from_slice(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        _ => Err(CliError::BadFile { path, reason: "not a JSON object".into() }),
    }
}

/// Weight formats: files of these kinds are never copied into a quantized output.
const WEIGHT_EXTENSIONS: [&str; 11] =
    ["safetensors", "bin", "pt", "pth", "ckpt", "gguf", "h5", "msgpack", "onnx", "pkl", "npz"];

/// The input directory's files a loadable output copies: regular files (symlinks followed, as in
/// a Hugging Face cache), not hidden, not weights or their index, and not the configs the output
/// writes anew.
pub fn model_files(input: &Path) -> Result<Vec<(String, PathBuf, u64)>, CliError> {
    let dir = input_directory(input);
    let io = |e: std::io::Error| CliError::Io { path: dir.to_path_buf(), error: e.to_string() };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let weights = Path::new(&name).extension().is_some_and(|e| WEIGHT_EXTENSIONS.iter().any(|w| e == *w));
        let skipped = name.starts_with('.')
            || weights
            || name.ends_with(".index.json")
            || name == "config.json"
            || name == HF_QUANT_CONFIG;
        match std::fs::metadata(entry.path()) {
            Ok(meta) if meta.is_file() && !skipped => files.push((name, entry.path(), meta.len())),
            _ => {}
        }
    }
    files.sort();
    Ok(files)
}

/// `hf_quant_config.json` (ModelOpt's file: weight-only NVFP4, `W4A16_NVFP4`, the modules left
/// unquantized) and, given the model's config, `config.json` with the `quantization_config`
/// ModelOpt's export derives from it (compressed-tensors' layout, `quant_method: modelopt`).
pub fn serving_configs<'a>(
    model_config: Option<&serde_json::Map<String, serde_json::Value>>,
    left_out: impl Iterator<Item = &'a str>,
) -> Vec<(&'static str, String)> {
    let modules: Vec<&str> = left_out.map(|n| n.strip_suffix(".weight").unwrap_or(n)).collect();
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
    let text = |value: &serde_json::Value| serde_json::to_string_pretty(value).unwrap_or_default() + "\n";
    let mut configs = vec![(HF_QUANT_CONFIG, text(&hf_quant_config))];
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
        configs.push(("config.json", text(&serde_json::Value::Object(config))));
    }
    configs
}
