//! Which tensors `gemv quantize` quantizes, and which share a global scale: by default every
//! 2-D float tensor whose K is a multiple of 16, less the output head, the embeddings and what
//! `--exclude` names; the projections an engine fuses share one global scale.

use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::Dtype;

/// Left unquantized unless named in `--names`, as ModelOpt leaves them: the output head, the
/// embeddings, and a mixture of experts' routers (`mlp.gate`, not `gate_proj`; Mixtral's
/// `block_sparse_moe.gate`; Qwen's `shared_expert_gate`; any `router`), whose logits pick the
/// experts. The experts themselves (`experts.{i}.gate_proj`, ...) are quantized like any
/// projection, each expert's gate and up sharing a global scale.
pub const DEFAULT_EXCLUDES: [&str; 6] =
    ["*lm_head*", "*embed*", "*mlp.gate.*", "*block_sparse_moe.gate*", "*shared_expert_gate*", "*router*"];

/// Projection names that engines fuse into one GEMM, by the fused group they belong to.
const FUSED: [(&str, &[&str]); 2] = [("qkv", &["q_proj", "k_proj", "v_proj"]), ("gate_up", &["gate_proj", "up_proj"])];

/// `*` matches any run of characters (including none); everything else matches itself.
pub fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The fused group a weight belongs to: (parent, group), e.g. `layers.0.self_attn` and `qkv`
/// for `layers.0.self_attn.k_proj.weight`.
pub fn fused_group(name: &str) -> Option<(String, &'static str)> {
    let module = name.strip_suffix(".weight").unwrap_or(name);
    let (parent, leaf) = module.rsplit_once('.')?;
    FUSED.iter().find(|(_, members)| members.contains(&leaf)).map(|(group, _)| (parent.to_string(), *group))
}

/// One tensor to quantize, validated: its name, N, K and input dtype.
pub struct Planned {
    /// Its name.
    pub name: String,
    /// Rows.
    pub n: usize,
    /// Columns.
    pub k: usize,
    /// Its dtype in the input.
    pub dtype: Dtype,
}

impl Planned {
    /// Bytes of one row of the input.
    pub fn row_bytes(&self) -> usize {
        self.k * if self.dtype == Dtype::F32 { 4 } else { 2 }
    }

    /// Bytes read, converted and quantized at once: whole rows, about [`PIECE_BYTES`].
    pub fn piece_bytes(&self) -> usize {
        (PIECE_BYTES / self.row_bytes()).max(1) * self.row_bytes()
    }
}

/// About how many input bytes are in memory at once (as f32, four times as many for BF16).
pub const PIECE_BYTES: usize = 16 << 20;

/// A linear layer's weight the default selection leaves unquantized, and why. Each one is listed
/// in the serving configs' unquantized modules, so an engine expects its float tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// The tensor's name.
    pub name: String,
    /// Why it stays unquantized, e.g. "matches *lm_head*".
    pub reason: String,
}

/// The tensors to quantize, each validated before any work, and the linear layers' weights left
/// unquantized with their reasons (for the summary and the serving configs): those a pattern
/// excludes, and, by default, every 2-D float `*.weight` whose K is not a positive multiple of
/// 16 (NVFP4's group), which is copied as it is.
pub fn select(
    input: &MappedCheckpoint,
    names: &[String],
    exclude: &[String],
) -> Result<(Vec<Planned>, Vec<LeftOut>), CliError> {
    let float = |dtype: &str| matches!(dtype, "BF16" | "F16" | "F32");
    let two_d_float =
        |name: &str| input.layout(name).is_some_and(|t| float(&t.dtype) && t.shape.len() == 2 && t.shape[0] > 0);
    let quantizable =
        |name: &str| two_d_float(name) && input.layout(name).is_some_and(|t| t.shape[1] > 0 && t.shape[1] % 16 == 0);
    let patterns: Vec<String> = DEFAULT_EXCLUDES.iter().map(|p| p.to_string()).chain(exclude.to_vec()).collect();
    let mut left_out = Vec::new();
    let selected: Vec<String> = if names.is_empty() {
        let mut selected = Vec::new();
        for name in input.names() {
            if quantizable(name) {
                match patterns.iter().find(|p| matches(p, name)) {
                    Some(pattern) => left_out.push(LeftOut { name: name.into(), reason: format!("matches {pattern}") }),
                    None => selected.push(name.to_string()),
                }
            } else if two_d_float(name) && name.ends_with(".weight") {
                let k = input.layout(name).map_or(0, |t| t.shape[1]);
                let reason = format!("K = {k} is not a positive multiple of {}", gemv_core::GROUP_SIZE);
                left_out.push(LeftOut { name: name.into(), reason });
            }
        }
        selected
    } else {
        names.to_vec()
    };

    // Validate every selected tensor before any work.
    let mut planned = Vec::new();
    for name in &selected {
        let layout = input.layout(name).ok_or_else(|| CliError::MissingTensor {
            path: input.path().to_path_buf(),
            name: name.clone(),
            why: "named in --names".into(),
            present: input.names().take(8).collect::<Vec<_>>().join(", "),
        })?;
        let bad = |expected: &str| CliError::BadTensor {
            path: input.path().to_path_buf(),
            name: name.clone(),
            expected: expected.to_string(),
            found: format!("{} {:?}", layout.dtype, layout.shape),
        };
        let dtype = match Dtype::parse(&layout.dtype) {
            Some(dtype @ (Dtype::Bf16 | Dtype::F16 | Dtype::F32)) => dtype,
            _ => return Err(bad("a BF16, F16 or F32 tensor")),
        };
        let [n, k] = layout.shape[..] else { return Err(bad("a 2-D tensor [N, K]")) };
        if n == 0 || k == 0 || k % 16 != 0 {
            return Err(bad("[N, K] with N >= 1 and K a positive multiple of 16"));
        }
        for suffix in ["_scale", "_scale_2"] {
            if input.contains(&format!("{name}{suffix}")) {
                return Err(bad(&format!("no existing tensor {name}{suffix} (it would be overwritten)")));
            }
        }
        planned.push(Planned { name: name.clone(), n, k, dtype });
    }

    Ok((planned, left_out))
}

/// The first tensor of an input that is already NVFP4 (a U8 tensor with an F8_E4M3 `_scale`
/// beside it), if any.
pub fn already_quantized(input: &MappedCheckpoint) -> Option<String> {
    input.names().find_map(|name| {
        let scale = input.layout(&format!("{name}_scale"))?;
        let packed = input.layout(name)?;
        (packed.dtype == "U8" && scale.dtype == "F8_E4M3").then(|| name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_fused_groups() {
        for (pattern, name, expected) in [
            ("*lm_head*", "lm_head.weight", true),
            ("*embed*", "model.embed_tokens.weight", true),
            ("*.mlp.*", "model.layers.0.mlp.up_proj.weight", true),
            ("*.mlp.*", "model.layers.0.self_attn.q_proj.weight", false),
            ("model.*.weight", "model.x.weight", true),
            ("model.*.weight", "model.x.bias", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
        ] {
            assert_eq!(matches(pattern, name), expected, "{pattern} ~ {name}");
        }
        let parent = "model.layers.3.self_attn".to_string();
        assert_eq!(fused_group("model.layers.3.self_attn.k_proj.weight"), Some((parent, "qkv")));
        assert_eq!(fused_group("model.layers.3.mlp.up_proj.weight").map(|g| g.1), Some("gate_up"));
        assert_eq!(fused_group("model.layers.3.mlp.down_proj.weight"), None);
        assert_eq!(fused_group("q_proj.weight"), None, "no parent");
        // Each expert's gate and up share a scale, not the experts of a layer.
        let expert = |e: usize, leaf: &str| fused_group(&format!("model.layers.1.mlp.experts.{e}.{leaf}.weight"));
        assert_eq!(expert(7, "gate_proj"), Some(("model.layers.1.mlp.experts.7".into(), "gate_up")));
        assert_eq!(expert(7, "gate_proj"), expert(7, "up_proj"));
        assert_ne!(expert(7, "gate_proj"), expert(8, "gate_proj"));
        // The routers stay float; the experts' projections do not match.
        let excluded = |name: &str| DEFAULT_EXCLUDES.iter().any(|p| matches(p, name));
        for router in [
            "model.layers.1.mlp.gate.weight",
            "model.layers.1.block_sparse_moe.gate.weight",
            "model.layers.1.mlp.shared_expert_gate.weight",
            "model.layers.1.feed_forward.router.weight",
        ] {
            assert!(excluded(router), "{router}");
        }
        for projection in ["model.layers.1.mlp.experts.0.gate_proj.weight", "model.layers.1.mlp.gate_proj.weight"] {
            assert!(!excluded(projection), "{projection}");
        }
    }
}
