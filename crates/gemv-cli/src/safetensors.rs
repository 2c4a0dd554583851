//! The safetensors format as this tool writes it: an 8-byte little-endian header length, a JSON
//! header `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`, then the
//! data, tensors in name order with contiguous offsets. Writing goes to a temporary file in the
//! target's directory, then a rename: nothing is ever half-written. Reading is `mapped.rs`.

use crate::error::CliError;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek, Write};
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

/// One output tensor as the header describes it, before its bytes exist.
#[derive(Debug, Clone)]
pub struct TensorLayout {
    /// Its name.
    pub name: String,
    /// Its dtype's name in the header.
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its bytes.
    pub len: usize,
}

/// Writes `path` (which must not exist; it appears only when complete): the header for
/// `layouts`, then their bytes in that order, produced by `fill`, so a caller can hold one
/// tensor in memory at a time. `fill` must write exactly the bytes the layouts announce.
pub fn write_streamed(
    path: &Path,
    metadata: Option<&serde_json::Value>,
    layouts: &[TensorLayout],
    fill: impl Fn(&mut File) -> std::io::Result<()>,
) -> Result<(), CliError> {
    check_output_path(path)?;
    let mut header = serde_json::Map::new();
    if let Some(metadata) = metadata {
        header.insert("__metadata__".into(), metadata.clone());
    }
    let mut offset = 0usize;
    for layout in layouts {
        header.insert(
            layout.name.clone(),
            serde_json::json!({"dtype": layout.dtype, "shape": layout.shape, "data_offsets": [offset, offset + layout.len]}),
        );
        offset += layout.len;
    }
    let mut header_bytes = serde_json::to_vec(&serde_json::Value::Object(header))
        .map_err(|e| CliError::Io { path: path.to_path_buf(), error: e.to_string() })?;
    while header_bytes.len() % 8 != 0 {
        header_bytes.push(b' ');
    }
    let expected = (8 + header_bytes.len() + offset) as u64;
    crate::atomic_output::write_new(path, |file| {
        file.write_all(&(header_bytes.len() as u64).to_le_bytes())?;
        file.write_all(&header_bytes)?;
        fill(file)?;
        let written = file.stream_position()?;
        if written != expected {
            return Err(std::io::Error::other(format!("wrote {written} bytes where the header announces {expected}")));
        }
        Ok(())
    })
}

impl SafeTensors {
    /// Writes to `path`, which must not exist yet; it appears only when complete.
    pub fn write_new(&self, path: &Path) -> Result<(), CliError> {
        let layouts: Vec<TensorLayout> = self
            .tensors
            .iter()
            .map(|(name, tensor)| TensorLayout {
                name: name.clone(),
                dtype: tensor.dtype.as_ref().map(|d| d.name().to_string()).unwrap_or_else(|other| other.clone()),
                shape: tensor.shape.clone(),
                len: tensor.data.len(),
            })
            .collect();
        write_streamed(path, self.metadata.as_ref(), &layouts, |file| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_file_must_hold_exactly_the_bytes_its_header_announces() {
        let dir = std::env::temp_dir().join(format!("gemv-streamed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let layouts = [
            TensorLayout { name: "a".into(), dtype: "U8".into(), shape: vec![3], len: 3 },
            TensorLayout { name: "b".into(), dtype: "F32".into(), shape: vec![], len: 4 },
        ];
        let good = dir.join("good.safetensors");
        write_streamed(&good, None, &layouts, |file| {
            file.write_all(&[1, 2, 3])?;
            file.write_all(&1.5f32.to_le_bytes())
        })
        .expect("written");
        // The reference parser accepts it and finds the bytes where the header says.
        let bytes = std::fs::read(&good).expect("read");
        let parsed = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
        assert_eq!(parsed.tensor("a").expect("a").data(), &[1, 2, 3]);
        assert_eq!(parsed.tensor("b").expect("b").data(), &1.5f32.to_le_bytes());
        // One byte short: an error, and no file.
        let short = dir.join("short.safetensors");
        let result = write_streamed(&short, None, &layouts, |file| file.write_all(&[1, 2, 3, 0, 0, 0]));
        assert!(matches!(result, Err(CliError::Io { ref error, .. }) if error.contains("announces")), "{result:?}");
        assert!(!short.exists());
    }
}
