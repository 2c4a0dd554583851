//! The safetensors format as this tool writes it: an 8-byte little-endian header length, a JSON
//! header `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`, then the
//! data, tensors with contiguous offsets. A file appears only when complete
//! (`atomic_output.rs`). Reading is `mapped.rs`.

use crate::error::CliError;
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
    /// Little-endian BF16, F16 or F32 bytes as f32, exactly (None for other dtypes).
    pub fn floats(self, data: &[u8]) -> Option<Vec<f32>> {
        let words = || data.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        Some(match self {
            Dtype::Bf16 => words().map(gemv_core::codec::bf16_to_f32).collect(),
            Dtype::F16 => words().map(|bits| gemv_core::half::f16::from_bits(bits).to_f32()).collect(),
            Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::U8 | Dtype::F8E4M3 => return None,
        })
    }

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

/// A safetensors file about to be written: its header, built and checked, and its size.
pub struct StreamedFile {
    header: Vec<u8>,
    len: u64,
}

impl StreamedFile {
    /// The file holding `layouts` in that order (and `metadata`); `path` names it in errors.
    pub fn new(path: &Path, metadata: Option<&serde_json::Value>, layouts: &[TensorLayout]) -> Result<Self, CliError> {
        let mut header = serde_json::Map::new();
        if let Some(metadata) = metadata {
            header.insert(RESERVED_NAME.into(), metadata.clone());
        }
        let mut offset = 0usize;
        for layout in layouts {
            check_tensor_name("tensor name", &layout.name)?;
            let end = offset.checked_add(layout.len).ok_or_else(|| CliError::BadOutput {
                path: path.to_path_buf(),
                reason: "its size does not fit in this machine's address space".into(),
            })?;
            header.insert(
                layout.name.clone(),
                serde_json::json!({"dtype": layout.dtype, "shape": layout.shape, "data_offsets": [offset, end]}),
            );
            offset = end;
        }
        let mut header = serde_json::to_vec(&serde_json::Value::Object(header))
            .map_err(|e| CliError::Io { path: path.to_path_buf(), error: e.to_string() })?;
        while header.len() % 8 != 0 {
            header.push(b' ');
        }
        let len = (8 + header.len() as u64).saturating_add(offset as u64);
        Ok(Self { header, len })
    }

    /// The file's bytes: header and data.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Writes the header, then the data `fill` produces, which must be exactly the bytes the
    /// layouts announce.
    pub fn write(&self, file: &mut File, fill: impl FnOnce(&mut File) -> std::io::Result<()>) -> std::io::Result<()> {
        file.write_all(&(self.header.len() as u64).to_le_bytes())?;
        file.write_all(&self.header)?;
        fill(file)?;
        let written = file.stream_position()?;
        if written != self.len {
            return Err(std::io::Error::other(format!(
                "wrote {written} bytes where the header announces {}",
                self.len
            )));
        }
        Ok(())
    }
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
    let streamed = StreamedFile::new(path, metadata, layouts)?;
    crate::atomic_output::write_new(path, |file| streamed.write(file, &fill))
}

/// The name the format keeps for the header's metadata.
const RESERVED_NAME: &str = "__metadata__";

/// Refuses a tensor name the format cannot hold: empty, or the name it keeps for metadata.
pub fn check_tensor_name(argument: &'static str, name: &str) -> Result<(), CliError> {
    let reason = if name.is_empty() {
        "a tensor name cannot be empty".to_string()
    } else if name == RESERVED_NAME {
        format!("{RESERVED_NAME:?} is the name safetensors keeps for the file's metadata, not a tensor")
    } else {
        return Ok(());
    };
    Err(CliError::BadArgument { argument, reason })
}

/// Checks, before any work, that an output can be created at `path`: it does not exist yet and
/// its directory does. The error names `path` itself, never the temporary file.
pub fn check_output_path(path: &Path) -> Result<(), CliError> {
    if path.symlink_metadata().is_ok() {
        return Err(CliError::OutputExists { path: path.to_path_buf() });
    }
    let directory = crate::atomic_output::parent_of(path);
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

    /// Every F16 code decodes to its exact value (normals, subnormals, zeros, infinities; NaN as
    /// NaN), and the other float dtypes as their own bits; packed dtypes are not floats.
    #[test]
    fn float_dtypes_decode_exactly() {
        let codes: Vec<u16> = (0..=u16::MAX).collect();
        let bytes: Vec<u8> = codes.iter().flat_map(|c| c.to_le_bytes()).collect();
        let values = Dtype::F16.floats(&bytes).expect("F16 is a float dtype");
        for (&code, &value) in codes.iter().zip(&values) {
            let (sign, exponent, mantissa) = (code >> 15, i32::from((code >> 10) & 0x1F), f64::from(code & 0x3FF));
            let magnitude = match exponent {
                0 => mantissa * 2f64.powi(-24),
                31 if mantissa == 0.0 => f64::INFINITY,
                31 => f64::NAN,
                e => (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
            };
            let expected = if sign == 1 { -magnitude } else { magnitude };
            assert!(
                (expected.is_nan() && value.is_nan())
                    || (f64::from(value) == expected && value.is_sign_negative() == (sign == 1)),
                "F16 {code:#06x}: {value} for {expected}"
            );
        }
        assert_eq!(Dtype::Bf16.floats(&[0x80, 0x3F]), Some(vec![1.0]));
        assert_eq!(Dtype::F32.floats(&1.5f32.to_le_bytes()), Some(vec![1.5]));
        assert_eq!(Dtype::U8.floats(&[1, 2]), None);
    }

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
