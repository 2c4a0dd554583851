//! `gemv quantize`: 2-D BF16/F16/F32 tensors to ModelOpt NVFP4 (`T` U8, `T_scale` F8_E4M3,
//! `T_scale_2` F32), everything else copied unchanged.
//!
//! As ModelOpt's export does: the output head and embeddings stay unquantized by default, and
//! the projections an engine fuses into one GEMM (`q_proj`/`k_proj`/`v_proj`, `gate_proj`/
//! `up_proj` of one parent) share one global scale, from the largest magnitude among them.
//!
//! The input may be sharded; the output is one file (a `.safetensors` path) or a new directory
//! of shards mirroring the input's files plus `model.safetensors.index.json`. A directory output
//! is, by default, what ModelOpt's export writes, loadable as it stands: `hf_quant_config.json`,
//! the input's `config.json` with its `quantization_config`, and the input directory's other
//! files that are not weights (tokenizer, generation config) copied. `--hf-quant-config` gives a
//! single file its `hf_quant_config.json` too.
//!
//! Tensors are streamed: a piece of rows at a time is read, quantized and written (two passes,
//! the first for the global scale), so no tensor is held whole. The output's size is checked
//! against the free disk before any work, and it appears only when complete: a single file
//! through an unnamed file, a directory all at once (`atomic_directory.rs`).

use crate::atomic_directory::DirectoryOutput;
use crate::checkpoint::bytes_to_f32;
use crate::commands::progress::progress;
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::{Dtype, StreamedFile, TensorLayout};
use gemv_core::{global_scale_for_amax, quantize_rows};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
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
    /// Whether a single-file output gets `hf_quant_config.json` beside it.
    pub hf_quant_config: bool,
    /// Whether a directory output gets the serving configs and the input's other model files.
    pub model_files: bool,
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
    dtype: Dtype,
}

impl Planned {
    /// Bytes of one row of the input.
    fn row_bytes(&self) -> usize {
        self.k * if self.dtype == Dtype::F32 { 4 } else { 2 }
    }

    /// Bytes read, converted and quantized at once: whole rows, about [`PIECE_BYTES`].
    fn piece_bytes(&self) -> usize {
        (PIECE_BYTES / self.row_bytes()).max(1) * self.row_bytes()
    }
}

/// About how many input bytes are in memory at once (as f32, four times as many for BF16).
const PIECE_BYTES: usize = 16 << 20;

/// Where the output goes: a `.safetensors` file, or any other path: a new directory of shards
/// that mirror the input's files, with an index.
enum Destination {
    File(PathBuf),
    Directory(PathBuf),
}

/// The index a sharded output gets, as Hugging Face names it.
const INDEX: &str = "model.safetensors.index.json";

/// The serving engines' quantization config, as ModelOpt's export names it.
const HF_QUANT_CONFIG: &str = "hf_quant_config.json";

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

/// The largest magnitude of a tensor, read a piece at a time.
fn tensor_amax(input: &MappedCheckpoint, plan: &Planned) -> std::io::Result<f32> {
    let mut amax = 0f32;
    input
        .for_each_piece(&plan.name, plan.piece_bytes(), |bytes| {
            stop_if_interrupted()?;
            let values = bytes_to_f32(plan.dtype, bytes).unwrap_or_default();
            amax = values.iter().fold(amax, |acc, v| acc.max(v.abs()));
            Ok(())
        })
        .unwrap_or_else(|| Err(vanished(&plan.name)))?;
    Ok(amax)
}

/// Stops the work between pieces once a signal was noted (see `interrupt.rs`).
fn stop_if_interrupted() -> std::io::Result<()> {
    match crate::interrupt::caught() {
        Some(_) => Err(std::io::ErrorKind::Interrupted.into()),
        None => Ok(()),
    }
}

fn vanished(name: &str) -> std::io::Error {
    std::io::Error::other(format!("tensor {name:?} vanished while reading"))
}

/// Writes one tensor's three parts (packed `[N, K/2]`, scales `[N, K/16]`, global scale) at the
/// file's position, a piece of rows at a time: the packed bytes in order, each piece's scales
/// at their place further on. Returns the global scale.
fn write_quantized(
    input: &MappedCheckpoint,
    plan: &Planned,
    shared_amax: f32,
    file: &mut File,
) -> std::io::Result<f32> {
    let global = global_scale_for_amax(tensor_amax(input, plan)?.max(shared_amax));
    let k = plan.k;
    let scales_start = file.stream_position()? + (plan.n * k / 2) as u64;
    let mut row = 0;
    input
        .for_each_piece(&plan.name, plan.piece_bytes(), |bytes| {
            stop_if_interrupted()?;
            let values = bytes_to_f32(plan.dtype, bytes).unwrap_or_default();
            let (mut packed, mut scales) = (vec![0u8; values.len() / 2], vec![0u8; values.len() / 16]);
            quantize_rows(&values, k, global, &mut packed, &mut scales).map_err(|error| {
                let error = match error {
                    gemv_core::CoreError::NonFiniteWeight { row: r, col, value } => {
                        gemv_core::CoreError::NonFiniteWeight { row: row + r, col, value }
                    }
                    other => other,
                };
                std::io::Error::other(format!("{}: {error}", plan.name))
            })?;
            file.write_all(&packed)?;
            let here = file.stream_position()?;
            file.seek(SeekFrom::Start(scales_start + (row * k / 16) as u64))?;
            file.write_all(&scales)?;
            file.seek(SeekFrom::Start(here))?;
            row += values.len() / k;
            Ok(())
        })
        .unwrap_or_else(|| Err(vanished(&plan.name)))?;
    file.seek(SeekFrom::Start(scales_start + (plan.n * k / 16) as u64))?;
    file.write_all(&global.to_le_bytes())?;
    Ok(global)
}

/// Writes one target's tensors: its quantized weights, streamed, then its copies. Returns their
/// global scales in order.
fn fill_target(
    input: &MappedCheckpoint,
    target: &Target,
    group_amax: &BTreeMap<(String, &str), f32>,
    done: usize,
    total: usize,
    file: &mut File,
) -> std::io::Result<Vec<f32>> {
    let mut globals = Vec::new();
    for plan in &target.planned {
        let shared = fused_group(&plan.name).and_then(|g| group_amax.get(&g).copied()).unwrap_or(0.0);
        globals.push(write_quantized(input, plan, shared, file)?);
        progress(done + globals.len(), total, "quantize");
    }
    for layout in &target.copied {
        input
            .for_each_piece(&layout.name, PIECE_BYTES, |bytes| file.write_all(bytes))
            .unwrap_or_else(|| Err(vanished(&layout.name)))?;
    }
    Ok(globals)
}

/// The index of a sharded output: which file holds each tensor, and the bytes of tensor data.
fn index_text(targets: &[Target]) -> String {
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
    serde_json::to_string_pretty(&index).unwrap_or_default() + "\n"
}

/// The directory the input's model files live in.
fn input_directory(input: &Path) -> &Path {
    if input.is_dir() { input } else { crate::atomic_output::parent_of(input) }
}

/// The input's `config.json` (beside the file or the index, or in the directory), if it has
/// one; it must be a JSON object.
fn read_model_config(input: &Path) -> Result<Option<serde_json::Map<String, serde_json::Value>>, CliError> {
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
fn model_files(input: &Path) -> Result<Vec<(String, PathBuf, u64)>, CliError> {
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
fn serving_configs(
    model_config: Option<&serde_json::Map<String, serde_json::Value>>,
    left_out: &[String],
) -> Vec<(&'static str, String)> {
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

/// Refuses options that contradict each other or do not apply to the output.
fn check_options(options: &QuantizeOptions, destination: &Destination) -> Result<(), CliError> {
    if !options.names.is_empty() && !options.exclude.is_empty() {
        let reason = "leaves tensors out of the default selection; with --names only the named tensors are \
                      quantized (drop one of the two)";
        return Err(CliError::BadArgument { argument: "--exclude", reason: reason.into() });
    }
    if let Destination::File(_) = destination
        && !options.model_files
    {
        let reason = "applies to a directory output (a path not ending in .safetensors)".into();
        return Err(CliError::BadArgument { argument: "--no-model-files", reason });
    }
    if let Some(name) = options.names.iter().enumerate().find_map(|(i, n)| options.names[..i].contains(n).then_some(n))
    {
        return Err(CliError::BadArgument { argument: "--names", reason: format!("{name:?} is named twice") });
    }
    for name in &options.names {
        crate::safetensors::check_tensor_name("--names", name)?;
    }
    Ok(())
}

/// Runs; returns a summary line per quantized tensor. Every selected tensor is validated and the
/// output sized against the free disk before anything is written.
pub fn run(options: &QuantizeOptions) -> Result<Vec<String>, CliError> {
    crate::safetensors::check_output_path(&options.output)?;
    let destination = if options.output.extension().is_some_and(|e| e == "safetensors") {
        Destination::File(options.output.clone())
    } else {
        Destination::Directory(options.output.clone())
    };
    check_options(options, &destination)?;
    let path = &options.input;
    let input = MappedCheckpoint::open(path)?;
    // The serving files: read and checked now, before any work.
    let (write_hf_config, model_config, copies) = match &destination {
        Destination::File(file) => {
            let config_path = file.with_file_name(HF_QUANT_CONFIG);
            if options.hf_quant_config && config_path.symlink_metadata().is_ok() {
                return Err(CliError::OutputExists { path: config_path });
            }
            (options.hf_quant_config, None, Vec::new())
        }
        Destination::Directory(_) if options.model_files => (true, read_model_config(path)?, model_files(path)?),
        Destination::Directory(_) => (options.hf_quant_config, None, Vec::new()),
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
        let dtype = match Dtype::parse(&layout.dtype) {
            Some(dtype @ (Dtype::Bf16 | Dtype::F16 | Dtype::F32)) => dtype,
            _ => return Err(bad("a BF16, F16 or F32 tensor")),
        };
        let [n, k] = layout.shape[..] else { return Err(bad("a 2-D tensor [N, K]")) };
        if n == 0 || k == 0 || k % 16 != 0 {
            return Err(bad("[N, K] with N >= 1 and K a positive multiple of 16"));
        }
        for suffix in ["_scale", "_scale_2"] {
            if input.contains(&format!("{name}{suffix}")) {
                return Err(bad(&format!("no existing tensor {name}{suffix} (it would be overwritten)")));
            }
        }
        planned.push(Planned { name: name.clone(), n, k, dtype });
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
    let files: Vec<StreamedFile> = targets
        .iter()
        .map(|t| StreamedFile::new(&t.path, t.metadata.as_ref(), &t.layouts()))
        .collect::<Result<_, _>>()?;
    let configs = if write_hf_config { serving_configs(model_config.as_ref(), &left_out) } else { Vec::new() };
    let index = index_text(&targets);
    let needed = files.iter().map(StreamedFile::len).chain(copies.iter().map(|c| c.2)).try_fold(0u64, u64::checked_add);
    let small = (index.len() + configs.iter().map(|c| c.1.len()).sum::<usize>()) as u64;
    crate::resources::check_disk(&options.output, needed.and_then(|n| n.checked_add(small)))?;

    // The shared amax of every fused group present, streamed.
    let mut group_amax: BTreeMap<(String, &str), f32> = BTreeMap::new();
    if options.shared_scales {
        for plan in &planned {
            if let Some(group) = fused_group(&plan.name) {
                let amax =
                    tensor_amax(&input, plan).map_err(|e| CliError::Io { path: path.clone(), error: e.to_string() })?;
                let entry = group_amax.entry(group).or_insert(0.0);
                *entry = entry.max(amax);
            }
        }
    }

    let total = planned.len();
    let mut globals = Vec::new();
    match &destination {
        Destination::File(out) => {
            let found = std::sync::Mutex::new(Vec::new());
            crate::safetensors::check_output_path(out)?;
            crate::atomic_output::write_new(out, |file| {
                files[0].write(file, |file| {
                    let scales = fill_target(&input, &targets[0], &group_amax, 0, total, file)?;
                    *found.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = scales;
                    Ok(())
                })
            })?;
            globals = found.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (name, text) in &configs {
                let config = out.with_file_name(name);
                crate::atomic_output::write_new(&config, |file| file.write_all(text.as_bytes()))?;
            }
        }
        Destination::Directory(dir) => {
            let mut output = DirectoryOutput::begin(dir)?;
            for (target, file) in targets.iter().zip(&files) {
                let name = target.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                output.add(&name, |out| {
                    file.write(out, |out| {
                        globals.extend(fill_target(&input, target, &group_amax, globals.len(), total, out)?);
                        Ok(())
                    })
                })?;
            }
            for (name, text) in &configs {
                output.add(name, |file| file.write_all(text.as_bytes()))?;
            }
            for (name, source, _) in &copies {
                output.add(name, |file| {
                    let mut from = File::open(source)?;
                    std::io::copy(&mut from, file).map(|_| ())
                })?;
            }
            output.add(INDEX, |file| file.write_all(index.as_bytes()))?;
            output.finish()?;
        }
    }

    let mut summary: Vec<String> = Vec::new();
    for (plan, global) in targets.iter().flat_map(|t| t.planned.iter().copied()).zip(&globals) {
        summary.push(format!(
            "quantized {} [{}, {}] {} -> NVFP4 (global scale {global:e})",
            plan.name,
            plan.n,
            plan.k,
            plan.dtype.name()
        ));
        if *global == 0.0 {
            summary.push(format!(
                "warning: {}: every value is below 2688 x 2^-149 in magnitude, so its global scale underflows to 0 \
                 and it quantizes to all zeros",
                plan.name
            ));
        }
    }
    summary.push(format!(
        "wrote {}{} ({} tensors quantized, {} copied{})",
        options.output.display(),
        match &destination {
            Destination::File(_) => String::new(),
            Destination::Directory(_) => format!(": {} shards and {INDEX}", targets.len()),
        },
        planned.len(),
        copied_names.len(),
        if left_out.is_empty() { String::new() } else { format!(", left unquantized: {}", left_out.join(", ")) }
    ));
    let config_dir = match &destination {
        Destination::File(file) => crate::atomic_output::parent_of(file).to_path_buf(),
        Destination::Directory(dir) => dir.clone(),
    };
    for (name, _) in &configs {
        let what = if *name == "config.json" { " with its quantization_config" } else { "" };
        summary.push(format!("wrote {}{what}", config_dir.join(name).display()));
    }
    if !copies.is_empty() {
        let names: Vec<&str> = copies.iter().map(|c| c.0.as_str()).collect();
        summary.push(format!("copied from the input: {}", names.join(", ")));
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
