//! Bit and half-precision primitives, against an independent reference.

use crate::harness::run_on;

/// Every binary16 code, as m = 1024 rows of k = 64 (y has room for two outputs per input).
fn every_half_code() -> (Vec<u16>, usize, usize, usize) {
    ((0..=u16::MAX).collect(), 1024, 128, 64)
}

/// binary16 bits to their exact value (None for NaN).
fn half_value(bits: u16) -> Option<f64> {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1F);
    let mantissa = f64::from(bits & 0x3FF);
    match exponent {
        0 => Some(sign * mantissa * 2f64.powi(-24)),
        31 if mantissa == 0.0 => Some(sign * f64::INFINITY),
        31 => None,
        _ => Some(sign * (1024.0 + mantissa) * 2f64.powi(exponent - 25)),
    }
}

/// An exact value to binary16 bits, rounding to nearest even (None for NaN).
fn half_bits_rounded(value: f64) -> Option<u16> {
    if value.is_nan() {
        return None;
    }
    let sign = if value.is_sign_negative() { 0x8000u16 } else { 0 };
    let magnitude = value.abs();
    if magnitude >= 65520.0 {
        return Some(sign | 0x7C00);
    }
    // The quantum of the binade (subnormals share the smallest normal binade's quantum).
    let exponent = if magnitude == 0.0 { -14 } else { magnitude.log2().floor().max(-14.0) as i32 };
    let exponent = if magnitude >= 2f64.powi(exponent + 1) { exponent + 1 } else { exponent };
    let quantum = 2f64.powi(exponent - 10);
    let units = (magnitude / quantum).round_ties_even();
    let rounded = units * quantum;
    let bits = if rounded < 2f64.powi(-14) {
        (rounded * 2f64.powi(24)) as u16
    } else {
        let binade = rounded.log2().floor() as i32;
        let mantissa = rounded / 2f64.powi(binade - 10) - 1024.0;
        (((binade + 15) as u16) << 10) | mantissa as u16
    };
    Some(sign | bits)
}

#[test]
fn the_reference_rounding_is_itself_right_on_known_values() {
    assert_eq!(half_bits_rounded(1.0), Some(0x3C00));
    assert_eq!(half_bits_rounded(65504.0), Some(0x7BFF));
    assert_eq!(half_bits_rounded(65519.99), Some(0x7BFF));
    assert_eq!(half_bits_rounded(65520.0), Some(0x7C00));
    assert_eq!(half_bits_rounded(2f64.powi(-24)), Some(0x0001));
    assert_eq!(half_bits_rounded(2f64.powi(-25)), Some(0x0000), "a tie rounds to even zero");
    assert_eq!(half_bits_rounded(3.0 * 2f64.powi(-25)), Some(0x0002), "a tie rounds to even 2");
    assert_eq!(half_bits_rounded(-(1.0 + 2f64.powi(-11))), Some(0xBC00), "a tie rounds to even");
    assert_eq!(half_bits_rounded(1.0 + 3.0 * 2f64.powi(-11)), Some(0x3C02));
    assert_eq!(half_bits_rounded(2f64.powi(-14) - 2f64.powi(-26)), Some(0x0400), "rounds up into the normals");
    for bits in 0..=u16::MAX {
        if let Some(value) = half_value(bits) {
            assert_eq!(half_bits_rounded(value), Some(bits), "round trip of {bits:#06x}");
        }
    }
}

/// `fma.rn.f32`, `add.rn.f32`, `mul.rn.f32` (`__fmaf_rn`, `__fadd_rn`, `__fmul_rn`, through which
/// the kernels do all their f32 arithmetic): one rounding each, and a NaN result is the GPU's
/// one f32 NaN, 0x7FFFFFFF, whatever made it (0 x infinity, infinity - infinity, an input NaN of
/// either sign and any payload), as the device pack's NaN probe checks on a GPU. With x86's
/// NaNs (0xFFC00000, or the input's payload) bit 0 of a NaN would always be clear, so the exact
/// kernel's finiteness test with its mask mutated to 0x7F800001 (mutant #1072) would pass on the
/// emulator and fail on a GPU.
#[test]
fn f32_arithmetic_rounds_once_and_its_nan_is_the_gpus_one_nan() {
    const NAN: u32 = 0x7FFF_FFFF;
    let one_plus = 1.0 + 2f32.powi(-12);
    // a, b, c; then fma(a, b, c), a + b, a * b.
    let cases: [(f32, f32, f32, [u32; 3]); 8] = [
        (1.5, 2.0, 0.25, [3.25f32.to_bits(), 3.5f32.to_bits(), 3.0f32.to_bits()]),
        // (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24 exactly; rounding the product first would give 2^-11.
        (
            one_plus,
            one_plus,
            -1.0,
            [
                (2f32.powi(-11) + 2f32.powi(-24)).to_bits(),
                (2.0 + 2f32.powi(-11)).to_bits(),
                (1.0 + 2f32.powi(-11)).to_bits(),
            ],
        ),
        (0.0, f32::INFINITY, 1.0, [NAN, f32::INFINITY.to_bits(), NAN]),
        (f32::INFINITY, f32::NEG_INFINITY, 0.0, [f32::NEG_INFINITY.to_bits(), NAN, f32::NEG_INFINITY.to_bits()]),
        (f32::INFINITY, -1.0, f32::INFINITY, [NAN, f32::INFINITY.to_bits(), f32::NEG_INFINITY.to_bits()]),
        (f32::from_bits(0x7FC1_2345), 1.0, 0.0, [NAN, NAN, NAN]),
        (1.0, f32::from_bits(0xFFC0_0000), 2.0, [NAN, NAN, NAN]),
        (f32::from_bits(0x7F80_0001), 1.0, 0.0, [NAN, NAN, NAN]),
    ];
    let mut x = Vec::new();
    for &(a, b, c, _) in &cases {
        for v in [a, b, c] {
            x.extend([(v.to_bits() & 0xFFFF) as u16, (v.to_bits() >> 16) as u16]);
        }
    }
    x.resize(64, 0);
    let y = run_on("emu_test_f32_arithmetic", &x, 1, 64, 64);
    for (i, &(a, b, c, expected)) in cases.iter().enumerate() {
        for (j, (what, expected)) in ["fma(a, b, c)", "a + b", "a * b"].into_iter().zip(expected).enumerate() {
            let at = 6 * i + 2 * j;
            let found = u32::from(y[at]) | (u32::from(y[at + 1]) << 16);
            assert_eq!(
                found, expected,
                "{what} for a = {a:e}, b = {b:e}, c = {c:e}: expected {expected:#010x}, found {found:#010x}"
            );
        }
    }
}

#[test]
fn half_to_float_matches_the_reference_on_every_code() {
    let (x, m, n, k) = every_half_code();
    let y = run_on("emu_test_half_to_float", &x, m, n, k);
    let mut mismatches = 0;
    for (i, &h) in x.iter().enumerate() {
        let found = f32::from_bits(u32::from(y[2 * i]) | (u32::from(y[2 * i + 1]) << 16));
        let ok = match half_value(h) {
            Some(expected) => found.to_bits() == (expected as f32).to_bits(),
            None => found.is_nan(),
        };
        if !ok {
            mismatches += 1;
            if mismatches <= 5 {
                eprintln!("cvt.f32.f16 {h:#06x}: expected {:?}, found {found:e}", half_value(h));
            }
        }
    }
    assert_eq!(mismatches, 0, "{mismatches} of 65536 codes convert wrongly");
}

/// Runs a two-lane product kernel (`emu_test_hmul2`, `emu_test_bf16x2_mul`) over every 16-bit
/// code `a` against the code `(7i + 3) mod 65536`, compares both halves with `expected(a, b)`
/// and returns the expected codes (for the caller's regime counts).
pub(crate) fn product_sweep(kernel: &str, expected: impl Fn(u16, u16) -> u16) -> Vec<(u16, u16, u16)> {
    let (x, m, n, k) = every_half_code();
    let y = run_on(kernel, &x, m, n, k);
    let count = x.len();
    let mut mismatches = 0;
    let mut products = Vec::with_capacity(count);
    for i in 0..count {
        let (a, b) = (x[i], x[(7 * i + 3) % count]);
        let want = expected(a, b);
        for (half, found) in [y[2 * i], y[2 * i + 1]].into_iter().enumerate() {
            if found != want {
                mismatches += 1;
                if mismatches <= 5 {
                    eprintln!("{kernel}: {a:#06x} x {b:#06x} (half {half}): expected {want:#06x}, found {found:#06x}");
                }
            }
        }
        products.push((a, b, want));
    }
    assert_eq!(mismatches, 0, "{kernel}: {mismatches} products differ");
    products
}

/// `mul.rn.f16x2` with one operand's low or high half in both lanes (the sm_89 build's scale
/// multiply): the same products as `hmul2`, whatever the other halves hold.
#[test]
fn broadcast_hmul2_multiplies_by_the_chosen_half() {
    let products = product_sweep("emu_test_hmul2_broadcast", |a, b| match (half_value(a), half_value(b)) {
        (Some(a), Some(b)) => half_bits_rounded(a * b).unwrap_or(0x7FFF),
        _ => 0x7FFF,
    });
    assert_eq!(products.len(), 65536);
}

/// `cvt.rn.f16x2.e4m3x2` (the sm_89 build's scales): both E4M3 codes of every 16-bit pattern,
/// low byte to the low half, each exactly its E4M3 value (gemv-core's codec), NaN codes NaN.
#[test]
fn e4m3x2_conversion_is_exact_on_every_code_pair() {
    let (x, m, n, k) = every_half_code();
    let y = run_on("emu_test_e4m3x2_to_f16x2", &x, m, n, k);
    let mut mismatches = 0;
    for (i, &codes) in x.iter().enumerate() {
        for (half, code) in [(y[2 * i], codes as u8), (y[2 * i + 1], (codes >> 8) as u8)] {
            let expected = gemv_core::codec::decode_e4m3(code);
            let ok = match half_value(half) {
                Some(found) => found == f64::from(expected) && found.is_sign_negative() == expected.is_sign_negative(),
                None => expected.is_nan(),
            };
            if !ok {
                mismatches += 1;
                if mismatches <= 5 {
                    eprintln!("e4m3 {code:#04x} (in {codes:#06x}): expected {expected:e}, found {half:#06x}");
                }
            }
        }
    }
    assert_eq!(mismatches, 0, "{mismatches} of 131072 conversions wrong");
}

#[test]
fn hmul2_is_the_correctly_rounded_product_with_canonical_nan() {
    let products = product_sweep("emu_test_hmul2", |a, b| match (half_value(a), half_value(b)) {
        (Some(a), Some(b)) => half_bits_rounded(a * b).unwrap_or(0x7FFF),
        _ => 0x7FFF,
    });
    let (mut subnormal, mut overflow, mut nan) = (0, 0, 0);
    for &(a, b, expected) in &products {
        subnormal += usize::from(expected & 0x7C00 == 0 && expected & 0x3FF != 0);
        overflow += usize::from(expected & 0x7FFF == 0x7C00 && (a & 0x7C00) != 0x7C00 && (b & 0x7C00) != 0x7C00);
        nan += usize::from(expected == 0x7FFF);
    }
    eprintln!("hmul2: {} products, {subnormal} subnormal, {overflow} overflowing, {nan} NaN", products.len());
    assert!(subnormal > 100 && overflow > 100 && nan > 100, "the sweep must reach every rounding regime");
}

#[test]
fn prmt_selects_bytes_like_the_reference() {
    let (m, n, k) = (16, 128, 64);
    let mut state = 0x9E37_79B9u32;
    let x: Vec<u16> = (0..m * k)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u16
        })
        .collect();
    let y = run_on("emu_test_prmt", &x, m, n, k);
    let word = |i: usize| u32::from(x[i]) | (u32::from(x[i + 1]) << 16);
    let (mut checked, mut replicated) = (0, 0);
    for i in 0..m * k - 5 {
        let bytes = u64::from(word(i)) | (u64::from(word(i + 2)) << 32);
        let selector = u32::from(x[i + 4]);
        let expected = (0..4).fold(0u32, |d, lane| {
            let nibble = (selector >> (4 * lane)) & 0xF;
            let byte = ((bytes >> (8 * (nibble & 7))) & 0xFF) as u32;
            // Bit 3: the selected byte's sign bit, replicated over the byte.
            let byte = match (nibble & 8, byte & 0x80) {
                (0, _) => byte,
                (_, 0) => 0,
                _ => 0xFF,
            };
            d | byte << (8 * lane)
        });
        replicated += (0..4).filter(|lane| (selector >> (4 * lane)) & 8 != 0).count();
        let found = u32::from(y[2 * i]) | (u32::from(y[2 * i + 1]) << 16);
        assert_eq!(found, expected, "prmt({:#010x}, {:#010x}, {selector:#06x})", word(i), word(i + 2));
        checked += 1;
    }
    assert_eq!(checked, m * k - 5);
    assert!(replicated > 1000, "sign replication must be exercised ({replicated} selector nibbles)");
}
