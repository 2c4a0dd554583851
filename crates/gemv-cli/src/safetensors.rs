//! The safetensors format, read and written strictly: an 8-byte little-endian header length, a
//! JSON header `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`, then
//! the data. Every offset, length and dtype is checked against the file before use. Writing goes
//! to a temporary file in the target's directory, then a rename: nothing is ever half-written.

use crate::error::CliError;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

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
    fn parse(text: &str) -> Option<Self> {
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

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 | Dtype::F8E4M3 => 1,
            Dtype::Bf16 | Dtype::F16 => 2,
            Dtype::F32 => 4,
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
    /// Reads and validates `path`.
    pub fn read(path: &Path) -> Result<Self, CliError> {
        let bad = |reason: String| CliError::BadFile { path: path.to_path_buf(), reason };
        let io = |e: std::io::Error| CliError::Io { path: path.to_path_buf(), error: e.to_string() };
        // Only regular files: reading a FIFO or a device would block or never end.
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return Err(bad("not a regular file".into()));
        }
        let bytes = std::fs::read(path).map_err(io)?;
        if bytes.len() < 8 {
            return Err(bad(format!("truncated: {} bytes, shorter than the 8-byte header length", bytes.len())));
        }
        let header_len = u64::from_le_bytes(bytes[..8].try_into().map_err(|_| bad("header".into()))?);
        let header_end = 8u64.checked_add(header_len).filter(|&end| end <= bytes.len() as u64).ok_or_else(|| {
            bad(format!("truncated: the header claims {header_len} bytes but the file has {}", bytes.len() - 8))
        })? as usize;
        let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..header_end])
            .map_err(|e| bad(format!("the header is not a JSON object: {e}")))?;
        let data = &bytes[header_end..];
        let mut file = SafeTensors::default();
        for (name, entry) in header {
            if name == "__metadata__" {
                file.metadata = Some(entry);
                continue;
            }
            let field = |key: &str| entry.get(key).ok_or_else(|| bad(format!("tensor {name:?} has no {key}")));
            let dtype_name =
                field("dtype")?.as_str().ok_or_else(|| bad(format!("tensor {name:?}: dtype is not a string")))?;
            let shape = field("shape")?
                .as_array()
                .and_then(|dims| dims.iter().map(|d| d.as_u64().map(|d| d as usize)).collect::<Option<Vec<_>>>())
                .ok_or_else(|| bad(format!("tensor {name:?}: shape is not a list of sizes")))?;
            let offsets = field("data_offsets")?
                .as_array()
                .and_then(|o| Some((o.first()?.as_u64()? as usize, o.get(1)?.as_u64()? as usize)))
                .ok_or_else(|| bad(format!("tensor {name:?}: data_offsets is not [begin, end]")))?;
            let (begin, end) = offsets;
            if begin > end || end > data.len() {
                return Err(bad(format!(
                    "tensor {name:?}: data [{begin}, {end}) lies outside the {} data bytes (truncated file?)",
                    data.len()
                )));
            }
            let dtype = Dtype::parse(dtype_name).ok_or_else(|| dtype_name.to_string());
            if let Ok(dtype) = dtype {
                let elements = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
                let expected = elements.and_then(|e| e.checked_mul(dtype.size()));
                if expected != Some(end - begin) {
                    return Err(bad(format!(
                        "tensor {name:?}: {} {shape:?} needs {} bytes, data_offsets give {}",
                        dtype.name(),
                        expected.map_or("too many".into(), |e| e.to_string()),
                        end - begin
                    )));
                }
            }
            file.tensors.insert(name, Tensor { dtype, shape, data: data[begin..end].to_vec() });
        }
        Ok(file)
    }

    /// Writes to `path`, which must not exist yet, through a temporary file and a rename.
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
        let temporary = temporary_path(path);
        let io = |e: std::io::Error| CliError::Io { path: temporary.clone(), error: e.to_string() };
        let result = (|| {
            let mut file = std::fs::File::create_new(&temporary).map_err(io)?;
            file.write_all(&(header_bytes.len() as u64).to_le_bytes()).map_err(io)?;
            file.write_all(&header_bytes).map_err(io)?;
            for tensor in self.tensors.values() {
                file.write_all(&tensor.data).map_err(io)?;
            }
            file.sync_all().map_err(io)?;
            if path.exists() {
                return Err(CliError::OutputExists { path: path.to_path_buf() });
            }
            std::fs::rename(&temporary, path)
                .map_err(|e| CliError::Io { path: path.to_path_buf(), error: e.to_string() })
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        result
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

fn temporary_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "output".into());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}
