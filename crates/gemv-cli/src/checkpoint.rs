//! NVFP4 weights from checkpoint tensors, in either layout (ModelOpt or compressed-tensors),
//! detected from the names present (`gemv_core::Nvfp4TensorNames`). `--name` is the prefix; the
//! weight tensor's own name (`PREFIX.weight`, `PREFIX.weight_packed`) is accepted too. The
//! header checks here serve the activations too (`crate::activations`).

use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::Dtype;
use gemv_core::{Nvfp4Layout, Nvfp4Matrix, Nvfp4TensorNames};
use std::path::Path;

fn present(file: &MappedCheckpoint) -> String {
    let names: Vec<&str> = file.names().take(8).collect();
    let more = file.len().saturating_sub(names.len());
    if more > 0 { format!("{} and {more} more", names.join(", ")) } else { names.join(", ") }
}

/// A tensor's dtype and shape from the header, without its bytes.
pub(crate) struct Header {
    /// Its dtype, or the header's name for one this tool does not read.
    pub(crate) dtype: Result<Dtype, String>,
    /// Its shape.
    pub(crate) shape: Vec<usize>,
}

/// The header of tensor `name`, or an error saying `why` it was wanted and what the file holds.
pub(crate) fn header(file: &MappedCheckpoint, name: &str, why: &str) -> Result<Header, CliError> {
    let layout = file.layout(name).ok_or_else(|| CliError::MissingTensor {
        path: file.path().to_path_buf(),
        name: name.to_string(),
        why: why.to_string(),
        present: present(file),
    })?;
    Ok(Header { dtype: Dtype::parse(&layout.dtype).ok_or(layout.dtype), shape: layout.shape })
}

/// Ok where the tensor has one of `dtypes` (and `shape`, where given); else an error saying
/// `what` was expected and what was found.
pub(crate) fn expect(
    path: &Path,
    name: &str,
    tensor: &Header,
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
fn global_f32(file: &MappedCheckpoint, name: &str, expert: Option<(usize, usize)>) -> Result<f32, CliError> {
    let path = file.file_of(name);
    let tensor = header(file, name, "the FP32 global scale")?;
    expect(path, name, &tensor, &[Dtype::F32], None, "an F32 scalar")?;
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
    let bytes = file.bytes(name, 4 * index..4 * index + 4).unwrap_or_default();
    let bytes: [u8; 4] = bytes.try_into().map_err(|_| CliError::BadTensor {
        path: path.to_path_buf(),
        name: name.to_string(),
        expected: "4 bytes per F32 value".into(),
        found: format!("F32 {:?}", tensor.shape),
    })?;
    Ok(f32::from_le_bytes(bytes))
}

/// The tensor names of the layer `name` stands for, and its layout.
fn layer_names(file: &MappedCheckpoint, name: &str) -> (Nvfp4Layout, String, String, String) {
    let names = Nvfp4TensorNames::resolve(name, |tensor| file.contains(tensor));
    (names.layout, names.packed, names.scales, names.global_scale)
}

/// How many experts the layer holds: None for a 2-D `[N, K/2]` weight, Some(E) for a 3-D
/// `[E, N, K/2]` expert tensor (a mixture-of-experts layer stored as one tensor).
pub fn expert_count(file: &MappedCheckpoint, name: &str) -> Result<Option<usize>, CliError> {
    let (_, packed_name, _, _) = layer_names(file, name);
    let packed = header(file, &packed_name, "the packed E2M1 weights, U8 [N, K/2] or [E, N, K/2]")?;
    Ok(match packed.shape[..] {
        [experts, _, _] => Some(experts),
        _ => None,
    })
}

/// A layer's NVFP4 weights as the headers describe them, validated, with the global scale read:
/// everything but the bytes, so their size can be checked before they are copied.
#[derive(Debug, Clone)]
pub struct WeightsLocation {
    /// The layout the names were found in.
    pub layout: Nvfp4Layout,
    packed_name: String,
    scale_name: String,
    /// Output features.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// The expert of a 3-D tensor (0 for a 2-D weight).
    expert: usize,
    global_scale: f32,
}

impl WeightsLocation {
    /// The bytes [`Self::read`] copies: packed nibbles and block scales.
    pub fn bytes(&self) -> Option<u64> {
        let weights = (self.n as u64).checked_mul(self.k as u64)?;
        Some(weights / 2 + weights / 16)
    }

    /// Copies the weights out of the checkpoint.
    pub fn read(&self, file: &MappedCheckpoint) -> Result<Nvfp4Matrix, CliError> {
        let (n, k, e) = (self.n, self.k, self.expert);
        let (packed_len, scales_len) = (n * k / 2, n * k / 16);
        let path = file.file_of(&self.packed_name);
        let vanished = |name: &str| CliError::Io {
            path: path.to_path_buf(),
            error: format!("tensor {name:?} could not be read (the file changed while open?)"),
        };
        let packed = file
            .bytes(&self.packed_name, e * packed_len..(e + 1) * packed_len)
            .ok_or_else(|| vanished(&self.packed_name))?;
        let scales = file
            .bytes(&self.scale_name, e * scales_len..(e + 1) * scales_len)
            .ok_or_else(|| vanished(&self.scale_name))?;
        Nvfp4Matrix::from_parts(packed, scales, self.global_scale, n, k).map_err(|error| CliError::BadTensor {
            path: path.to_path_buf(),
            name: self.packed_name.clone(),
            expected: "a valid NVFP4 matrix".into(),
            found: error.to_string(),
        })
    }
}

/// Finds and validates the NVFP4 weights named by `name` (a prefix, or the weight tensor's own
/// name); for a 3-D expert tensor, `expert` picks one. Reads no weight bytes.
pub fn locate_weights(file: &MappedCheckpoint, name: &str, expert: Option<usize>) -> Result<WeightsLocation, CliError> {
    let (layout, packed_name, scale_name, global_name) = layer_names(file, name);
    let packed = header(file, &packed_name, "the packed E2M1 weights, U8 [N, K/2]")?;
    let path = file.file_of(&packed_name);
    if let Ok(dtype @ (Dtype::Bf16 | Dtype::F16 | Dtype::F32)) = packed.dtype {
        return Err(CliError::BadTensor {
            path: path.to_path_buf(),
            name: packed_name.clone(),
            expected: format!(
                "U8 [N, K/2] (packed E2M1 pairs); this layer is still {}: quantize the checkpoint to NVFP4 first \
                 (`gemv quantize --input {} --output nvfp4.safetensors`)",
                dtype.name(),
                file.path().display()
            ),
            found: format!("{} {:?}", dtype.name(), packed.shape),
        });
    }
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
    let scales = header(file, &scale_name, "the E4M3 block scales, F8_E4M3 [N, K/16]")?;
    let scale_shape: Vec<usize> = experts.map(|(_, e)| e).into_iter().chain([n, k / 16]).collect();
    expect(
        file.file_of(&scale_name),
        &scale_name,
        &scales,
        &[Dtype::F8E4M3],
        Some(&scale_shape),
        &format!("F8_E4M3 {scale_shape:?} (K/16 for K = {k})"),
    )?;
    let global_scale = layout.global_scale(global_f32(file, &global_name, experts)?);
    Ok(WeightsLocation { layout, packed_name, scale_name, n, k, expert: experts.map_or(0, |(e, _)| e), global_scale })
}
