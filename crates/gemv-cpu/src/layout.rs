//! The CPU's arrangement of an NVFP4 matrix: made once when the weights are loaded, read by every
//! launch as one forward stream per thread.
//!
//! A vector lane is a weight row. Rows are taken 16 at a time (a tile); a tile's bytes are
//! contiguous and split into blocks of eight groups. Block `(c, s)` of a tile holds, for its 16
//! rows, the groups `64 s + 8 c + i` (`i` = 0..8): first their E4M3 scale codes (`[i][row]`, 128
//! bytes), then their packed E2M1 codes as 32-bit words (`[half][i][row]`, 1,024 bytes; word
//! `half` of a group holds its elements `8 half .. 8 half + 8`, element j in bits `4 j ..`). One
//! 64-byte load gives a vector of one group's eight elements for 16 rows, so every element of the
//! contract's chain (partial `l` = `8 c + i`) is a shift, a table look-up and a multiply away, and
//! the 16 lanes are 16 independent chains. Blocks run chunk by chunk (`c`), superblock by
//! superblock (`s`) within a chunk: a chunk's blocks are the whole chains of eight partials, in
//! the order they are summed.
//!
//! Groups past the row's last (`64 s + 8 c + i >= K / 16`) and rows past the matrix's last are
//! zero bytes: a zero scale code makes their weights +0, and `fma(+0, x, a) = a` for the finite
//! (padded: zero) activations they meet, because a partial is never -0. A block is only stored
//! where its first group exists, so padding is at most seven groups per chunk.
//!
//! The arrangement holds exactly the matrix's bytes plus that padding; [`Geometry::restore`]
//! gives the standard layout back.

use gemv_core::{GROUP_SIZE, PARTIALS};

/// Rows in a tile: the lanes of one AVX-512 vector (two AVX2 vectors, four NEON vectors).
pub(crate) const TILE_ROWS: usize = 16;
/// Groups (and partial sums) in a block.
pub(crate) const BLOCK_GROUPS: usize = 8;
/// Chunks of a tile: the 64 partials, eight at a time.
pub(crate) const CHUNKS: usize = PARTIALS / BLOCK_GROUPS;
/// Bytes of a block's scale codes.
pub(crate) const BLOCK_SCALE_BYTES: usize = BLOCK_GROUPS * TILE_ROWS;
/// Bytes of one group-half's words for the tile's 16 rows.
pub(crate) const HALF_BYTES: usize = TILE_ROWS * 4;
/// The first byte of group `i`'s words for elements `8 half ..` within a block: a kernel that
/// runs a block's eight groups half by half reads it front to back.
pub(crate) const fn word_offset(i: usize, half: usize) -> usize {
    BLOCK_SCALE_BYTES + (half * BLOCK_GROUPS + i) * HALF_BYTES
}
/// Bytes of a block: scale codes, then words. A whole number of 64-byte lines.
pub(crate) const BLOCK_BYTES: usize = BLOCK_SCALE_BYTES + BLOCK_GROUPS * 2 * HALF_BYTES;

const _: () = assert!(BLOCK_BYTES.is_multiple_of(64));

/// Bytes past a tile that a kernel may read (and ignore): the AVX-512F kernel loads a vector of
/// words at byte offsets 1 to 3 to bring a byte's low nibble to each lane's bottom without a
/// shift, reading up to 3 bytes past the last. The arrangement keeps this many zero bytes after
/// its last tile.
pub(crate) const READ_PAST: usize = 64;

/// From a group's first word (elements 0..8) to its second (8..16), for one row.
const SECOND_WORD: usize = word_offset(0, 1) - word_offset(0, 0);

/// Where everything of an `n x k` matrix sits in its arrangement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    n: usize,
    k: usize,
    groups: usize,
    /// Superblocks chunk c stores (0 for a chunk with no group).
    superblocks: [usize; CHUNKS],
    /// Byte offset of chunk c's blocks within a tile; the last entry is the tile's size.
    chunk_offsets: [usize; CHUNKS + 1],
    /// Where chunk c's activations start in a token's row of the kernels' activations (in the
    /// blocks' order, see [`Geometry::activation`]); the last entry is the row's length.
    activation_offsets: [usize; CHUNKS + 1],
}

impl Geometry {
    /// The geometry of an `n x k` matrix (`k` a multiple of 16, as every validated shape is).
    pub(crate) fn new(n: usize, k: usize) -> Self {
        let groups = k / GROUP_SIZE;
        let superblocks: [usize; CHUNKS] =
            std::array::from_fn(|c| groups.saturating_sub(BLOCK_GROUPS * c).div_ceil(PARTIALS));
        let (mut chunk_offsets, mut activation_offsets) = ([0; CHUNKS + 1], [0; CHUNKS + 1]);
        for c in 0..CHUNKS {
            chunk_offsets[c + 1] = chunk_offsets[c] + superblocks[c] * BLOCK_BYTES;
            activation_offsets[c + 1] = activation_offsets[c] + superblocks[c] * BLOCK_GROUPS * GROUP_SIZE;
        }
        Self { n, k, groups, superblocks, chunk_offsets, activation_offsets }
    }

    /// Weight rows.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// Weight columns.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// Tiles (the last may hold padding rows).
    pub(crate) fn tiles(&self) -> usize {
        self.n.div_ceil(TILE_ROWS)
    }

    /// Bytes of one tile.
    pub(crate) fn tile_bytes(&self) -> usize {
        self.chunk_offsets[CHUNKS]
    }

    /// Bytes of the whole arrangement.
    pub(crate) fn bytes(&self) -> usize {
        self.tiles() * self.tile_bytes()
    }

    /// Superblocks (blocks) chunk `c` stores per tile.
    pub(crate) fn superblocks(&self, c: usize) -> usize {
        self.superblocks[c]
    }

    /// Chunk `c`'s first byte within a tile.
    pub(crate) fn chunk_offset(&self, c: usize) -> usize {
        self.chunk_offsets[c]
    }

    /// Activations per token the kernels read: K and the padding groups' zeros, in the blocks'
    /// order (a tile's pass then reads them front to back).
    pub(crate) fn padded_k(&self) -> usize {
        self.activation_offsets[CHUNKS]
    }

    /// Where the activations of block `(c, s)` start in a token's row of the kernels'
    /// activations: its eight groups' 16 elements each follow, group by group.
    pub(crate) fn activation(&self, c: usize, s: usize) -> usize {
        self.activation_offsets[c] + s * BLOCK_GROUPS * GROUP_SIZE
    }

    /// Where group `g`'s 16 activations sit in a token's row of the kernels' activations.
    pub(crate) fn group_activations(&self, g: usize) -> usize {
        let (s, c, i) = (g / PARTIALS, g % PARTIALS / BLOCK_GROUPS, g % BLOCK_GROUPS);
        self.activation(c, s) + i * GROUP_SIZE
    }

    /// Where group `g` of row `row` sits: (its scale code's byte, its first word's byte). The
    /// second word is [`SECOND_WORD`] bytes after the first.
    fn place(&self, row: usize, g: usize) -> (usize, usize) {
        let (tile, lane) = (row / TILE_ROWS, row % TILE_ROWS);
        let (s, c, i) = (g / PARTIALS, g % PARTIALS / BLOCK_GROUPS, g % BLOCK_GROUPS);
        let block = tile * self.tile_bytes() + self.chunk_offsets[c] + s * BLOCK_BYTES;
        (block + i * TILE_ROWS + lane, block + word_offset(i, 0) + 4 * lane)
    }

    /// Arranges the standard layout (`packed [n][k/2]`, `scales [n][k/16]`) into `out`
    /// ([`bytes`](Self::bytes) long, zeroed by the caller: padding is left as it is).
    pub(crate) fn arrange(&self, packed: &[u8], scales: &[u8], out: &mut [u8]) {
        let row_bytes = self.k / 2;
        assert!(
            packed.len() >= self.n * row_bytes && scales.len() >= self.n * self.groups && out.len() >= self.bytes()
        );
        for row in 0..self.n {
            let (row_packed, row_scales) =
                (&packed[row * row_bytes..][..row_bytes], &scales[row * self.groups..][..self.groups]);
            for (g, (&scale, words)) in row_scales.iter().zip(row_packed.chunks_exact(GROUP_SIZE / 2)).enumerate() {
                let (scale_at, word_at) = self.place(row, g);
                out[scale_at] = scale;
                out[word_at..word_at + 4].copy_from_slice(&words[..4]);
                out[word_at + SECOND_WORD..word_at + SECOND_WORD + 4].copy_from_slice(&words[4..]);
            }
        }
    }

    /// The standard layout back from an arrangement: `(packed, scales)`.
    pub(crate) fn restore(&self, arranged: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let row_bytes = self.k / 2;
        let (mut packed, mut scales) = (vec![0u8; self.n * row_bytes], vec![0u8; self.n * self.groups]);
        for row in 0..self.n {
            for g in 0..self.groups {
                let (scale_at, word_at) = self.place(row, g);
                scales[row * self.groups + g] = arranged[scale_at];
                let words = &mut packed[row * row_bytes + g * GROUP_SIZE / 2..][..GROUP_SIZE / 2];
                words[..4].copy_from_slice(&arranged[word_at..word_at + 4]);
                words[4..].copy_from_slice(&arranged[word_at + SECOND_WORD..word_at + SECOND_WORD + 4]);
            }
        }
        (packed, scales)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            })
            .collect()
    }

    #[test]
    fn arranging_and_restoring_gives_the_bytes_back_and_padding_is_zero() {
        // Row counts around a tile, group counts around a block and a superblock.
        for (n, k) in [(1, 16), (15, 48), (16, 128), (17, 1024), (33, 1040), (40, 5120), (3, 16 * 75)] {
            let geometry = Geometry::new(n, k);
            let (packed, scales) = (bytes(n * k / 2, n as u64), bytes(n * k / 16, k as u64));
            let mut arranged = vec![0u8; geometry.bytes()];
            geometry.arrange(&packed, &scales, &mut arranged);
            assert_eq!(geometry.restore(&arranged), (packed.clone(), scales.clone()), "{n} x {k}");
            // Every byte of the arrangement is either one of the matrix's or padding (zero): the
            // matrix's bytes are 9/16 of a byte per weight, and no byte is written twice.
            let mut owners = vec![0u8; geometry.bytes()];
            for row in 0..n {
                for g in 0..k / 16 {
                    let (scale_at, word_at) = geometry.place(row, g);
                    for at in [scale_at]
                        .into_iter()
                        .chain(word_at..word_at + 4)
                        .chain(word_at + SECOND_WORD..word_at + SECOND_WORD + 4)
                    {
                        owners[at] += 1;
                    }
                }
            }
            assert!(owners.iter().all(|&o| o <= 1), "{n} x {k}: a byte has two owners");
            assert_eq!(owners.iter().map(|&o| usize::from(o)).sum::<usize>(), n * k * 9 / 16);
            assert!(arranged.iter().zip(&owners).all(|(&b, &o)| o == 1 || b == 0), "{n} x {k}: padding not zero");
        }
    }

    #[test]
    fn blocks_follow_the_chains_and_padding_stays_small() {
        // 75 groups: chunk 0 has groups 0..8 and 64..72 (two superblocks), chunk 1 groups 8..16
        // and 72..80 (75..80 padding), chunks 2..7 one superblock each.
        let geometry = Geometry::new(3, 16 * 75);
        let superblocks: Vec<usize> = (0..CHUNKS).map(|c| geometry.superblocks(c)).collect();
        assert_eq!(superblocks, [2, 2, 1, 1, 1, 1, 1, 1]);
        assert_eq!(geometry.tile_bytes(), 10 * BLOCK_BYTES);
        // Chunks 0 and 1 hold two blocks' activations, the others one: 10 blocks of 128.
        assert_eq!(geometry.padded_k(), 10 * 128);
        assert_eq!((geometry.activation(1, 1), geometry.group_activations(72)), (3 * 128, 3 * 128));
        assert_eq!(geometry.group_activations(74), 3 * 128 + 2 * 16);
        // Every group has its own 16 activations.
        let mut starts: Vec<usize> = (0..75).map(|g| geometry.group_activations(g)).collect();
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), 75);
        assert!(starts.iter().all(|&at| at % 16 == 0 && at + 16 <= geometry.padded_k()));
        // Group 72 (chunk 1, superblock 1, first of its block) of row 2.
        let (scale_at, word_at) = geometry.place(2, 72);
        let block = geometry.chunk_offset(1) + BLOCK_BYTES;
        assert_eq!((scale_at, word_at), (block + 2, block + BLOCK_SCALE_BYTES + 8));
        let (_, word_at) = geometry.place(2, 73);
        assert_eq!(word_at, block + BLOCK_SCALE_BYTES + HALF_BYTES + 8, "the next group's first word follows");
        // Three groups: only chunk 0 exists, one block.
        let small = Geometry::new(16, 48);
        assert_eq!(small.tile_bytes(), BLOCK_BYTES);
        assert_eq!((1..CHUNKS).map(|c| small.superblocks(c)).sum::<usize>(), 0);
    }
}
