//! NVFP4 weights in the NVIDIA ModelOpt layout (docs/numerics.md), owned and borrowed.
//!
//! `packed[n * K/2 + k/2]` holds element (n, k): even k in the low nibble, odd k in the high one.
//! `scales[n * K/16 + k/16]` is the E4M3 block scale. Construction validates every length, so the
//! numeric code downstream indexes without re-checking.

use crate::codec::{decode_e2m1, decode_e4m3};
use crate::shape::{GROUP_SIZE, validate_weight_shape};
use crate::{CoreError, Result};

/// A validated, borrowed NVFP4 matrix `[N, K]`.
#[derive(Debug, Clone, Copy)]
pub struct Nvfp4View<'a> {
    packed: &'a [u8],
    scales: &'a [u8],
    global_scale: f32,
    n: usize,
    k: usize,
}

impl<'a> Nvfp4View<'a> {
    /// Checks the shape and that `packed` has N*K/2 bytes and `scales` N*K/16.
    pub fn new(packed: &'a [u8], scales: &'a [u8], global_scale: f32, n: usize, k: usize) -> Result<Self> {
        validate_weight_shape(n, k)?;
        let expected_packed = n * k / 2;
        if packed.len() != expected_packed {
            return Err(CoreError::LengthMismatch {
                what: "packed",
                expected: expected_packed,
                found: packed.len(),
                m: 0,
                n,
                k,
            });
        }
        let expected_scales = n * k / GROUP_SIZE;
        if scales.len() != expected_scales {
            return Err(CoreError::LengthMismatch {
                what: "scales",
                expected: expected_scales,
                found: scales.len(),
                m: 0,
                n,
                k,
            });
        }
        Ok(Self { packed, scales, global_scale, n, k })
    }

    /// Weight rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Weight columns.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Scale groups per row (K / 16).
    pub fn groups(&self) -> usize {
        self.k / GROUP_SIZE
    }

    /// The FP32 global scale (a multiplier).
    pub fn global_scale(&self) -> f32 {
        self.global_scale
    }

    /// All packed bytes, `[N][K/2]`.
    pub fn packed(&self) -> &'a [u8] {
        self.packed
    }

    /// All scale bytes, `[N][K/16]`.
    pub fn scales(&self) -> &'a [u8] {
        self.scales
    }

    /// The packed bytes of row `n` (K/2 bytes).
    ///
    /// # Panics
    /// If `n >= N`.
    pub fn row_packed(&self, n: usize) -> &'a [u8] {
        let width = self.k / 2;
        &self.packed[n * width..(n + 1) * width]
    }

    /// The scale bytes of row `n` (K/16 bytes).
    ///
    /// # Panics
    /// If `n >= N`.
    pub fn row_scales(&self, n: usize) -> &'a [u8] {
        let width = self.groups();
        &self.scales[n * width..(n + 1) * width]
    }

    /// The E2M1 code of element (n, k), in the low 4 bits.
    ///
    /// # Panics
    /// If `n >= N` or `k >= K`, like slice indexing.
    pub fn code(&self, n: usize, k: usize) -> u8 {
        let byte = self.packed[n * (self.k / 2) + k / 2];
        if k.is_multiple_of(2) { byte & 0xF } else { byte >> 4 }
    }

    /// The E4M3 scale byte of element (n, k).
    ///
    /// # Panics
    /// If `n >= N` or `k >= K`.
    pub fn scale_code(&self, n: usize, k: usize) -> u8 {
        self.scales[n * self.groups() + k / GROUP_SIZE]
    }

    /// `e2m1 * e4m3` for element (n, k) (exact in f32), without the global scale.
    ///
    /// # Panics
    /// If `n >= N` or `k >= K`.
    pub fn scaled_weight(&self, n: usize, k: usize) -> f32 {
        decode_e2m1(self.code(n, k)) * decode_e4m3(self.scale_code(n, k))
    }

    /// Copies into an owned matrix.
    pub fn to_owned(&self) -> Nvfp4Matrix {
        Nvfp4Matrix {
            packed: self.packed.to_vec(),
            scales: self.scales.to_vec(),
            global_scale: self.global_scale,
            n: self.n,
            k: self.k,
        }
    }
}

/// An owned NVFP4 matrix `[N, K]`, validated on construction.
#[derive(Debug, Clone, PartialEq)]
pub struct Nvfp4Matrix {
    packed: Vec<u8>,
    scales: Vec<u8>,
    global_scale: f32,
    n: usize,
    k: usize,
}

impl Nvfp4Matrix {
    /// Takes ownership of the three tensors after validating them like [`Nvfp4View::new`].
    pub fn from_parts(packed: Vec<u8>, scales: Vec<u8>, global_scale: f32, n: usize, k: usize) -> Result<Self> {
        Nvfp4View::new(&packed, &scales, global_scale, n, k)?;
        Ok(Self { packed, scales, global_scale, n, k })
    }

    /// Borrows the matrix.
    pub fn view(&self) -> Nvfp4View<'_> {
        Nvfp4View { packed: &self.packed, scales: &self.scales, global_scale: self.global_scale, n: self.n, k: self.k }
    }

    /// Weight rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Weight columns.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The global scale.
    pub fn global_scale(&self) -> f32 {
        self.global_scale
    }

    /// Splits into (packed, scales, global_scale).
    pub fn into_parts(self) -> (Vec<u8>, Vec<u8>, f32) {
        (self.packed, self.scales, self.global_scale)
    }
}
