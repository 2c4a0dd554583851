//! The routed mixture-of-experts layers the bench and the time model use: the geometry of the
//! experts of two model families NVFP4 checkpoints are served for.

/// One routed layer: `experts` matrices of `n x k`, `top_k` of them per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeLayer {
    /// The name `gemv bench --moe` takes.
    pub name: &'static str,
    /// Experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Rows of each expert.
    pub n: usize,
    /// Columns of each expert.
    pub k: usize,
}

impl MoeLayer {
    /// The distinct experts `m` tokens touch on average when each routes to `top_k` distinct
    /// experts chosen uniformly: `E (1 - (1 - top_k / E)^m)`.
    pub fn expected_touched(&self, m: usize) -> f64 {
        let (experts, top_k) = (self.experts as f64, self.top_k as f64);
        experts * (1.0 - (1.0 - top_k / experts).powi(m as i32))
    }
}

/// DeepSeek-V3's routed experts (256, top 8; gate and up fused 4096 x 7168, down 7168 x 2048) and
/// Qwen3-30B-A3B's (128, top 8; 1536 x 2048 and 2048 x 768).
pub const MOE_LAYERS: [MoeLayer; 4] = [
    MoeLayer { name: "deepseek-v3-up", experts: 256, top_k: 8, n: 4096, k: 7168 },
    MoeLayer { name: "deepseek-v3-down", experts: 256, top_k: 8, n: 7168, k: 2048 },
    MoeLayer { name: "qwen3-moe-up", experts: 128, top_k: 8, n: 1536, k: 2048 },
    MoeLayer { name: "qwen3-moe-down", experts: 128, top_k: 8, n: 2048, k: 768 },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_touched_experts_grow_from_top_k_toward_every_expert() {
        let layer = MOE_LAYERS[2];
        assert!((layer.expected_touched(1) - 8.0).abs() < 1e-9);
        // Two tokens share an expert with probability 8 / 128 per slot: 16 - 0.5.
        assert!((layer.expected_touched(2) - 15.5).abs() < 1e-9);
        assert!(layer.expected_touched(16) < 128.0 && layer.expected_touched(1000) > 127.9);
        assert!(MOE_LAYERS.iter().all(|l| l.top_k <= l.experts && crate::validate_weight_shape(l.n, l.k).is_ok()));
    }
}
