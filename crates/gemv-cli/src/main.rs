//! `gemv`: inspect backends and tiers, and prove a backend against the exact numeric contract.

mod backends;
mod commands;

use backends::BackendChoice;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// W4A16 batched GEMV for LLM decode: NVFP4 weights, BF16 activations, one exact answer on
/// every backend.
#[derive(Parser)]
#[command(name = "gemv", version, propagate_version = true)]
struct Cli {
    /// More log output on stderr (-v: info, -vv: debug, -vvv: trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the backends found, the kernels each resolves, the kill switches and the tier each
    /// M in 1..=32 is dispatched on.
    Info {
        /// Only this backend (default: all).
        #[arg(long, value_enum)]
        backend: Option<BackendChoice>,
    },
    /// Run the conformance gates (SPEC section 5) on a backend: bit-exact against the host
    /// contract, within the f64 bound, guards, odd shapes, bad input. Exits 1 if any case fails.
    Check {
        /// Backend to prove.
        #[arg(long, value_enum, default_value = "host")]
        backend: BackendChoice,
        /// Only these gates (1..=8; repeatable). Default: all.
        #[arg(long = "gate")]
        gates: Vec<usize>,
        /// List every case, not only failures.
        #[arg(long)]
        all_cases: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => tracing::Level::WARN,
        1 => tracing::Level::INFO,
        2 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).init();
    let mut stdout = std::io::stdout();
    match cli.command {
        Command::Info { backend } => {
            print!("{}", commands::info::report(backend));
            ExitCode::SUCCESS
        }
        Command::Check { backend, gates, all_cases } => {
            match commands::check::run(backend, &gates, all_cases, &mut stdout) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(reason) => {
                    eprintln!("gemv check: {reason}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
