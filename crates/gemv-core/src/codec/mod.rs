//! Bit-exact codecs for the three number formats of the job.
//!
//! Every backend decodes weights with these exact tables, so they are checked against an external
//! reference (`tests/fixtures/codecs.tsv`, written by ml_dtypes through `cargo xtask fixtures`):
//! all 16 E2M1 codes, all 256 E4M3 codes, and a few hundred encode cases per format.

mod bf16;
mod e2m1;
mod e4m3;

pub use bf16::{BF16_NAN, bf16_to_f32, f32_to_bf16};
pub use e2m1::{E2M1_MAX, decode_e2m1, encode_e2m1};
pub use e4m3::{E4M3_MAX, decode_e4m3, e4m3_table, encode_e4m3, encode_e4m3_saturating};

/// Rounds `value` (finite, non-negative) to an integer multiple of `2^exp`, ties to even.
/// Shared by the narrow-format encoders, whose grids are all power-of-two spaced per binade.
fn round_to_multiple(value: f64, exp: i32) -> f64 {
    let step = 2f64.powi(exp);
    let q = value / step;
    let floor = q.floor();
    let frac = q - floor;
    let rounded = if frac > 0.5 || (frac == 0.5 && floor % 2.0 != 0.0) { floor + 1.0 } else { floor };
    rounded * step
}
