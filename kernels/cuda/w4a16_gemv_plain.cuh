// Part of w4a16_gemv.cu (the exact family), included inside its namespace where it stood: the
// plain path, the contract computed directly for blocks whose staged X overflowed.

// E2M1 nibble -> f32, exactly: the magnitude bits at f32 bits 24..22 are the value times 2^-126
// (code 1 the subnormal 2^-127), so one exact multiply by 2^126 finishes it; bit 3 is the sign.
__device__ __forceinline__ float e2m1_f32(gemv_u32 nibble) {
    return __fmul_rn(__uint_as_float(((nibble & 7u) << 22) | ((nibble & 8u) << 28)), 0x1p126f);
}

// E4M3 "fn" -> f32, exactly, with the same trick (subnormals land on f32 subnormals); 0x7F/0xFF
// are NaN.
__device__ __forceinline__ float e4m3_f32(gemv_u32 code) {
    const gemv_u32 magnitude = code & 0x7Fu;
    const gemv_u32 sign = (code & 0x80u) << 24;
    const float value = __fmul_rn(__uint_as_float((magnitude << 20) | sign), 0x1p120f);
    return magnitude == 0x7Fu ? __uint_as_float(0x7FC00000u | sign) : value;
}

// The contract computed plainly, for the rare blocks where X staged times 2^S overflowed: the
// same lane mapping (lane i, partials 2i and 2i+1), weights decoded to f32 one by one, X read
// from global memory. No shared memory, no barrier; small in registers and code.
template <int MAX_M, int ROWS, class Rows>
__device__ __noinline__ float gemv_rows_plain(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, int m,
                                              int n, int k, Rows token_rows, int lane, int row0) {
    const int groups = k / kGroup;
    float acc[ROWS][2][MAX_M];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int t = 0; t < MAX_M; ++t) acc[r][h][t] = 0.0f;
    for (int pass = 0; pass * kPartials < groups; ++pass) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int g = pass * kPartials + 2 * lane + h;
            if (g >= groups) continue;
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const gemv_u64 row = (gemv_u64)(row0 + r < n ? row0 + r : n - 1);
                const gemv_u8* codes = packed + row * (gemv_u64)(k / 2) + 8 * (gemv_u64)g;
                const float scale = e4m3_f32(__ldg(scales + row * (gemv_u64)groups + g));
#pragma unroll 1
                for (int t = 0; t < m && t < MAX_M; ++t) {
                    const gemv_u16* xs = token_rows.x_row(x, t) + kGroup * (gemv_u64)g;
                    float sum = 0.0f;
#pragma unroll
                    for (int tt = 0; tt < MAX_M; ++tt) sum = tt == t ? acc[r][h][tt] : sum;
#pragma unroll
                    for (int j = 0; j < kGroup; ++j) {
                        const gemv_u32 byte = __ldg(codes + j / 2);
                        const float ws = __fmul_rn(e2m1_f32(j % 2 == 0 ? byte & 0xFu : byte >> 4), scale);
                        sum = __fmaf_rn(ws, __uint_as_float((gemv_u32)__ldg(xs + j) << 16), sum);
                    }
#pragma unroll
                    for (int tt = 0; tt < MAX_M; ++tt) acc[r][h][tt] = tt == t ? sum : acc[r][h][tt];
                }
            }
        }
    }
    return reduce<MAX_M, ROWS>(acc, lane);
}
