// QLoRA's NF4 dequantisation in one kernel (declaration: fused_kernels.hpp).
// ATen's path (runtime/model/lora.cpp nf4_dequantize) takes per slice of 2^24
// weights an index conversion, a gather of fp32 level pairs and a scale
// multiply, on PyTorch's non-vectorized kernels: 14.5 bytes moved per weight
// in bf16 (validation/h100/ft23), about a quarter of a QLoRA step. Here each
// thread reads eight code bytes (sixteen weights of one 64-weight block) and
// its block's constant, and writes the sixteen weights with 16-byte stores:
// 0.5 + 1/64 bytes read and 2 written per bf16 weight.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "runtime/kernels/fused_kernels.hpp"
#include "runtime/kernels/kernel_util.cuh"

namespace planner::rt::fused {
namespace {

constexpr int kBlock = 64, kBlock2 = 256, kPerThread = 16;

struct Levels {
  float v[16];
};

// absmax of block b as lora.cpp's nf4_absmax computes it: the code times its
// 256-block's scale, then plus the mean, each rounded in fp32.
__device__ __forceinline__ float block_absmax(const uint8_t* absmax_codes, const float* absmax_scale, float mean,
                                              int64_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(absmax_codes[b]), __NV_E4M3);
  return __fadd_rn(__fmul_rn(__half2float(__half(h)), absmax_scale[b / kBlock2]), mean);
}

template <class T>
__global__ void nf4_kernel(const uint8_t* codes, const uint8_t* absmax_codes, const float* absmax_scale, float mean,
                           Levels lv, T* out, int64_t n) {
  __shared__ float level[16];
  if (threadIdx.x < 16) level[threadIdx.x] = lv.v[threadIdx.x];
  __syncthreads();
  constexpr int V = 16 / sizeof(T);  // elements a 16-byte store
  const int64_t groups = n / kPerThread, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t g = first; g < groups; g += stride) {
    const int64_t i0 = g * kPerThread;
    const float a = block_absmax(absmax_codes, absmax_scale, mean, i0 / kBlock);
    const uint2 c = *reinterpret_cast<const uint2*>(codes + i0 / 2);
    float v[kPerThread];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const unsigned byte = ((j < 4 ? c.x : c.y) >> (8 * (j % 4))) & 0xffu;
      v[2 * j] = __fmul_rn(level[byte & 15u], a);
      v[2 * j + 1] = __fmul_rn(level[byte >> 4], a);
    }
#pragma unroll
    for (int s = 0; s < kPerThread / V; ++s) {
      float part[V];
#pragma unroll
      for (int k = 0; k < V; ++k) part[k] = v[s * V + k];
      store<T, V>(out + i0 + s * V, part);
    }
  }
  // The last weights (n not a multiple of 16), one at a time.
  for (int64_t i = groups * kPerThread + first; i < n; i += stride) {
    const unsigned byte = codes[i / 2];
    const float a = block_absmax(absmax_codes, absmax_scale, mean, i / kBlock);
    out[i] = from_f<T>(__fmul_rn(level[i % 2 ? byte >> 4 : byte & 15u], a));
  }
}

template <class T>
void nf4_t(const uint8_t* codes, const uint8_t* absmax_codes, const float* absmax_scale, float mean, const Levels& lv,
           void* out, int64_t n, cudaStream_t st) {
  if (n <= 0) return;
  if (reinterpret_cast<uintptr_t>(codes) % 8 || !aligned16(out))
    throw std::invalid_argument("nf4_dequantize: codes must be 8-byte and the output 16-byte aligned");
  const int th = 256;
  const int blocks = std::min(blocks_for(std::max<int64_t>(n / kPerThread, 1), th), 8192);
  nf4_kernel<T><<<blocks, th, 0, st>>>(codes, absmax_codes, absmax_scale, mean, lv, static_cast<T*>(out), n);
  check_launch("nf4_dequantize");
}

}  // namespace

void nf4_dequantize(Dtype t, const uint8_t* codes, const uint8_t* absmax_codes, const float* absmax_scale, float mean,
                    const float* levels, void* out, int64_t n, void* stream) {
  Levels lv;
  std::copy(levels, levels + 16, lv.v);
  PLANNER_DISPATCH(t, nf4_t, codes, absmax_codes, absmax_scale, mean, lv, out, n, S(stream));
}

}  // namespace planner::rt::fused
