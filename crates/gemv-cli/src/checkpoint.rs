//! NVFP4 weights from checkpoint tensors, in either layout, detected from the names present:
//!
//! - NVIDIA ModelOpt: `PREFIX.weight` (U8 [N, K/2]), `PREFIX.weight_scale` (F8_E4M3 [N, K/16]),
//!   `PREFIX.weight_scale_2` (F32 scalar, a multiplier);
//! - compressed-tensors: `PREFIX.weight_packed`, `PREFIX.weight_scale`,
//!   `PREFIX.weight_global_scale` (F32 scalar, a DIVISOR: inverted here).
//!
//! `--name` is the prefix; the weight tensor's own name (`PREFIX.weight`, `PREFIX.weight_packed`)
//! is accepted too.
//!
//! And activations: a BF16, F16 or F32 tensor `[K]`, `[M, K]` or `[..., K]` (leading dimensions
//! flattened into M; rounded to bf16, RNE).

use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::{Dtype, Tensor};
use gemv_core::Nvfp4Matrix;
use gemv_core::codec::f32_to_bf16;
use std::path::Path;

/// Which layout a prefix was read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// NVIDIA ModelOpt names.
    ModelOpt,
    /// compressed-tensors names (global scale inverted).
    CompressedTensors,
}

fn present(file: &MappedCheckpoint) -> String {
    let names: Vec<&str> = file.names().take(8).collect();
    let more = file.len().saturating_sub(names.len());
    if more > 0 { format!("{} and {more} more", names.join(", ")) } else { names.join(", ") }
}

fn tensor(file: &MappedCheckpoint, name: &str, why: &str) -> Result<Tensor, CliError> {
    file.tensor(name).ok_or_else(|| CliError::MissingTensor {
        path: file.path().to_path_buf(),
        name: name.to_string(),
        why: why.to_string(),
        present: present(file),
    })
}

fn expect(
    path: &Path,
    name: &str,
    tensor: &Tensor,
    dtypes: &[Dtype],
    shape: Option<&[usize]>,
    what: &str,
) -> Result<(), CliError> {
    let dtype_ok = tensor.dtype.as_ref().is_ok_and(|d| dtypes.contains(d));
    let shape_ok = shape.is_none_or(|s| s == tensor.shape.as_slice());
    if dtype_ok && shape_ok {
        return Ok(());
    }
    let dtype = tensor.dtype.as_ref().map(|d| d.name().to_string()).unwrap_or_else(|other| other.clone());
    Err(CliError::BadTensor {
        path: path.to_path_buf(),
        name: name.to_string(),
        expected: what.to_string(),
        found: format!("{dtype} {:?}", tensor.shape),
    })
}

/// The global scale: an F32 scalar, or for a 3-D expert tensor also one value per expert (`[E]`).
fn global_f32(path: &Path, name: &str, tensor: &Tensor, expert: Option<(usize, usize)>) -> Result<f32, CliError> {
    expect(path, name, tensor, &[Dtype::F32], None, "an F32 scalar")?;
    let scalar = tensor.shape.iter().product::<usize>() == 1 && tensor.shape.len() <= 1;
    let index = match expert {
        _ if scalar => 0,
        Some((e, experts)) if tensor.shape == [experts] => e,
        _ => {
            return Err(CliError::BadTensor {
                path: path.to_path_buf(),
                name: name.to_string(),
                expected: match expert {
                    Some((_, experts)) => format!("an F32 scalar or one value per expert [{experts}]"),
                    None => "an F32 scalar (shape [] or [1])".into(),
                },
                found: format!("F32 {:?}", tensor.shape),
            });
        }
    };
    let bytes = &tensor.data[4 * index..4 * index + 4];
    Ok(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// The prefix `name` stands for: itself, or with the weight tensor's suffix taken off.
fn weight_prefix<'a>(file: &MappedCheckpoint, name: &'a str) -> &'a str {
    let has =
        |prefix: &str| file.contains(&format!("{prefix}.weight")) || file.contains(&format!("{prefix}.weight_packed"));
    if has(name) {
        return name;
    }
    [".weight", ".weight_packed"].iter().filter_map(|suffix| name.strip_suffix(suffix)).find(|p| has(p)).unwrap_or(name)
}

/// The tensor names of the layer `name` stands for, and its layout.
fn layer_names(file: &MappedCheckpoint, name: &str) -> (Layout, String, String, String) {
    let prefix = weight_prefix(file, name);
    let scale_name = format!("{prefix}.weight_scale");
    if file.contains(&format!("{prefix}.weight_packed")) {
        let (packed, global) = (format!("{prefix}.weight_packed"), format!("{prefix}.weight_global_scale"));
        (Layout::CompressedTensors, packed, scale_name, global)
    } else {
        (Layout::ModelOpt, format!("{prefix}.weight"), scale_name, format!("{prefix}.weight_scale_2"))
    }
}

/// How many experts the layer holds: None for a 2-D `[N, K/2]` weight, Some(E) for a 3-D
/// `[E, N, K/2]` expert tensor (a mixture-of-experts layer stored as one tensor).
pub fn expert_count(file: &MappedCheckpoint, name: &str) -> Result<Option<usize>, CliError> {
    let (_, packed_name, _, _) = layer_names(file, name);
    let packed = tensor(file, &packed_name, "the packed E2M1 weights, U8 [N, K/2] or [E, N, K/2]")?;
    Ok(match packed.shape[..] {
        [experts, _, _] => Some(experts),
        _ => None,
    })
}

/// Reads the NVFP4 weights named by `name` (a prefix, or the weight tensor's own name); for a
/// 3-D expert tensor, `expert` picks one.
pub fn read_weights(
    file: &MappedCheckpoint,
    name: &str,
    expert: Option<usize>,
) -> Result<(Nvfp4Matrix, Layout), CliError> {
    let (layout, packed_name, scale_name, global_name) = layer_names(file, name);
    let packed = tensor(file, &packed_name, "the packed E2M1 weights, U8 [N, K/2]")?;
    let path = file.file_of(&packed_name);
    expect(path, &packed_name, &packed, &[Dtype::U8], None, "U8 [N, K/2] (packed E2M1 pairs)")?;
    let bad_packed = |expected: &str| CliError::BadTensor {
        path: path.to_path_buf(),
        name: packed_name.clone(),
        expected: expected.into(),
        found: format!("U8 {:?}", packed.shape),
    };
    let (experts, n, half_k) = match (packed.shape.as_slice(), expert) {
        (&[n, half_k], None) => (None, n, half_k),
        (&[experts, n, half_k], Some(e)) if e < experts => (Some((e, experts)), n, half_k),
        (&[experts, _, _], Some(e)) => return Err(bad_packed(&format!("expert {e} of a tensor of {experts} experts"))),
        (&[experts, _, _], None) => {
            return Err(bad_packed(&format!("a 2-D weight; this one holds {experts} experts: pick one with --expert")));
        }
        (&[_, _], Some(_)) => return Err(bad_packed("a 3-D expert tensor [E, N, K/2] (--expert was given)")),
        _ => return Err(bad_packed("rank 2: U8 [N, K/2] (or rank 3 [E, N, K/2] with --expert)")),
    };
    let k = 2 * half_k;
    if n == 0 || k == 0 || k % 16 != 0 {
        return Err(CliError::BadTensor {
            path: path.to_path_buf(),
            name: packed_name.clone(),
            expected: "N >= 1 and K = 2 x (last dimension) a positive multiple of 16".into(),
            found: format!("U8 {:?} (K = {k})", packed.shape),
        });
    }
    let scales = tensor(file, &scale_name, "the E4M3 block scales, F8_E4M3 [N, K/16]")?;
    let scale_shape: Vec<usize> = experts.map(|(_, e)| e).into_iter().chain([n, k / 16]).collect();
    expect(
        file.file_of(&scale_name),
        &scale_name,
        &scales,
        &[Dtype::F8E4M3],
        Some(&scale_shape),
        &format!("F8_E4M3 {scale_shape:?} (K/16 for K = {k})"),
    )?;
    let global = tensor(file, &global_name, "the FP32 global scale")?;
    let mut global_scale = global_f32(file.file_of(&global_name), &global_name, &global, experts)?;
    if layout == Layout::CompressedTensors {
        global_scale = 1.0 / global_scale;
    }
    // One expert's slice of the packed bytes and scales (the whole tensor for a 2-D weight).
    let e = experts.map_or(0, |(e, _)| e);
    let (packed_len, scales_len) = (n * k / 2, n * k / 16);
    let packed = packed.data[e * packed_len..(e + 1) * packed_len].to_vec();
    let scales = scales.data[e * scales_len..(e + 1) * scales_len].to_vec();
    let matrix = Nvfp4Matrix::from_parts(packed, scales, global_scale, n, k).map_err(|e| CliError::BadTensor {
        path: path.to_path_buf(),
        name: packed_name.clone(),
        expected: "a valid NVFP4 matrix".into(),
        found: e.to_string(),
    })?;
    Ok((matrix, layout))
}

/// f16 bits to f32, exactly.
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits >> 15) << 31;
    let exponent = u32::from((bits >> 10) & 0x1F);
    let mantissa = u32::from(bits & 0x3FF);
    let magnitude = match (exponent, mantissa) {
        (0, 0) => 0,
        (0, m) => {
            let value = m as f32 * 2f32.powi(-24); // subnormal: exact in f32
            return if sign != 0 { -value } else { value };
        }
        (0x1F, 0) => 0x7F80_0000,
        (0x1F, m) => 0x7FC0_0000 | (m << 13),
        (e, m) => ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(sign | magnitude)
}

/// Float values of a tensor (BF16, F16 or F32) as f32.
pub fn to_f32(tensor: &Tensor) -> Option<Vec<f32>> {
    let words2 = || tensor.data.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    Some(match tensor.dtype.as_ref().ok()? {
        Dtype::Bf16 => words2().map(gemv_core::codec::bf16_to_f32).collect(),
        Dtype::F16 => words2().map(f16_to_f32).collect(),
        Dtype::F32 => tensor.data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        Dtype::U8 | Dtype::F8E4M3 => return None,
    })
}

/// X as read: bf16 bits, M, and the leading dimensions (Y's shape is these plus N).
pub struct Activations {
    /// `[M][K]` bf16 bits.
    pub bits: Vec<u16>,
    /// Rows: the product of the leading dimensions (1 for a `[K]` tensor).
    pub m: usize,
    /// The dimensions before K (empty for `[K]`).
    pub leading: Vec<usize>,
    /// The tensor's name.
    pub name: String,
}

/// Reads X (`[K]`, `[M, K]` or `[..., K]`) as bf16 bits. `name` None takes `x`, or the file's only
/// tensor.
pub fn read_activations(file: &MappedCheckpoint, name: Option<&str>, k: usize) -> Result<Activations, CliError> {
    let name = match name {
        Some(name) => name.to_string(),
        None if file.contains("x") || file.len() != 1 => "x".to_string(),
        None => file.names().next().unwrap_or("x").to_string(),
    };
    let x = tensor(file, &name, "the activations [..., K]; --input-name names another")?;
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
    if cols != k || m == 0 {
        let dtype = x.dtype.as_ref().map(|d| d.name()).unwrap_or("?");
        return Err(CliError::BadTensor {
            path: path.to_path_buf(),
            name,
            expected: what,
            found: format!("{dtype} {:?}", x.shape),
        });
    }
    let bits = match x.dtype {
        Ok(Dtype::Bf16) => x.data.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect(),
        _ => to_f32(&x).unwrap_or_default().into_iter().map(f32_to_bf16).collect(),
    };
    Ok(Activations { bits, m, leading: leading.to_vec(), name })
}
