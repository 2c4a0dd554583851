//! Codecs against the external ml_dtypes fixture (`cargo xtask fixtures` regenerates it).

use gemv_core::codec::{
    BF16_NAN, bf16_to_f32, decode_e2m1, decode_e4m3, encode_e2m1, encode_e4m3, encode_e4m3_saturating, f32_to_bf16,
};

struct Case {
    kind: String,
    input: u32,
    output: u32,
}

fn fixture() -> Vec<Case> {
    let text = include_str!("fixtures/codecs.tsv");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 3, "bad fixture line {line:?}");
            Case {
                kind: fields[0].to_string(),
                input: u32::from_str_radix(fields[1], 16).expect("hex input"),
                output: u32::from_str_radix(fields[2], 16).expect("hex output"),
            }
        })
        .collect()
}

fn cases(kind: &str) -> Vec<Case> {
    let found: Vec<Case> = fixture().into_iter().filter(|c| c.kind == kind).collect();
    assert!(!found.is_empty(), "fixture has no {kind} cases");
    found
}

/// NaN compares by class (the fixture's NaN payload is ml_dtypes' choice); everything else by bits.
fn same_f32(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan() && a.is_sign_negative() == b.is_sign_negative()) || a.to_bits() == b.to_bits()
}

#[test]
fn e2m1_decodes_all_16_codes() {
    let cases = cases("e2m1_decode");
    assert_eq!(cases.len(), 16);
    for c in cases {
        let found = decode_e2m1(c.input as u8);
        assert!(
            same_f32(found, f32::from_bits(c.output)),
            "code {:#x}: expected {}, found {found}",
            c.input,
            f32::from_bits(c.output)
        );
    }
}

#[test]
fn e4m3_decodes_all_256_codes() {
    let cases = cases("e4m3_decode");
    assert_eq!(cases.len(), 256);
    for c in cases {
        let found = decode_e4m3(c.input as u8);
        assert!(
            same_f32(found, f32::from_bits(c.output)),
            "code {:#x}: expected {}, found {found}",
            c.input,
            f32::from_bits(c.output)
        );
    }
}

#[test]
fn e2m1_encodes_like_ml_dtypes() {
    for c in cases("e2m1_encode") {
        let value = f32::from_bits(c.input);
        assert_eq!(encode_e2m1(value), c.output as u8, "value {value:e} ({:#010x})", c.input);
    }
}

#[test]
fn e4m3_encodes_like_ml_dtypes() {
    for c in cases("e4m3_encode") {
        let value = f32::from_bits(c.input);
        assert_eq!(encode_e4m3(value), c.output as u8, "value {value:e} ({:#010x})", c.input);
    }
}

#[test]
fn bf16_encodes_like_ml_dtypes() {
    for c in cases("bf16_encode") {
        let value = f32::from_bits(c.input);
        assert_eq!(f32_to_bf16(value), c.output as u16, "value {value:e} ({:#010x})", c.input);
    }
}

#[test]
fn every_nan_becomes_the_canonical_bf16_nan() {
    for bits in [0x7FC0_0000u32, 0xFFC0_0000, 0x7F80_0001, 0xFFFF_FFFF, 0x7FBF_FFFF] {
        assert_eq!(f32_to_bf16(f32::from_bits(bits)), BF16_NAN, "{bits:#x}");
    }
}

#[test]
fn codes_round_trip() {
    for code in 0u8..16 {
        let back = encode_e2m1(decode_e2m1(code));
        // -0.0 (0x8) encodes back to 0x8; every code is its own fixed point.
        assert_eq!(back, code, "e2m1 code {code:#x}");
    }
    for code in 0u8..=255 {
        if code & 0x7F == 0x7F {
            continue;
        }
        assert_eq!(encode_e4m3(decode_e4m3(code)), code, "e4m3 code {code:#x}");
    }
    for bits in (0u16..=0xFFFF).step_by(7) {
        let value = bf16_to_f32(bits);
        if !value.is_nan() {
            assert_eq!(f32_to_bf16(value), bits);
        }
    }
}

#[test]
fn the_saturating_encoder_clamps_both_signs_and_keeps_the_rest() {
    for (value, code) in [
        (1000.0f32, 0x7Eu8),
        (-1000.0, 0xFE),
        (f32::INFINITY, 0x7E),
        (f32::NEG_INFINITY, 0xFE),
        (448.0, 0x7E),
        (-448.0, 0xFE),
        (1.0, 0x38),
        (-1.0, 0xB8),
        (-0.0, 0x80),
    ] {
        assert_eq!(encode_e4m3_saturating(value), code, "{value}");
    }
    assert_eq!(encode_e4m3_saturating(f32::NAN) & 0x7F, 0x7F, "NaN stays NaN");
    // Below the clamp it is the plain encoder, for every bf16 value.
    for bits in 0..=u16::MAX {
        let value = bf16_to_f32(bits);
        if value.is_finite() && value.abs() <= 448.0 {
            assert_eq!(encode_e4m3_saturating(value), encode_e4m3(value), "{value}");
        }
    }
}
