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
mod routing;
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
        #[command(flatten)]
        options: commands::bench::BenchOptions,
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
        #[command(flatten)]
        options: commands::run::RunOptions,
    },
    /// Quantize 2-D BF16/F16/F32 tensors to NVFP4 with NVIDIA ModelOpt's recipe, named as
    /// ModelOpt names them (T, T_scale, T_scale_2); other tensors are copied unchanged.
    #[command(after_help = EXIT_STATUS)]
    Quantize {
        #[command(flatten)]
        options: commands::quantize::QuantizeOptions,
    },
    /// Run the conformance gates on a backend: bit-exact against the host
    /// contract, within the f64 bound, guards, odd shapes, bad input. Exits 1 if any case fails.
    #[command(after_help = EXIT_STATUS)]
    Check {
        #[command(flatten)]
        devices: DeviceOptions,
        #[command(flatten)]
        options: commands::check::CheckOptions,
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
            Command::Bench { options, .. } => Some(options.backend),
            Command::Run { options, .. } => Some(options.backend),
            Command::Check { options, .. } => Some(options.backend),
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
        Command::Bench { options, devices: _ } => commands::bench::run(&options, stdout),
        Command::Run { options, devices: _ } => {
            eprintln!("{}", commands::run::run(&options)?);
            Ok(true)
        }
        Command::Quantize { options } => {
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
        Command::Check { options, devices: _ } => commands::check::run(&options, stdout),
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
