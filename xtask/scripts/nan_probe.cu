// gemv device pack: the GPU's NaN bits. nvcc -arch=native nan_probe.cu && ./a.out
#include <cstdio>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__global__ void probe(const float* in, unsigned* out) {
  const float inf = in[0], one = in[1], zero = in[2], payload = in[3];
  out[0] = __float_as_uint(__fmaf_rn(inf, one, -inf));
  out[1] = __float_as_uint(__fmaf_rn(payload, one, zero));
  out[2] = __float_as_uint(__fadd_rn(inf, -inf));
  out[3] = __float_as_uint(__fadd_rn(payload, one));
  out[4] = __float_as_uint(__fmul_rn(inf, zero));
  out[5] = __float_as_uint(__fmul_rn(payload, one));
  out[6] = __half_as_ushort(__float2half_rn(payload));
  out[7] = __bfloat16_as_ushort(__float2bfloat16_rn(payload));
  // The emulator's PTX executor's models: cvt.f32.f16 of an f16 NaN with a payload, and an
  // mma.sync whose product is 0 x infinity.
  const unsigned short half_nan = 0xFE01u;  // negative, payload bit 0 set
  float widened;
  asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(widened) : "h"(half_nan));
  out[8] = __float_as_uint(widened);
  const unsigned a[4] = {0x7F80u, 0u, 0u, 0u}, b[2] = {0u, 0u};  // A[0][0] = inf, B = 0
  float d[4];
  const float c[4] = {zero, zero, zero, zero};
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
  out[9] = __float_as_uint(d[0]);
  // The packed operations the kernels' inline PTX uses (high lane first in each comment).
  unsigned packed;
  const unsigned f16_inf_nan = 0x7C00FE01u, f16_zero_one = 0x00003C00u;  // inf, NaN 0xFE01; 0, 1
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(packed) : "r"(f16_inf_nan), "r"(f16_zero_one));
  out[10] = packed;
  const unsigned bf16_inf_nan = 0x7F80FFC1u, bf16_zero_one = 0x00003F80u, bf16_zero = 0u;  // inf, NaN 0xFFC1
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(packed) : "r"(bf16_inf_nan), "r"(bf16_zero_one), "r"(bf16_zero));
  out[11] = packed;
  const unsigned e4m3_nans = 0xFF7Fu;  // both E4M3 NaN codes
  asm("{ .reg .b16 c; cvt.u16.u32 c, %1; cvt.rn.f16x2.e4m3x2 %0, c; }" : "=r"(packed) : "r"(e4m3_nans));
  out[12] = packed;
}

int main() {
  const unsigned payload_bits = 0xFFC00001u;  // negative, quiet, payload bit 0 set
  float in[4] = {__builtin_huge_valf(), 1.0f, 0.0f, 0.0f};
  std::memcpy(&in[3], &payload_bits, 4);
  float* din;
  unsigned* dout;
  unsigned out[13] = {0};
  if (cudaMalloc(&din, sizeof in) || cudaMalloc(&dout, sizeof out)) { std::puts("cudaMalloc failed"); return 2; }
  cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice);
  probe<<<1, 32>>>(din, dout);  // a full warp: the mma is a warp collective
  if (cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost)) { std::puts("kernel failed"); return 2; }
  const char* what[13] = {"fma(inf, 1, -inf)", "fma(NaN 0xFFC00001, 1, 0)", "add(inf, -inf)", "add(NaN 0xFFC00001, 1)",
                          "mul(inf, 0)", "mul(NaN 0xFFC00001, 1)", "f32 NaN 0xFFC00001 to f16", "f32 NaN 0xFFC00001 to bf16",
                          "cvt.f32.f16 of NaN 0xFE01", "mma.sync bf16, inf x 0", "mul.rn.f16x2 inf x 0, NaN x 1",
                          "fma.rn.bf16x2 inf x 0, NaN x 1", "cvt.rn.f16x2.e4m3x2 NaN, NaN"};
  const unsigned expected[13] = {0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu,
                                 0x7FFFFFFFu, 0x7FFFu,      0x7FFFu,      0x7FFFFFFFu, 0x7FFFFFFFu,
                                 0x7FFF7FFFu, 0x7FFF7FFFu, 0x7FFF7FFFu};
  int differ = 0;
  for (int i = 0; i < 13; ++i) {
    std::printf("%-28s 0x%08X (expected 0x%08X)%s\n", what[i], out[i], expected[i], out[i] == expected[i] ? "" : "  DIFFERS");
    differ += out[i] != expected[i];
  }
  return differ ? 1 : 0;
}
