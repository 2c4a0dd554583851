// Part of w4a16_gemv.cu (the exact family), included inside its namespace where it stood: the
// weight decode, E2M1 nibbles and E4M3 scales to exact binary16 products and f32.

// The 8 nibbles of a word (element i in bits 4i..4i+3) as binary16 pairs of value e2m1 * 2^-14:
// p[0] = (n0, n4), p[1] = (n1, n5), p[2] = (n2, n6), p[3] = (n3, n7) (low half first). The high
// byte of such a binary16 is [s 0 0 0 e1 e0 m 0] and its low byte zero.
__device__ __forceinline__ void e2m1_pairs(gemv_u32 q, gemv_u32 (&p)[4]) {
    const gemv_u32 odd = (q & 0x80808080u) | ((q >> 3) & 0x0E0E0E0Eu);          // n1, n3, n5, n7
    const gemv_u32 even = ((q << 4) & 0x80808080u) | ((q << 1) & 0x0E0E0E0Eu);  // n0, n2, n4, n6
    p[0] = gemv_prmt(even, 0u, 0x2404u);  // bytes 1 and 3 from even bytes 0 and 2, zeros elsewhere
    p[1] = gemv_prmt(odd, 0u, 0x2404u);
    p[2] = gemv_prmt(even, 0u, 0x3414u);
    p[3] = gemv_prmt(odd, 0u, 0x3414u);
}

// The lane's two E4M3 scale codes (c0 | c1 << 8) as binary16 pairs (s, s) with value e4m3 * 2^7
// (exact, at most 57344; the NaN codes 0x7F/0xFF give NaN). Each block runs it once per code to
// fill its scale table (ScaleTable); the passes look codes up there.
__device__ __forceinline__ void scale_pairs(gemv_u32 codes, gemv_u32& s0, gemv_u32& s1) {
    const gemv_u32 v = gemv_prmt(codes, 0u, 0x4140u);  // c0 in bits 0..7, c1 in bits 16..23
    const gemv_u32 magnitude = v & 0x007F007Fu;
    // Exponent and mantissa moved into binary16 place: the value is e4m3 * 2^-8, subnormal codes
    // (m * 2^-9) landing on binary16 subnormals.
    gemv_u32 h = (magnitude << 7) | ((v & 0x00800080u) << 8);
    h |= ((magnitude + 0x00010001u) & 0x00800080u) << 7;  // magnitude 0x7F: exponent 31, a NaN
    h = gemv_hmul2(h, kHalfPairTwoTo15);
    s0 = gemv_prmt(h, 0u, 0x1010u);
    s1 = gemv_prmt(h, 0u, 0x3232u);
}

// Every E4M3 code's binary16 pair (scale_pairs), in shared memory: a lookup is one shared load
// where decoding a code costs about five instructions, for each row of every pass. The cvt build
// declares it and never fills or reads it.
typedef GemvShared<gemv_u32, 256> ScaleTable;

// A row's two scales of a pass as word_weights multiplies by them. Table build: pair[h] is
// (s_h, s_h), e4m3 * 2^7 (two shared loads and their addresses per row and pass); cvt build:
// both are (s_0, s_1), the plain e4m3 values (one cvt), and each product takes its half as a
// broadcast operand (ptxas folds it into HMUL2's operand selector).
struct RowScales {
    gemv_u32 pair[2];
};

__device__ __forceinline__ RowScales row_scales(const ScaleTable& table, gemv_u32 codes) {
#ifdef GEMV_SCALES_BY_CVT
    (void)table;
    const gemv_u32 both = gemv_e4m3x2_to_f16x2(codes);
    return RowScales{{both, both}};
#else
    return RowScales{{table[codes & 0xFFu], table[codes >> 8]}};
#endif
}

// A binary16 pair times group h's scale (h = 0, 1), each product rounded once: exact here.
__device__ __forceinline__ gemv_u32 scale_pair(gemv_u32 pair, gemv_u32 scale, int h) {
#ifdef GEMV_SCALES_BY_CVT
    return h == 0 ? gemv_hmul2_by_lo(pair, scale) : gemv_hmul2_by_hi(pair, scale);
#else
    (void)h;
    return gemv_hmul2(pair, scale);
#endif
}

// The 8 weights of one word of group h of a row as f32, e2m1 * e4m3 * 2^-S, in element order
// 0..7 (exact: f16 products of at most 6 significant bits).
__device__ __forceinline__ void word_weights(gemv_u32 q, gemv_u32 scale, int h, float (&wf)[8]) {
    gemv_u32 pairs[4];
    e2m1_pairs(q, pairs);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const gemv_u32 product = scale_pair(pairs[i], scale, h);
        wf[i] = gemv_half_lo(product);
        wf[i + 4] = gemv_half_hi(product);
    }
}
