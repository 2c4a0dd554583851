//! Activations from a checkpoint: a BF16, F16 or F32 tensor `[K]`, `[M, K]` or `[..., K]`
//! (leading dimensions flattened into M), validated from its header and read row by row,
//! rounded to bf16 (RNE) with gemv-core's codec where it is not BF16 already.

use crate::checkpoint::{expect, header};
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::Dtype;
use gemv_core::codec::f32_to_bf16;

/// X as the header describes it, validated: rows are read on request, so X need not fit in
/// memory whole.
#[derive(Debug, Clone)]
pub struct ActivationsLocation {
    /// The tensor's name.
    pub name: String,
    /// Rows: the product of the leading dimensions (1 for a `[K]` tensor).
    pub m: usize,
    /// The dimensions before K (empty for `[K]`).
    pub leading: Vec<usize>,
    k: usize,
    dtype: Dtype,
}

impl ActivationsLocation {
    /// X's dtype in the file (BF16, F16 or F32).
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Rows `rows` of X as bf16 bits (BF16 as stored; F16 and F32 rounded to bf16, RNE).
    pub fn rows(&self, file: &MappedCheckpoint, rows: std::ops::Range<usize>) -> Result<Vec<u16>, CliError> {
        let width = match self.dtype {
            Dtype::F32 => 4,
            _ => 2,
        };
        let row_bytes = self.k * width;
        let bytes =
            file.bytes(&self.name, rows.start * row_bytes..rows.end * row_bytes).ok_or_else(|| CliError::Io {
                path: file.file_of(&self.name).to_path_buf(),
                error: format!("tensor {:?} could not be read (the file changed while open?)", self.name),
            })?;
        Ok(match self.dtype {
            Dtype::Bf16 => bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect(),
            other => other.floats(&bytes).unwrap_or_default().into_iter().map(f32_to_bf16).collect(),
        })
    }
}

/// Finds and validates X (`[K]`, `[M, K]` or `[..., K]`); reads none of its bytes. `name` None
/// takes `x`, or the file's only tensor.
pub fn locate_activations(
    file: &MappedCheckpoint,
    name: Option<&str>,
    k: usize,
) -> Result<ActivationsLocation, CliError> {
    let name = match name {
        Some(name) => name.to_string(),
        None if file.contains("x") || file.len() != 1 => "x".to_string(),
        None => file.names().next().unwrap_or("x").to_string(),
    };
    let x = header(file, &name, "the activations [..., K]; --input-name names another")?;
    let path = file.file_of(&name);
    let what = format!("a BF16, F16 or F32 tensor [{k}], [M, {k}] or [..., {k}]");
    expect(path, &name, &x, &[Dtype::Bf16, Dtype::F16, Dtype::F32], None, &what)?;
    let Some((&cols, leading)) = x.shape.split_last() else {
        return Err(CliError::BadTensor {
            path: path.to_path_buf(),
            name,
            expected: what,
            found: format!("a scalar {:?}", x.shape),
        });
    };
    let m = leading.iter().product::<usize>();
    let dtype = x.dtype.clone().unwrap_or(Dtype::U8);
    if cols != k || m == 0 {
        return Err(CliError::BadTensor {
            path: path.to_path_buf(),
            name,
            expected: what,
            found: format!("{} {:?}", dtype.name(), x.shape),
        });
    }
    Ok(ActivationsLocation { name, m, leading: leading.to_vec(), k, dtype })
}
