//! The CLI's errors: each names the file or tensor and what was expected. All are user input
//! problems (exit code 2) except a failing backend.

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
    /// The backend failed (after the input was valid).
    #[error("backend: {0}")]
    Backend(String),
}

impl CliError {
    /// The process exit code: 2 for bad input, 1 for a failing backend.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Backend(_) => 1,
            _ => 2,
        }
    }
}
