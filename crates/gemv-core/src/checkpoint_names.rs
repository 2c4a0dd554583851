//! Where a checkpoint keeps one NVFP4 linear layer: the tensor names of the two layouts in use,
//! and what their global scale means.
//!
//! - NVIDIA ModelOpt: `PREFIX.weight` (U8 `[N, K/2]`), `PREFIX.weight_scale` (F8_E4M3
//!   `[N, K/16]`), `PREFIX.weight_scale_2` (F32 scalar, a multiplier);
//! - compressed-tensors: `PREFIX.weight_packed`, `PREFIX.weight_scale`,
//!   `PREFIX.weight_global_scale` (F32 scalar, a divisor).

/// The naming convention a layer is stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nvfp4Layout {
    /// NVIDIA ModelOpt's export.
    ModelOpt,
    /// compressed-tensors (vLLM's loader format).
    CompressedTensors,
}

impl Nvfp4Layout {
    /// The names of the packed weights, the block scales and the global scale under a layer's
    /// prefix.
    pub fn tensor_suffixes(self) -> [&'static str; 3] {
        match self {
            Self::ModelOpt => ["weight", "weight_scale", "weight_scale_2"],
            Self::CompressedTensors => ["weight_packed", "weight_scale", "weight_global_scale"],
        }
    }

    /// The global scale the contract multiplies by, from the stored value: ModelOpt stores the
    /// multiplier, compressed-tensors its reciprocal.
    pub fn global_scale(self, stored: f32) -> f32 {
        match self {
            Self::ModelOpt => stored,
            Self::CompressedTensors => 1.0 / stored,
        }
    }
}

/// The three tensors of one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nvfp4TensorNames {
    /// Which convention the names follow.
    pub layout: Nvfp4Layout,
    /// Packed E2M1 pairs, U8 `[N, K/2]` (or `[E, N, K/2]` for experts stored as one tensor).
    pub packed: String,
    /// E4M3 block scales, `[N, K/16]`.
    pub scales: String,
    /// The FP32 global scale, stored as [`Nvfp4Layout::global_scale`] reads it.
    pub global_scale: String,
}

impl Nvfp4TensorNames {
    /// The names of the layer `name` stands for: a prefix, or the weight tensor's own name
    /// (`PREFIX.weight`, `PREFIX.weight_packed`). `contains` says whether the checkpoint holds a
    /// tensor; a prefix whose `weight_packed` exists is compressed-tensors, any other ModelOpt
    /// (the names of a missing layer are ModelOpt's, for the caller's error).
    pub fn resolve(name: &str, contains: impl Fn(&str) -> bool) -> Self {
        let has = |prefix: &str| contains(&format!("{prefix}.weight")) || contains(&format!("{prefix}.weight_packed"));
        let prefix = if has(name) {
            name
        } else {
            [".weight", ".weight_packed"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|prefix| has(prefix))
                .unwrap_or(name)
        };
        let layout = if contains(&format!("{prefix}.weight_packed")) {
            Nvfp4Layout::CompressedTensors
        } else {
            Nvfp4Layout::ModelOpt
        };
        let [packed, scales, global_scale] = layout.tensor_suffixes().map(|suffix| format!("{prefix}.{suffix}"));
        Self { layout, packed, scales, global_scale }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_resolve_from_a_prefix_or_the_weights_own_name() {
        let modelopt = ["l.weight", "l.weight_scale", "l.weight_scale_2"];
        let compressed = ["c.weight_packed", "c.weight_scale", "c.weight_global_scale"];
        let contains = |name: &str| modelopt.contains(&name) || compressed.contains(&name);
        for name in ["l", "l.weight"] {
            let names = Nvfp4TensorNames::resolve(name, contains);
            assert_eq!(names.layout, Nvfp4Layout::ModelOpt, "{name}");
            assert_eq!([names.packed.as_str(), &names.scales, &names.global_scale], modelopt, "{name}");
        }
        for name in ["c", "c.weight_packed"] {
            let names = Nvfp4TensorNames::resolve(name, contains);
            assert_eq!(names.layout, Nvfp4Layout::CompressedTensors, "{name}");
            assert_eq!([names.packed.as_str(), &names.scales, &names.global_scale], compressed, "{name}");
        }
        assert_eq!(Nvfp4TensorNames::resolve("missing", contains).packed, "missing.weight");
    }

    #[test]
    fn compressed_tensors_store_the_reciprocal() {
        assert_eq!(Nvfp4Layout::ModelOpt.global_scale(0.25), 0.25);
        assert_eq!(Nvfp4Layout::CompressedTensors.global_scale(4.0), 0.25);
    }
}
