//! `gemv`: inspect backends and tiers, and prove a backend against the exact numeric contract.

mod activations;
mod atomic_directory;
mod atomic_output;
mod backends;
mod checkpoint;
mod commands;
mod error;
mod interrupt;
mod mapped;
mod output;
mod resources;
mod safetensors;

use backends::BackendChoice;
use clap::{Parser, Subcommand};
use error::CliError;
use output::CheckedOutput;
use std::io::Write;
use std::process::ExitCode;

/// W4A16 batched GEMV for LLM decode: NVFP4 weights, BF16 activations, one exact answer on
/// every backend.
#[derive(Parser)]
#[command(name = "gemv", version, propagate_version = true, after_help = EXIT_STATUS)]
struct Cli {
    /// More log output on stderr (-v: info, -vv: debug, -vvv: trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// Where the commands that run a backend run it (not `quantize`, which runs none).
#[derive(clap::Args, Clone, Copy, Default)]
struct DeviceOptions {
    /// Which device where a backend sees several: the CUDA device ordinal, or the N-th wgpu
    /// adapter as the system lists them (default: CUDA device 0; the best wgpu adapter, or the
    /// one GEMV_WGPU_ADAPTER names).
    #[arg(long, value_name = "N")]
    device: Option<usize>,
    /// The compute capability `--backend cuda-emu` emulates, as MAJOR.MINOR (default 9.0). It
    /// runs the kernel builds a GPU of that capability loads: 8.0 runs the exact family's sm_75
    /// build where 8.9 and newer run its sm_89 build, and 7.5 has no fast family.
    #[arg(long, value_name = "MAJOR.MINOR", value_parser = parse_capability)]
    emulate: Option<(i32, i32)>,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmark the tiers (the main job): proves them bit-exact and within the f64 bound at a
    /// small shape, then times them with cold weights, device events where available,
    /// interleaved rounds and medians, and prints tier, M, time, effective GB/s, % peak (of the
    /// device's nominal bandwidth, where known) and % copy (of the bandwidth of a copy of the
    /// weights timed in every round of the same run); its last line sets the figures beside the
    /// README's for the same backend, shape and M, measured on another machine.
    #[command(after_help = EXIT_STATUS)]
    Bench {
        #[command(flatten)]
        devices: DeviceOptions,
        /// Backend; auto picks CUDA, then wgpu on a real GPU, then the CPU backend.
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendChoice,
        /// Weight shape NxK, or qkv (5120x5120), ffn-up (17408x5120), ffn-down (5120x17408).
        /// Repeatable. Default: qkv.
        #[arg(long = "shape", value_parser = commands::bench::parse_shape)]
        shapes: Vec<(String, usize, usize)>,
        /// Rows per launch, as a list of numbers and ranges (each M in 1..=4096, at most 1024 values).
        #[arg(long, default_value = "1..8", value_parser = commands::bench::parse_ms)]
        m: std::vec::Vec<usize>,
        /// Force a kernel (e.g. w4a16_gemv_batch8 at M = 4..8, the 8-wide kernel without the
        /// exact-M tiers); repeatable; `plan` is the dispatch plan. Default: the plan.
        #[arg(long = "tier")]
        tiers: Vec<String>,
        /// The kernel family the plan runs in: auto (the policy: exact today), exact, or fast
        /// (tensor cores, CUDA sm_80+; its own bounded, batch-invariant contract). Repeatable, to
        /// compare the families side by side; `GEMV_EXACT_ONLY` forces exact.
        #[arg(long = "family", value_parser = commands::bench::parse_family)]
        families: Vec<gemv_core::FamilyChoice>,
        /// Nominal peak bandwidth in GB/s for the % column (default: what the device reports).
        #[arg(long, value_parser = commands::bench::parse_peak_gbps)]
        peak_gbps: Option<f64>,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// Write effective bandwidth against M as an SVG plot, one line per tier.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<std::path::PathBuf>,
        /// Interleaved rounds; the median is reported (1..=100000).
        #[arg(long, default_value = "5", value_parser = commands::bench::parse_repeats)]
        rounds: usize,
        /// Back-to-back launches per timing (1..=100000).
        #[arg(long, default_value = "20", value_parser = commands::bench::parse_repeats)]
        launches: usize,
        /// Megabytes of weight copies to rotate through, so weights are cold (>= 4x the L2).
        /// Checked against the memory available before anything is allocated.
        #[arg(long, default_value = "256", value_parser = commands::bench::parse_cold_mb)]
        cold_mb: usize,
        /// Skip the peer row: on CUDA the bench also times cuBLAS's BF16 GEMM on the same shape
        /// and M (where libcublas loads; a note says so where it does not) and prints the NVFP4
        /// speed-up over it (ideal 3.56x: 2 bytes per weight against 0.5625).
        #[arg(long)]
        no_peer: bool,
    },
    /// Show the backends found, the kernels each resolves, the kill switches and the tier each
    /// M in 1..=32 is dispatched on.
    #[command(after_help = EXIT_STATUS)]
    Info {
        #[command(flatten)]
        devices: DeviceOptions,
        /// Only this backend (default: all).
        #[arg(long, value_enum)]
        backend: Option<BackendChoice>,
    },
    /// Compute Y = W X for NVFP4 checkpoint tensors (ModelOpt or compressed-tensors layout,
    /// detected from the names) and write Y as BF16 [M, N]. Any M: the dispatch plan splits it.
    #[command(after_help = EXIT_STATUS)]
    Run {
        #[command(flatten)]
        devices: DeviceOptions,
        /// The weights: a safetensors file, a sharded checkpoint's `*.safetensors.index.json`, or
        /// the directory holding it. Files are memory-mapped; only the named layer is read.
        #[arg(long)]
        weights: std::path::PathBuf,
        /// Tensor prefix: reads PREFIX.weight, PREFIX.weight_scale, PREFIX.weight_scale_2 (or
        /// PREFIX.weight_packed, PREFIX.weight_scale, PREFIX.weight_global_scale). The weight
        /// tensor's own name (PREFIX.weight) works too.
        #[arg(long)]
        name: String,
        /// safetensors file with X: BF16, F16 or F32, shaped `[K]`, `[M, K]` or `[..., K]` (leading
        /// dimensions are flattened into M; Y keeps them, with N in place of K). F16 and F32 are
        /// rounded to BF16 (to nearest even), the kernels' input type, and a note says so.
        #[arg(long)]
        input: std::path::PathBuf,
        /// Name of X in the input file (default: `x`, or the file's only tensor).
        #[arg(long)]
        input_name: Option<String>,
        /// Output safetensors file; must not exist.
        #[arg(long)]
        output: std::path::PathBuf,
        /// Name of Y in the output file.
        #[arg(long, default_value = "y")]
        output_name: String,
        /// Backend.
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendChoice,
        /// For a mixture-of-experts weight stored as one 3-D tensor [E, N, K/2] (scales
        /// [E, N, K/16], global scale a scalar or `[E]`): the expert to use, or `all` (Y then gains
        /// a leading dimension E).
        #[arg(long, value_parser = commands::run::parse_experts)]
        expert: Option<commands::run::Experts>,
    },
    /// Quantize 2-D BF16/F16/F32 tensors to NVFP4 with NVIDIA ModelOpt's recipe, named as
    /// ModelOpt names them (T, T_scale, T_scale_2); other tensors are copied unchanged.
    #[command(after_help = EXIT_STATUS)]
    Quantize {
        /// Input: a safetensors file, a sharded checkpoint's *.safetensors.index.json, or a
        /// directory holding one of them. Read tensor by tensor (memory-mapped).
        #[arg(long)]
        input: std::path::PathBuf,
        /// Output; must not exist. A path ending in .safetensors is one file; any other path
        /// becomes a directory with one shard per input file (same names, each holding the
        /// quantized forms of its tensors) and model.safetensors.index.json.
        #[arg(long)]
        output: std::path::PathBuf,
        /// Comma-separated tensors to quantize (default: every 2-D float tensor whose second
        /// dimension is a multiple of 16, except the output head and embeddings, `*lm_head*` and
        /// `*embed*`, and what --exclude names; each linear layer left unquantized is named with
        /// its reason and listed as unquantized in the serving configs). An input that already
        /// holds NVFP4 tensors is refused unless this names what to quantize.
        #[arg(long, value_delimiter = ',')]
        names: Vec<String>,
        /// Leave tensors matching this pattern unquantized (`*` matches any run of characters;
        /// repeatable), e.g. `--exclude '*.mlp.gate.weight'`.
        #[arg(long)]
        exclude: Vec<String>,
        /// Give every projection its own global scale, instead of one shared by those engines
        /// fuse (q_proj/k_proj/v_proj and gate_proj/up_proj of one parent), as ModelOpt does.
        #[arg(long)]
        no_shared_scale: bool,
        /// For a single-file output, also write hf_quant_config.json beside it (ModelOpt's:
        /// quant_algo W4A16_NVFP4, weight-only, group_size 16, the modules left unquantized), so
        /// serving engines load it as NVFP4. A directory output gets it by default.
        #[arg(long)]
        hf_quant_config: bool,
        /// A directory output holds the weights and index only: without this, it is what
        /// ModelOpt's export writes, loadable as it stands: hf_quant_config.json, the input's
        /// config.json with the quantization_config engines read, and the input directory's
        /// other files that are not weights (tokenizer, generation config) copied.
        #[arg(long)]
        no_model_files: bool,
    },
    /// Run the conformance gates on a backend: bit-exact against the host
    /// contract, within the f64 bound, guards, odd shapes, bad input. Exits 1 if any case fails.
    #[command(after_help = EXIT_STATUS)]
    Check {
        #[command(flatten)]
        devices: DeviceOptions,
        /// Backend to prove (default: auto, the one `run` and `bench` pick: a GPU if there is one,
        /// else the CPU backend).
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendChoice,
        /// Only these gates (1..=11; repeatable), in the order given. Default: all, in order. Gates
        /// 10 and 11 check the fast (tensor-core) family and say n/a where the backend lacks it.
        #[arg(long = "gate")]
        gates: Vec<usize>,
        /// List every case, not only failures.
        #[arg(long)]
        all_cases: bool,
        /// Stop after the first gate with a failed case.
        #[arg(long)]
        fail_fast: bool,
    },
}

/// Mesa's Vulkan device-select layer asks the display server which GPU to prefer; without a
/// desktop login (no `XDG_RUNTIME_DIR`: CI, ssh, containers) its Wayland probe prints an error twice on
/// every wgpu probe, although nothing failed. The layer has no display to consult then, and this
/// command chooses adapters itself, so the layer is switched off for this process.
fn quiet_headless_vulkan() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() && std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: called first thing in `main`, before any other thread exists, so nothing reads
        // the environment concurrently.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}

/// The compute capabilities `--emulate` takes: from the oldest build of the kernels (7.5) up to
/// the newest architecture family they are built to run on.
const EMULATED_RANGE: ((i32, i32), (i32, i32)) = ((7, 5), (12, 9));

/// `--emulate MAJOR.MINOR`: a compute capability such as 8.0 or 12.1, within [`EMULATED_RANGE`].
fn parse_capability(text: &str) -> Result<(i32, i32), String> {
    let ((low_major, low_minor), (high_major, high_minor)) = EMULATED_RANGE;
    let range = format!("{low_major}.{low_minor} to {high_major}.{high_minor}");
    let parse = |part: &str| part.parse::<i32>().ok().filter(|v| *v >= 0);
    let not_capability = || format!("{text:?} is not a compute capability MAJOR.MINOR (e.g. 8.0; supported: {range})");
    let (major, minor) = text.split_once('.').ok_or_else(not_capability)?;
    let capability = parse(major).zip(parse(minor)).ok_or_else(not_capability)?;
    if capability < EMULATED_RANGE.0 || capability > EMULATED_RANGE.1 {
        return Err(format!(
            "{text}: the emulator runs compute capabilities {range} (the exact family needs 7.5, the fast family 8.0)"
        ));
    }
    Ok(capability)
}

/// What the exit status means, for `--help`.
const EXIT_STATUS: &str = "\
Exit status:
  0  done (bench and check: every case passed)
  1  a backend failed: a conformance case or a correctness gate failed, or the backend reported an
     error while working
  2  the command could not do what was asked: a bad or inapplicable argument, an invalid input
     file, an output that exists or cannot be written (standard output included), a backend not
     available here, not enough memory or disk for the work
A closed standard output (a pipe whose reader left) ends the output quietly.";

impl Command {
    /// The backend the command runs on: None for `quantize` (it runs none) and for `info` over
    /// every backend.
    fn backend(&self) -> Option<BackendChoice> {
        match self {
            Command::Bench { backend, .. } | Command::Run { backend, .. } | Command::Check { backend, .. } => {
                Some(*backend)
            }
            Command::Info { backend, .. } => backend.filter(|b| *b != BackendChoice::Auto),
            Command::Quantize { .. } => None,
        }
    }

    /// Its device options (none for `quantize`).
    fn devices(&self) -> DeviceOptions {
        match self {
            Command::Bench { devices, .. }
            | Command::Run { devices, .. }
            | Command::Check { devices, .. }
            | Command::Info { devices, .. } => *devices,
            Command::Quantize { .. } => DeviceOptions::default(),
        }
    }

    /// Its name, as errors are prefixed.
    fn name(&self) -> &'static str {
        match self {
            Command::Bench { .. } => "bench",
            Command::Info { .. } => "info",
            Command::Run { .. } => "run",
            Command::Quantize { .. } => "quantize",
            Command::Check { .. } => "check",
        }
    }
}

/// Refuses the device options the chosen backend would ignore.
fn check_device_options(command: &Command) -> Result<(), CliError> {
    let backend = command.backend();
    let devices = command.devices();
    let all_backends = matches!(command, Command::Info { .. }) && backend.is_none();
    if devices.device.is_some()
        && !all_backends
        && !matches!(backend, Some(BackendChoice::Auto | BackendChoice::Cuda | BackendChoice::Wgpu))
    {
        let reason = match backend {
            Some(other) => format!("backend {} has one device; --device chooses a CUDA or wgpu device", other.name()),
            None => format!("gemv {} runs no backend", command.name()),
        };
        return Err(CliError::BadArgument { argument: "--device", reason });
    }
    if devices.emulate.is_some() && !all_backends && backend != Some(BackendChoice::CudaEmu) {
        let reason = match backend {
            Some(other) => format!("applies to --backend cuda-emu, not {}", other.name()),
            None => format!("gemv {} runs no backend", command.name()),
        };
        return Err(CliError::BadArgument { argument: "--emulate", reason });
    }
    Ok(())
}

/// Whether the work passed: Ok(false) for a failed case or gate (exit 1).
fn dispatch(command: Command, stdout: &mut CheckedOutput<std::io::Stdout>) -> Result<bool, CliError> {
    match command {
        Command::Bench {
            backend,
            shapes,
            m,
            tiers,
            families,
            peak_gbps,
            json,
            plot,
            rounds,
            launches,
            cold_mb,
            no_peer,
            devices: _,
        } => {
            let shapes = if shapes.is_empty() { vec![("qkv/o".to_string(), 5120, 5120)] } else { shapes };
            let options = commands::bench::BenchOptions {
                backend,
                shapes,
                ms: m,
                tiers,
                families,
                peak_gbps,
                json,
                plot,
                rounds,
                launches,
                cold_bytes: cold_mb.saturating_mul(1 << 20),
                peer: !no_peer,
            };
            commands::bench::run(&options, stdout)
        }
        Command::Run { weights, name, input, input_name, output, output_name, backend, expert, devices: _ } => {
            let options =
                commands::run::RunOptions { weights, name, input, input_name, output, output_name, backend, expert };
            eprintln!("{}", commands::run::run(&options)?);
            Ok(true)
        }
        Command::Quantize { input, output, names, exclude, no_shared_scale, hf_quant_config, no_model_files } => {
            let options = commands::quantize::QuantizeOptions {
                input,
                output,
                names,
                exclude,
                shared_scales: !no_shared_scale,
                hf_quant_config,
                model_files: !no_model_files,
            };
            for line in commands::quantize::run(&options)? {
                eprintln!("{line}");
            }
            Ok(true)
        }
        Command::Info { backend, devices: _ } => {
            stdout
                .write_all(commands::info::report(backend).as_bytes())
                .map_err(|e| CliError::Stdout(e.to_string()))?;
            Ok(true)
        }
        Command::Check { backend, gates, all_cases, fail_fast, devices: _ } => {
            let options = commands::check::CheckOptions { gates, all_cases, fail_fast };
            commands::check::run(backend, &options, stdout)
        }
    }
}

fn main() -> ExitCode {
    quiet_headless_vulkan();
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => tracing::Level::WARN,
        1 => tracing::Level::INFO,
        2 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    // Colour only on a terminal: redirected, the log is plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).with_ansi(colour).init();
    let name = cli.command.name();
    if let Err(error) = check_device_options(&cli.command) {
        eprintln!("gemv {name}: {error}");
        return ExitCode::from(error.exit_code());
    }
    let devices = cli.command.devices();
    if let Some(index) = devices.device {
        backends::set_device(index);
    }
    if let Some(capability) = devices.emulate {
        backends::set_emulated_capability(capability);
    }
    let mut stdout = CheckedOutput::stdout();
    let result = dispatch(cli.command, &mut stdout);
    // A failed write is reported even when the command stopped for it.
    let result = match (result, stdout.finish()) {
        (Err(CliError::Stdout(_)) | Ok(_), Err(failure)) => Err(CliError::Stdout(failure.to_string())),
        (result, _) => result,
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("gemv {name}: {error}");
            if let CliError::Interrupted { signal } = error {
                interrupt::reraise(signal);
            }
            ExitCode::from(error.exit_code())
        }
    }
}
