#pragma once
// Helpers the runtime's CUDA kernels share (fused_kernels.cu, fp8_kernels.cu):
// conversions to and from fp32, 16-byte vector loads and stores, the grid
// size of a grid-stride loop, the launch check. nvcc only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace planner::rt::fused {
inline namespace util {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// N elements of T loaded or stored as one 16-byte access (N * sizeof(T) == 16),
// or one at a time when N == 1.
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <class T, int N>
__device__ __forceinline__ void load(const T* p, float (&out)[N]) {
  const Pack<T, N> x = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_f(x.v[i]);
}
template <class T, int N>
__device__ __forceinline__ void store(T* p, const float (&in)[N]) {
  Pack<T, N> x;
#pragma unroll
  for (int i = 0; i < N; ++i) x.v[i] = from_f<T>(in[i]);
  *reinterpret_cast<Pack<T, N>*>(p) = x;
}

inline int blocks_for(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return int(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

inline cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace util
}  // namespace planner::rt::fused

// F<T>(args...) for the element type of a fused::Dtype t.
#define PLANNER_DISPATCH(t, F, ...)                   \
  switch (t) {                                        \
    case Dtype::F32: F<float>(__VA_ARGS__); break;    \
    case Dtype::F16: F<__half>(__VA_ARGS__); break;   \
    case Dtype::BF16: F<__nv_bfloat16>(__VA_ARGS__); break; \
  }
