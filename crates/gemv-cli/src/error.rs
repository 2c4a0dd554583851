//! The CLI's errors: each names the file, tensor or argument and what was expected.
//!
//! One rule maps them to the exit status (`gemv --help` states it): 1 when a backend failed while
//! working, 2 when the command could not do what was asked (arguments, input files, outputs,
//! a backend not available here, memory or disk too small, standard output not writable).

use std::path::PathBuf;

/// What went wrong in `gemv run` / `gemv quantize`.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: String,
    },
    /// Not a valid safetensors file.
    #[error("{}: not a valid safetensors file: {reason}", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A tensor that must be there is not.
    #[error("{}: no tensor {name:?} ({why}); tensors present: {present}", path.display())]
    MissingTensor {
        /// The file.
        path: PathBuf,
        /// The missing name.
        name: String,
        /// What it was needed for.
        why: String,
        /// A short list of what is there.
        present: String,
    },
    /// A tensor with the wrong dtype, rank or shape.
    #[error("{}: tensor {name:?}: expected {expected}, found {found}", path.display())]
    BadTensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// A command-line argument that cannot be right.
    #[error("{argument}: {reason}")]
    BadArgument {
        /// The argument, e.g. `--names`.
        argument: &'static str,
        /// Why.
        reason: String,
    },
    /// The output cannot be created where it was asked for.
    #[error("{}: {reason}", path.display())]
    BadOutput {
        /// The output path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The output exists already.
    #[error("{}: the output already exists; refusing to overwrite it", path.display())]
    OutputExists {
        /// The output path.
        path: PathBuf,
    },
    /// A request the command cannot carry out as given (options that contradict each other or
    /// do not apply, nothing to run).
    #[error("{0}")]
    Usage(String),
    /// The backend asked for cannot be opened here.
    #[error("{0}")]
    BackendUnavailable(String),
    /// The work would need more memory than the machine has available.
    #[error("{what} needs {} of memory and {} is available", size(*needed), size(*available))]
    NotEnoughMemory {
        /// What needs it.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes available (`MemAvailable`).
        available: u64,
    },
    /// The device could not hold what the work needs (its driver said so).
    #[error("{0} (the work does not fit the device's memory)")]
    DeviceMemory(String),
    /// The output would need more disk than its filesystem has free.
    #[error("{}: the output needs {} of disk and {} is free there", path.display(), size(*needed), size(*available))]
    NotEnoughDisk {
        /// The output.
        path: PathBuf,
        /// Bytes it needs.
        needed: u64,
        /// Bytes free to this user on its filesystem.
        available: u64,
    },
    /// Writing standard output failed (a full disk, a closed terminal; not a closed pipe, which
    /// ends the output quietly).
    #[error("writing standard output: {0}")]
    Stdout(String),
    /// A signal stopped the work; what it had written is removed.
    #[error("interrupted by signal {signal}; nothing was written")]
    Interrupted {
        /// The signal.
        signal: i32,
    },
    /// The backend failed while working (after the input was valid).
    #[error("backend: {0}")]
    Backend(String),
}

/// A byte count as people read it: bytes below 1 KiB, else KiB, MiB, GiB, TiB, PiB with one
/// decimal.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

impl From<gemv_backend::Error> for CliError {
    /// A backend's error while working: a failure of the backend (exit 1), except a device out
    /// of memory, which is the machine's limit (exit 2).
    fn from(error: gemv_backend::Error) -> Self {
        match error {
            gemv_backend::Error::OutOfMemory { .. } => CliError::DeviceMemory(error.to_string()),
            other => CliError::Backend(other.to_string()),
        }
    }
}

impl CliError {
    /// The process exit status: 1 for a backend that failed while working, 2 for everything that
    /// kept the command from doing what was asked.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Backend(_) => 1,
            _ => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_read_them_and_the_rule_gives_each_error_its_status() {
        assert_eq!(size(1023), "1023 bytes");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(5 << 40), "5.0 TiB");
        assert_eq!(CliError::Backend("launch failed".into()).exit_code(), 1);
        let out_of_memory =
            gemv_backend::Error::OutOfMemory { backend: "cuda", what: "allocating 1 GiB".into(), source: None };
        assert!(matches!(CliError::from(out_of_memory), CliError::DeviceMemory(ref m) if m.contains("allocating")));
        for error in [
            CliError::BackendUnavailable("no driver".into()),
            CliError::Usage("x".into()),
            CliError::Stdout("no space left".into()),
            CliError::NotEnoughMemory { what: "X".into(), needed: 2, available: 1 },
        ] {
            assert_eq!(error.exit_code(), 2, "{error}");
        }
        let error = CliError::NotEnoughMemory { what: "Y".into(), needed: 3 << 30, available: 1 << 30 };
        assert_eq!(error.to_string(), "Y needs 3.0 GiB of memory and 1.0 GiB is available");
    }
}
