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
}

int main() {
  const unsigned payload_bits = 0xFFC00001u;  // negative, quiet, payload bit 0 set
  float in[4] = {__builtin_huge_valf(), 1.0f, 0.0f, 0.0f};
  std::memcpy(&in[3], &payload_bits, 4);
  float* din;
  unsigned* dout;
  unsigned out[8] = {0};
  if (cudaMalloc(&din, sizeof in) || cudaMalloc(&dout, sizeof out)) { std::puts("cudaMalloc failed"); return 2; }
  cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice);
  probe<<<1, 1>>>(din, dout);
  if (cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost)) { std::puts("kernel failed"); return 2; }
  const char* what[8] = {"fma(inf, 1, -inf)", "fma(NaN 0xFFC00001, 1, 0)", "add(inf, -inf)", "add(NaN 0xFFC00001, 1)",
                         "mul(inf, 0)", "mul(NaN 0xFFC00001, 1)", "f32 NaN 0xFFC00001 to f16", "f32 NaN 0xFFC00001 to bf16"};
  const unsigned expected[8] = {0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7FFFu, 0x7FFFu};
  int differ = 0;
  for (int i = 0; i < 8; ++i) {
    std::printf("%-28s 0x%08X (expected 0x%08X)%s\n", what[i], out[i], expected[i], out[i] == expected[i] ? "" : "  DIFFERS");
    differ += out[i] != expected[i];
  }
  return differ ? 1 : 0;
}
