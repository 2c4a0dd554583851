//! Loading a layer: from a safetensors checkpoint in ModelOpt's or compressed-tensors' layout
//! (`gemv_core::Nvfp4TensorNames` decides which from the names present), or from tensors.

use crate::linear::Nvfp4Linear;
use candle_core::safetensors::{BufferedSafetensors, MmapedSafetensors, SliceSafetensors};
use candle_core::{CpuStorage, DType, Device, Result, Storage, Tensor, bail};
use candle_nn::VarBuilder;
use gemv_core::{Nvfp4Layout, Nvfp4Matrix, Nvfp4TensorNames};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// A safetensors checkpoint a layer can be read from: candle's memory-mapped, borrowed or owned
/// one (a memory-mapped checkpoint of several shards included).
pub trait TensorSource {
    /// The tensor `name`, or `None` when the checkpoint has none.
    fn tensor_view(&self, name: &str) -> Option<TensorView<'_>>;
}

impl TensorSource for MmapedSafetensors {
    fn tensor_view(&self, name: &str) -> Option<TensorView<'_>> {
        self.get(name).ok()
    }
}

impl TensorSource for SliceSafetensors<'_> {
    fn tensor_view(&self, name: &str) -> Option<TensorView<'_>> {
        self.get(name).ok()
    }
}

impl TensorSource for BufferedSafetensors {
    fn tensor_view(&self, name: &str) -> Option<TensorView<'_>> {
        self.get(name).ok()
    }
}

/// `name`'s view, of one of `dtypes` and (where given) shape `shape`.
fn checked<'a>(
    source: &'a impl TensorSource,
    name: &str,
    dtypes: &[Dtype],
    shape: Option<&[usize]>,
    what: &str,
) -> Result<TensorView<'a>> {
    let Some(view) = source.tensor_view(name) else {
        bail!("gemv-candle: no tensor {name:?} ({what}) in the checkpoint");
    };
    if !dtypes.contains(&view.dtype()) || shape.is_some_and(|shape| shape != view.shape()) {
        bail!("gemv-candle: tensor {name:?} should be {what}, found {:?} {:?}", view.dtype(), view.shape());
    }
    Ok(view)
}

impl Nvfp4Linear {
    /// Reads the layer `name` (its prefix, e.g. `model.layers.0.mlp.up_proj`, or its weight
    /// tensor's name) from a checkpoint in ModelOpt's layout (`.weight`, `.weight_scale`,
    /// `.weight_scale_2`) or compressed-tensors' (`.weight_packed`, `.weight_scale`,
    /// `.weight_global_scale`, a divisor), validates it and places it on `device`.
    pub fn from_safetensors(source: &impl TensorSource, name: &str, device: &Device) -> Result<Self> {
        let names = Nvfp4TensorNames::resolve(name, |tensor| source.tensor_view(tensor).is_some());
        let packed = checked(source, &names.packed, &[Dtype::U8], None, "U8 [N, K/2], the packed E2M1 pairs")?;
        let &[n, half_k] = packed.shape() else {
            bail!("gemv-candle: tensor {:?} should be U8 [N, K/2], found {:?}", names.packed, packed.shape());
        };
        let k = 2 * half_k;
        let scales_what = format!("F8_E4M3 [{n}, {}], the block scales", k / 16);
        let scales = checked(source, &names.scales, &[Dtype::F8_E4M3, Dtype::U8], Some(&[n, k / 16]), &scales_what)?;
        let global = checked(source, &names.global_scale, &[Dtype::F32], None, "an F32 scalar, the global scale")?;
        let Ok(bytes) = <[u8; 4]>::try_from(global.data()) else {
            bail!("gemv-candle: tensor {:?} should be one F32, found {:?}", names.global_scale, global.shape());
        };
        let global_scale = names.layout.global_scale(f32::from_le_bytes(bytes));
        let matrix = Nvfp4Matrix::from_parts(packed.data().to_vec(), scales.data().to_vec(), global_scale, n, k)
            .map_err(|e| candle_core::Error::Msg(format!("gemv-candle: layer {name:?}: {e}")))?;
        Self::new(&matrix, device)
    }

    /// A layer from its tensors, e.g. as a `VarBuilder` hands them out: `packed` U8
    /// `[N, K/2]`, `scales` F8E4M3 (or their codes as U8) `[N, K/16]`, and the global scale the
    /// products are multiplied by (ModelOpt's `weight_scale_2`; for compressed-tensors, one
    /// over `weight_global_scale`: `Nvfp4Layout::global_scale` converts).
    pub fn from_tensors(packed: &Tensor, scales: &Tensor, global_scale: f32, device: &Device) -> Result<Self> {
        let (n, half_k) = packed.dims2()?;
        let k = 2 * half_k;
        if packed.dtype() != DType::U8 {
            bail!("gemv-candle: the packed weights should be U8 [N, K/2], found {:?}", packed.dtype());
        }
        if scales.dims2()? != (n, k / 16) {
            bail!("gemv-candle: the scales should be [{n}, {}], found {:?}", k / 16, scales.shape());
        }
        let packed = packed.flatten_all()?.to_vec1::<u8>()?;
        let scales = scale_codes(scales)?;
        let matrix = Nvfp4Matrix::from_parts(packed, scales, global_scale, n, k)
            .map_err(|e| candle_core::Error::Msg(format!("gemv-candle: {e}")))?;
        Self::new(&matrix, device)
    }
}

/// The layer under `vb`'s path, as `candle_nn::linear_no_bias(in_features, out_features, vb)`
/// loads a dense one: ModelOpt's tensors (`weight`, `weight_scale`, `weight_scale_2`) or
/// compressed-tensors' (`weight_packed`, `weight_scale`, `weight_global_scale`, a divisor),
/// placed on `vb`'s device.
pub fn nvfp4_linear(in_features: usize, out_features: usize, vb: VarBuilder) -> Result<Nvfp4Linear> {
    let (n, k) = (out_features, in_features);
    if k % 16 != 0 {
        bail!("gemv-candle: in_features must be a multiple of 16, found {k}");
    }
    let layout =
        if vb.contains_tensor("weight_packed") { Nvfp4Layout::CompressedTensors } else { Nvfp4Layout::ModelOpt };
    let [packed_name, scales_name, global_name] = layout.tensor_suffixes();
    let packed = vb.get_with_hints_dtype((n, k / 2), packed_name, Default::default(), DType::U8)?;
    let scales = vb.get_with_hints_dtype((n, k / 16), scales_name, Default::default(), DType::F8E4M3)?;
    let global = vb.get_unchecked_dtype(global_name, DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let &[global] = global.as_slice() else {
        bail!("gemv-candle: {global_name} should be one F32, found {} values", global.len());
    };
    Nvfp4Linear::from_tensors(&packed, &scales, layout.global_scale(global), vb.device())
}

/// The E4M3 codes of a scales tensor: F8E4M3 values' bits, or U8 codes as they are.
fn scale_codes(scales: &Tensor) -> Result<Vec<u8>> {
    match scales.dtype() {
        DType::U8 => scales.flatten_all()?.to_vec1::<u8>(),
        DType::F8E4M3 => {
            let scales = scales.to_device(&Device::Cpu)?.contiguous()?;
            let (storage, layout) = scales.storage_and_layout();
            let Storage::Cpu(CpuStorage::F8E4M3(values)) = &*storage else {
                bail!("gemv-candle: F8E4M3 scales not in CPU storage");
            };
            let start = layout.start_offset();
            Ok(values[start..start + scales.elem_count()].iter().map(|value| value.to_bits()).collect())
        }
        other => bail!("gemv-candle: the scales should be F8E4M3 (or U8 codes), found {other:?}"),
    }
}
