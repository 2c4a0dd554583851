//! The portable row kernel: 8-lane arrays, for any CPU. It multiplies and adds separately when no
//! product can overflow (then that is exactly the fused result) and uses the fused operation
//! otherwise, so the compiler can vectorise the common case on any target.

// Lane, row, token and element indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::{TILE_ROWS, block_bytes, e4m3_table};
use crate::activations::TransposedX;
use gemv_core::codec::decode_e2m1;
use gemv_core::{GROUP_SIZE, PARTIALS, fused_multiply_add};

const W: usize = 8;
/// Rows of a tile.
pub(crate) const ROWS: usize = 4;

pub(crate) fn row_tile(packed: &[u8], scales: &[u8], rows: usize, xt: &TransposedX, partials: &mut [f32]) {
    debug_assert!(rows <= ROWS && ROWS <= TILE_ROWS);
    let table = e4m3_table();
    let (row_bytes, groups) = (packed.len() / rows, scales.len() / rows);
    let m = xt.m();
    let mut tail = ([0u8; 128], [0u8; 16]);
    for b in 0..xt.blocks() {
        for r in 0..rows {
            let (bytes, codes) = block_bytes::<W>(
                &packed[r * row_bytes..(r + 1) * row_bytes],
                &scales[r * groups..(r + 1) * groups],
                b,
                &mut tail,
            );
            let mut ws = [[0f32; W]; GROUP_SIZE];
            for lane in 0..W {
                let scale = table[usize::from(codes[lane])];
                for (i, &byte) in bytes[8 * lane..8 * lane + 8].iter().enumerate() {
                    ws[2 * i][lane] = decode_e2m1(byte & 0xF) * scale;
                    ws[2 * i + 1][lane] = decode_e2m1(byte >> 4) * scale;
                }
            }
            let first = (b * W) % PARTIALS;
            for t in 0..m {
                let x = xt.block(t, b);
                let at = (r * m + t) * PARTIALS + first;
                let acc: &mut [f32; W] = (&mut partials[at..at + W]).try_into().expect("W partials");
                if xt.products_finite() {
                    for (j, weights) in ws.iter().enumerate() {
                        for lane in 0..W {
                            acc[lane] += weights[lane] * x[j * W + lane];
                        }
                    }
                } else {
                    for (j, weights) in ws.iter().enumerate() {
                        for lane in 0..W {
                            acc[lane] = fused_multiply_add(weights[lane], x[j * W + lane], acc[lane]);
                        }
                    }
                }
            }
        }
    }
}
