//! Whether this CPU's `vdpbf16ps` computes two of the contract's fused multiply-adds in turn
//! (the AVX-512 BF16 pair kernel's premise), found once by running the instruction on cases that
//! tell that order apart from the other order and from one rounding of both. CPU detection, as
//! `crate::simd`'s, which turns the path off where the probe fails.

use std::arch::x86_64::*;
use std::sync::OnceLock;

/// The same 512 bits read as 32 bf16.
#[inline(always)]
fn bf16_pairs(bits: __m512i) -> __m512bh {
    // SAFETY: both types are 64 bytes of plain bits; every bit pattern is valid for either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(bits) }
}

/// Whether this CPU's `vdpbf16ps` adds a pair's products one after the other, high element first,
/// each rounded to nearest even, as the pair kernel needs (checked once on [`probe_cases`],
/// which tell that order apart from one rounding of both and from the other order). False where
/// the CPU lacks AVX-512F or AVX-512 BF16.
pub(crate) fn adds_in_turn() -> bool {
    static ADDS_IN_TURN: OnceLock<bool> = OnceLock::new();
    *ADDS_IN_TURN.get_or_init(|| {
        let supported =
            std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16");
        // SAFETY: the CPU has both features.
        let in_turn = supported && unsafe { probe() };
        if supported && !in_turn {
            tracing::warn!("this CPU's vdpbf16ps does not round after each product: the avx512bf16 path is off");
        }
        in_turn
    })
}

/// Runs [`probe_cases`] through `vdpbf16ps` and compares with two fused multiply-adds in turn.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn probe() -> bool {
    probe_cases().chunks_exact(16).all(|lanes| {
        let (mut w, mut x, mut acc) = ([0u32; 16], [0u32; 16], [0f32; 16]);
        for (lane, case) in lanes.iter().enumerate() {
            w[lane] = u32::from(case.w[0]) << 16 | u32::from(case.w[1]);
            x[lane] = u32::from(case.x[0]) << 16 | u32::from(case.x[1]);
            acc[lane] = case.acc;
        }
        // SAFETY: 16 u32 or f32 each; unaligned loads and store.
        let found = unsafe {
            let (w, x) =
                (bf16_pairs(_mm512_loadu_si512(w.as_ptr().cast())), bf16_pairs(_mm512_loadu_si512(x.as_ptr().cast())));
            let mut found = [0f32; 16];
            _mm512_storeu_ps(found.as_mut_ptr(), _mm512_dpbf16_ps(_mm512_loadu_ps(acc.as_ptr()), w, x));
            found
        };
        lanes.iter().zip(found).all(|(case, found)| case.in_turn().to_bits() == found.to_bits())
    })
}

/// One lane of the probe: an accumulator and two pairs of bf16 bits, the first element first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProbeCase {
    pub(crate) w: [u16; 2],
    pub(crate) x: [u16; 2],
    pub(crate) acc: f32,
}

impl ProbeCase {
    pub(crate) fn product(&self, i: usize) -> (f32, f32) {
        (f32::from_bits(u32::from(self.w[i]) << 16), f32::from_bits(u32::from(self.x[i]) << 16))
    }

    /// The contract: a fused multiply-add per element, the first element first.
    pub(crate) fn in_turn(&self) -> f32 {
        let ((w0, x0), (w1, x1)) = (self.product(0), self.product(1));
        w1.mul_add(x1, w0.mul_add(x0, self.acc))
    }
}

/// 512 lanes on which the pair kernel's arithmetic is the contract's: weights `e2m1 * e4m3`,
/// activations from 2^-20 to 2^20, accumulators whose last place is about the products' size.
pub(crate) fn probe_cases() -> Vec<ProbeCase> {
    let mut next = crate::sequence::xorshift(0x9E37_79B9_7F4A_7C15);
    const E2M1: [f32; 8] = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0.5];
    (0..512)
        .map(|_| {
            let mut weight = || {
                let code = (next() % 0x77) as u8 + 8; // normal E4M3 codes 0x08..0x7E
                let value = E2M1[(next() % 8) as usize] * gemv_core::codec::decode_e4m3(code);
                let value = if next().is_multiple_of(2) { value } else { -value };
                (value.to_bits() >> 16) as u16
            };
            let w = [weight(), weight()];
            // The second activation within a factor of four of the first: both products count.
            let exponent = 127 - 20 + (next() % 41) as u16;
            let second = exponent - 2 + (next() % 5) as u16;
            let mut activation = |exponent: u16| ((next() % 2) as u16) << 15 | exponent << 7 | (next() % 128) as u16;
            let x = [activation(exponent), activation(second)];
            let first = f32::from_bits(u32::from(w[0]) << 16) * f32::from_bits(u32::from(x[0]) << 16);
            // Accumulators whose last place is about the products' size, so that both additions
            // round: either anywhere in a binade (the sums round differently from one rounding
            // of both), or a few places below a power of two with the first product's sign (a
            // sum crosses into the next binade, where the last place doubles: the two orders
            // differ). Every f32 from 2^-103 up is a multiple of 2^-126, as the kernel needs.
            let place = (first.abs().to_bits() >> 23) as i32 - 127;
            let acc = if next().is_multiple_of(2) {
                let acc = first * 2f32.powi(21 + (next() % 5) as i32);
                f32::from_bits(acc.to_bits() ^ (next() as u32 & 0x807F_FFFF))
            } else {
                let binade = 2f32.powi(place + 22);
                (binade - (1 + next() % 8) as f32 * 2f32.powi(place - 2)).copysign(first)
            };
            let acc = if acc.abs() >= 2f32.powi(-103) { acc } else { 0.0 };
            ProbeCase { w, x, acc }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the CPU's vendor string is AMD's.
    fn is_amd() -> bool {
        let leaf = std::arch::x86_64::__cpuid(0);
        let vendor: Vec<u8> = [leaf.ebx, leaf.edx, leaf.ecx].iter().flat_map(|r| r.to_le_bytes()).collect();
        vendor == b"AuthenticAMD"
    }

    /// The second element first.
    fn other_order(case: &ProbeCase) -> f32 {
        let ((w0, x0), (w1, x1)) = (case.product(0), case.product(1));
        w0.mul_add(x0, w1.mul_add(x1, case.acc))
    }

    /// Both products added to the accumulator in f64, then rounded to f32: a model of one
    /// rounding for both.
    fn one_rounding(case: &ProbeCase) -> f32 {
        let ((w0, x0), (w1, x1)) = (case.product(0), case.product(1));
        (f64::from(case.acc) + f64::from(w0) * f64::from(x0) + f64::from(w1) * f64::from(x1)) as f32
    }

    #[test]
    fn the_probe_tells_the_order_and_the_rounding_apart() {
        let cases = probe_cases();
        assert_eq!(cases.len() % 16, 0);
        let differ = |other: fn(&ProbeCase) -> f32| {
            cases.iter().filter(|case| other(case).to_bits() != case.in_turn().to_bits()).count()
        };
        let (one_rounding, other_order) = (differ(one_rounding), differ(other_order));
        assert!(one_rounding >= 50 && other_order >= 50, "{one_rounding} and {other_order} of {}", cases.len());
        // A CPU whose instruction fails the probe runs the AVX-512F kernel instead, which is
        // safe anywhere; on AMD's (Zen 5 measured) the probe must pass, or the path is lost.
        let has_it =
            std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16");
        if has_it && is_amd() {
            assert!(adds_in_turn(), "an AMD CPU's vdpbf16ps failed the probe");
        }
        eprintln!("vdpbf16ps present: {has_it}; adds in turn: {}", adds_in_turn());
    }
}
