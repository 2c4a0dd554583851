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
    /// The distinct experts `m` tokens touch on average ([`expected_touched_experts`]).
    pub fn expected_touched(&self, m: usize) -> f64 {
        expected_touched_experts(self.experts, self.top_k, m)
    }
}

/// The distinct experts of `experts` that `m` tokens touch on average when each routes to
/// `top_k` distinct experts chosen uniformly: `E (1 - (1 - top_k / E)^m)`. A token with more slots
/// than experts (ids repeat) touches every expert.
pub fn expected_touched_experts(experts: usize, top_k: usize, m: usize) -> f64 {
    let share = (top_k as f64 / experts as f64).min(1.0);
    experts as f64 * (1.0 - (1.0 - share).powi(m.min(i32::MAX as usize) as i32))
}

/// The (token, slot) pairs a touched expert has on average under that routing: `m top_k` over
/// [`expected_touched_experts`] (1 at M = 1; 1.25 for DeepSeek-V3's 8 of 256 at M = 16).
pub fn expected_pairs_per_expert(experts: usize, top_k: usize, m: usize) -> f64 {
    let touched = expected_touched_experts(experts, top_k, m);
    if touched > 0.0 { (m * top_k) as f64 / touched } else { 0.0 }
}

/// DeepSeek-V3's routed experts (256, top 8; gate and up fused 4096 x 7168, down 7168 x 2048),
/// Qwen3-30B-A3B's (128, top 8; 1536 x 2048 and 2048 x 768) and Mixtral-8x7B's (8, top 2;
/// 28672 x 4096 and 4096 x 14336), whose few experts each get several tokens once M passes 4.
pub const MOE_LAYERS: [MoeLayer; 6] = [
    MoeLayer { name: "deepseek-v3-up", experts: 256, top_k: 8, n: 4096, k: 7168 },
    MoeLayer { name: "deepseek-v3-down", experts: 256, top_k: 8, n: 7168, k: 2048 },
    MoeLayer { name: "qwen3-moe-up", experts: 128, top_k: 8, n: 1536, k: 2048 },
    MoeLayer { name: "qwen3-moe-down", experts: 128, top_k: 8, n: 2048, k: 768 },
    MoeLayer { name: "mixtral-8x7b-up", experts: 8, top_k: 2, n: 28672, k: 4096 },
    MoeLayer { name: "mixtral-8x7b-down", experts: 8, top_k: 2, n: 4096, k: 14336 },
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

    #[test]
    fn a_touched_expert_has_one_pair_at_one_token_and_more_as_tokens_share_it() {
        assert!((expected_pairs_per_expert(256, 8, 1) - 1.0).abs() < 1e-12);
        let deepseek = expected_pairs_per_expert(256, 8, 16);
        assert!(deepseek > 1.2 && deepseek < 1.3, "{deepseek}");
        // Eight experts, top 2: sixteen tokens nearly touch all, four pairs each.
        let small = expected_pairs_per_expert(8, 2, 16);
        assert!(small > 4.0 && small < 4.1, "{small}");
        // Every expert chosen by every token: M pairs each.
        assert!((expected_pairs_per_expert(4, 4, 6) - 6.0).abs() < 1e-9);
        // More slots than experts (ids repeat): every expert touched, M top_k / E pairs each, at
        // odd and even M alike.
        for m in [15, 16] {
            assert!((expected_touched_experts(5, 17, m) - 5.0).abs() < 1e-9, "M = {m}");
            assert!((expected_pairs_per_expert(5, 17, m) - (m * 17) as f64 / 5.0).abs() < 1e-9, "M = {m}");
        }
    }
}
