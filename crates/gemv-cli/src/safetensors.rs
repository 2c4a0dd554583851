//! The safetensors format as this tool writes it: an 8-byte little-endian header length, a JSON
//! header `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`, then the
//! data, tensors in name order with contiguous offsets. Writing goes to a temporary file in the
//! target's directory, then a rename: nothing is ever half-written. Reading is `mapped.rs`.

use crate::error::CliError;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Element types this tool reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// Packed bytes (NVFP4 pairs).
    U8,
    /// FP8 E4M3 (block scales).
    F8E4M3,
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
}

impl Dtype {
    /// From the name in the header; None for dtypes this tool does not handle.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "U8" => Dtype::U8,
            "F8_E4M3" => Dtype::F8E4M3,
            "BF16" => Dtype::Bf16,
            "F16" => Dtype::F16,
            "F32" => Dtype::F32,
            _ => return None,
        })
    }

    /// The name in the header.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "U8",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::Bf16 => "BF16",
            Dtype::F16 => "F16",
            Dtype::F32 => "F32",
        }
    }
}

/// One tensor of a file.
#[derive(Debug, Clone)]
pub struct Tensor {
    /// Its dtype, or the unsupported dtype's name.
    pub dtype: Result<Dtype, String>,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// A whole file, tensors in header order of names.
#[derive(Debug, Clone, Default)]
pub struct SafeTensors {
    /// Tensors by name.
    pub tensors: BTreeMap<String, Tensor>,
    /// `__metadata__`, if any.
    pub metadata: Option<serde_json::Value>,
}

impl SafeTensors {
    /// Writes to `path`, which must not exist yet; it appears only when complete.
    pub fn write_new(&self, path: &Path) -> Result<(), CliError> {
        check_output_path(path)?;
        let mut header = serde_json::Map::new();
        if let Some(metadata) = &self.metadata {
            header.insert("__metadata__".into(), metadata.clone());
        }
        let mut offset = 0usize;
        for (name, tensor) in &self.tensors {
            let dtype = tensor.dtype.as_ref().map(|d| d.name().to_string()).unwrap_or_else(|other| other.clone());
            header.insert(
                name.clone(),
                serde_json::json!({"dtype": dtype, "shape": tensor.shape, "data_offsets": [offset, offset + tensor.data.len()]}),
            );
            offset += tensor.data.len();
        }
        let mut header_bytes = serde_json::to_vec(&serde_json::Value::Object(header))
            .map_err(|e| CliError::Io { path: path.to_path_buf(), error: e.to_string() })?;
        while header_bytes.len() % 8 != 0 {
            header_bytes.push(b' ');
        }
        crate::atomic_output::write_new(path, |file| {
            file.write_all(&(header_bytes.len() as u64).to_le_bytes())?;
            file.write_all(&header_bytes)?;
            for tensor in self.tensors.values() {
                file.write_all(&tensor.data)?;
            }
            Ok(())
        })
    }
}

/// Checks, before any work, that an output can be created at `path`: it does not exist yet and
/// its directory does. The error names `path` itself, never the temporary file.
pub fn check_output_path(path: &Path) -> Result<(), CliError> {
    if path.symlink_metadata().is_ok() {
        return Err(CliError::OutputExists { path: path.to_path_buf() });
    }
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    match std::fs::metadata(directory) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(CliError::BadOutput {
            path: path.to_path_buf(),
            reason: format!("{} is not a directory", directory.display()),
        }),
        Err(e) => Err(CliError::BadOutput {
            path: path.to_path_buf(),
            reason: format!("its directory {} cannot be used: {e}", directory.display()),
        }),
    }
}
