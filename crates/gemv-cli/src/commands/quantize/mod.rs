//! `gemv quantize`: 2-D BF16/F16/F32 tensors to ModelOpt NVFP4 (`T` U8, `T_scale` F8_E4M3,
//! `T_scale_2` F32), everything else copied unchanged.
//!
//! As ModelOpt's export does: the output head, the embeddings and a mixture of experts' routers
//! stay unquantized by default, and the projections an engine fuses into one GEMM (`q_proj`/
//! `k_proj`/`v_proj`, `gate_proj`/`up_proj` of one parent: of one expert, where a mixture of
//! experts names them `experts.{i}.gate_proj`) share one global scale, from the largest magnitude
//! among them.
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
//!
//! `selection.rs` decides what is quantized, `streaming.rs` writes it, `model_files.rs` makes a
//! directory output loadable.

mod model_files;
mod selection;
mod streaming;

use crate::atomic_directory::DirectoryOutput;
use crate::commands::progress::counted;
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::StreamedFile;
use model_files::{HF_QUANT_CONFIG, model_files, read_model_config, serving_configs};
use selection::{LeftOut, Planned, already_quantized, fused_group, select};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use streaming::{GroupAmax, Target, fill_target, index_text, tensor_amax};

/// Arguments of `gemv quantize`, as clap parses them.
#[derive(clap::Args, Debug, Clone)]
pub struct QuantizeOptions {
    /// Input: a safetensors file, a sharded checkpoint's *.safetensors.index.json, or a
    /// directory holding one of them. Read tensor by tensor (memory-mapped).
    #[arg(long)]
    pub input: std::path::PathBuf,
    /// Output; must not exist. A path ending in .safetensors is one file; any other path
    /// becomes a directory with one shard per input file (same names, each holding the
    /// quantized forms of its tensors) and model.safetensors.index.json.
    #[arg(long)]
    pub output: std::path::PathBuf,
    /// Comma-separated tensors to quantize (default: every 2-D float tensor whose second
    /// dimension is a multiple of 16, except the output head, the embeddings and a mixture of
    /// experts' routers, as ModelOpt leaves them (`*lm_head*`, `*embed*`, `*mlp.gate.*`,
    /// `*block_sparse_moe.gate*`, `*shared_expert_gate*`, `*router*`), and what --exclude names;
    /// each linear layer left unquantized is named with its reason and listed as unquantized in
    /// the serving configs). An input that already holds NVFP4 tensors is refused unless this
    /// names what to quantize.
    #[arg(long, value_delimiter = ',')]
    pub names: Vec<String>,
    /// Leave tensors matching this pattern unquantized (`*` matches any run of characters;
    /// repeatable), e.g. `--exclude '*.self_attn.o_proj.*'`.
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Give every projection its own global scale, instead of one shared by those engines
    /// fuse (q_proj/k_proj/v_proj and gate_proj/up_proj of one parent: of one expert, in a
    /// mixture of experts), as ModelOpt does.
    #[arg(long)]
    pub no_shared_scale: bool,
    /// For a single-file output, also write hf_quant_config.json beside it (ModelOpt's:
    /// quant_algo W4A16_NVFP4, weight-only, group_size 16, the modules left unquantized), so
    /// serving engines load it as NVFP4. A directory output gets it by default.
    #[arg(long)]
    pub hf_quant_config: bool,
    /// A directory output holds the weights and index only: without this, it is what
    /// ModelOpt's export writes, loadable as it stands: hf_quant_config.json, the input's
    /// config.json with the quantization_config engines read, and the input directory's
    /// other files that are not weights (tokenizer, generation config) copied.
    #[arg(long)]
    pub no_model_files: bool,
}

/// Where the output goes: a `.safetensors` file, or any other path: a new directory of shards
/// that mirror the input's files, with an index.
enum Destination {
    File(PathBuf),
    Directory(PathBuf),
}

/// The index a sharded output gets, as Hugging Face names it.
const INDEX: &str = "model.safetensors.index.json";

/// Refuses options that contradict each other or do not apply to the output.
fn check_options(options: &QuantizeOptions, destination: &Destination) -> Result<(), CliError> {
    if !options.names.is_empty() && !options.exclude.is_empty() {
        let reason = "leaves tensors out of the default selection; with --names only the named tensors are \
                      quantized (drop one of the two)";
        return Err(CliError::BadArgument { argument: "--exclude", reason: reason.into() });
    }
    if let Destination::File(_) = destination
        && options.no_model_files
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

/// Everything `run` decided and checked before any work.
struct Job<'a> {
    destination: Destination,
    targets: Vec<Target<'a>>,
    /// Each target's header and size.
    files: Vec<StreamedFile>,
    /// Serving configs to write (name, text).
    configs: Vec<(&'static str, String)>,
    /// The input's model files to copy (name, path, bytes).
    copies: Vec<(String, PathBuf, u64)>,
    index: String,
    copied_names: Vec<&'a str>,
    left_out: Vec<LeftOut>,
}

/// The output files: one, or one shard per input file. Each holds its quantized tensors' three
/// parts, then its other tensors copied.
fn targets<'a>(input: &'a MappedCheckpoint, planned: &'a [Planned], destination: &Destination) -> Vec<Target<'a>> {
    let copied = |name: &str| !planned.iter().any(|p| p.name == name);
    match destination {
        Destination::File(path) => vec![Target {
            path: path.clone(),
            metadata: input.metadata().map(|m| serde_json::json!(m)),
            planned: planned.iter().collect(),
            copied: input.names().filter(|name| copied(name)).filter_map(|name| input.layout(name)).collect(),
        }],
        Destination::Directory(dir) => input
            .files()
            .iter()
            .map(|file| Target {
                path: dir.join(file.path.file_name().unwrap_or(file.path.as_os_str())),
                metadata: file.metadata.map(|m| serde_json::json!(m)),
                planned: planned.iter().filter(|p| file.names.contains(&p.name.as_str())).collect(),
                copied: file.names.iter().filter(|name| copied(name)).filter_map(|name| input.layout(name)).collect(),
            })
            .collect(),
    }
}

/// Plans the run and checks it against the free disk; nothing is written.
fn prepare<'a>(
    options: &QuantizeOptions,
    input: &'a MappedCheckpoint,
    planned: &'a [Planned],
    left_out: Vec<LeftOut>,
    destination: Destination,
) -> Result<Job<'a>, CliError> {
    let path = &options.input;
    // The serving files: read and checked now, before any work.
    let (write_hf_config, model_config, copies) = match &destination {
        Destination::File(file) => {
            let config_path = file.with_file_name(HF_QUANT_CONFIG);
            if options.hf_quant_config && config_path.symlink_metadata().is_ok() {
                return Err(CliError::OutputExists { path: config_path });
            }
            (options.hf_quant_config, None, Vec::new())
        }
        Destination::Directory(_) if !options.no_model_files => (true, read_model_config(path)?, model_files(path)?),
        Destination::Directory(_) => (options.hf_quant_config, None, Vec::new()),
    };
    let targets = targets(input, planned, &destination);
    let files: Vec<StreamedFile> = targets
        .iter()
        .map(|t| StreamedFile::new(&t.path, t.metadata.as_ref(), &t.layouts()))
        .collect::<Result<_, _>>()?;
    let configs = if write_hf_config {
        serving_configs(model_config.as_ref(), left_out.iter().map(|l| l.name.as_str()))
    } else {
        Vec::new()
    };
    let index = index_text(&targets);
    let needed = files.iter().map(StreamedFile::len).chain(copies.iter().map(|c| c.2)).try_fold(0u64, u64::checked_add);
    let small = (index.len() + configs.iter().map(|c| c.1.len()).sum::<usize>()) as u64;
    crate::resources::check_disk(&options.output, needed.and_then(|n| n.checked_add(small)))?;
    let copied_names = input.names().filter(|name| !planned.iter().any(|p| p.name == *name)).collect();
    Ok(Job { destination, targets, files, configs, copies, index, copied_names, left_out })
}

/// The largest magnitude of every fused group present, streamed.
fn group_amaxes(input: &MappedCheckpoint, planned: &[Planned]) -> Result<GroupAmax, CliError> {
    let mut group_amax = GroupAmax::new();
    for plan in planned {
        if let Some(group) = fused_group(&plan.name) {
            let amax = tensor_amax(input, plan)
                .map_err(|e| CliError::Io { path: input.file_of(&plan.name).to_path_buf(), error: e.to_string() })?;
            let entry = group_amax.entry(group).or_insert(0.0);
            *entry = entry.max(amax);
        }
    }
    Ok(group_amax)
}

/// Writes the job's output; returns the global scales in target order.
fn write(job: &Job, input: &MappedCheckpoint, group_amax: &GroupAmax, total: usize) -> Result<Vec<f32>, CliError> {
    let mut globals = Vec::new();
    match &job.destination {
        Destination::File(out) => {
            let found = std::sync::Mutex::new(Vec::new());
            crate::atomic_output::write_new(out, |file| {
                job.files[0].write(file, |file| {
                    let scales = fill_target(input, &job.targets[0], group_amax, 0, total, file)?;
                    *found.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = scales;
                    Ok(())
                })
            })?;
            globals = found.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (name, text) in &job.configs {
                crate::atomic_output::write_new(&out.with_file_name(name), |file| file.write_all(text.as_bytes()))?;
            }
        }
        Destination::Directory(dir) => {
            let mut output = DirectoryOutput::begin(dir)?;
            for (target, file) in job.targets.iter().zip(&job.files) {
                let name = target.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                output.add(&name, |out| {
                    file.write(out, |out| {
                        globals.extend(fill_target(input, target, group_amax, globals.len(), total, out)?);
                        Ok(())
                    })
                })?;
            }
            for (name, text) in &job.configs {
                output.add(name, |file| file.write_all(text.as_bytes()))?;
            }
            for (name, source, _) in &job.copies {
                output.add(name, |file| std::io::copy(&mut File::open(source)?, file).map(|_| ()))?;
            }
            output.add(INDEX, |file| file.write_all(job.index.as_bytes()))?;
            output.finish()?;
        }
    }
    Ok(globals)
}

/// The lines `gemv quantize` prints: each tensor with its global scale (and a warning where the
/// scale underflowed), what was written, what was copied.
fn summary(job: &Job, output: &std::path::Path, globals: &[f32]) -> Vec<String> {
    let mut lines = Vec::new();
    let planned = job.targets.iter().flat_map(|t| t.planned.iter().copied());
    for (plan, global) in planned.clone().zip(globals) {
        let (name, n, k, dtype) = (&plan.name, plan.n, plan.k, plan.dtype.name());
        lines.push(format!("quantized {name} [{n}, {k}] {dtype} -> NVFP4 (global scale {global:e})"));
        if *global == 0.0 {
            lines.push(format!(
                "warning: {name}: every value is below 2688 x 2^-149 in magnitude, so its global scale underflows \
                 to 0 and it quantizes to all zeros"
            ));
        }
    }
    let left_out = &job.left_out;
    lines.push(format!(
        "wrote {}{} ({} quantized, {} copied, {} left unquantized)",
        output.display(),
        match &job.destination {
            Destination::File(_) => String::new(),
            Destination::Directory(_) => format!(": {} and {INDEX}", counted(job.targets.len(), "shard")),
        },
        counted(planned.count(), "tensor"),
        job.copied_names.len(),
        left_out.len(),
    ));
    for LeftOut { name, reason } in left_out {
        lines.push(format!("left unquantized: {name} ({reason})"));
    }
    let config_dir = match &job.destination {
        Destination::File(file) => crate::atomic_output::parent_of(file).to_path_buf(),
        Destination::Directory(dir) => dir.clone(),
    };
    for (name, _) in &job.configs {
        let what = if *name == "config.json" { " with its quantization_config" } else { "" };
        lines.push(format!("wrote {}{what}", config_dir.join(name).display()));
    }
    if !job.copies.is_empty() {
        let names: Vec<&str> = job.copies.iter().map(|c| c.0.as_str()).collect();
        lines.push(format!("copied from the input: {}", names.join(", ")));
    }
    lines
}

/// Runs; returns the summary lines. Every selected tensor is validated and the output sized
/// against the free disk before anything is written.
pub fn run(options: &QuantizeOptions) -> Result<Vec<String>, CliError> {
    crate::safetensors::check_output_path(&options.output)?;
    let destination = if options.output.extension().is_some_and(|e| e == "safetensors") {
        Destination::File(options.output.clone())
    } else {
        Destination::Directory(options.output.clone())
    };
    check_options(options, &destination)?;
    let input = MappedCheckpoint::open(&options.input)?;
    if options.names.is_empty()
        && let Some(name) = already_quantized(&input)
    {
        let reason = format!(
            "{} already holds NVFP4 tensors ({name} with {name}_scale): quantizing it again would only copy them; \
             name the float tensors to quantize with --names",
            options.input.display()
        );
        return Err(CliError::BadArgument { argument: "--input", reason });
    }
    let (planned, left_out) = select(&input, &options.names, &options.exclude)?;
    let job = prepare(options, &input, &planned, left_out, destination)?;
    let group_amax = if !options.no_shared_scale { group_amaxes(&input, &planned)? } else { GroupAmax::new() };
    let globals = write(&job, &input, &group_amax, planned.len())?;
    Ok(summary(&job, &options.output, &globals))
}
