// FP8 per-tensor scaling kernels (declarations: fused_kernels.hpp). ATen's
// path (runtime/model/fp8_linear.cpp) takes an amax reduction, five tiny
// kernels for the scale and its inverse, a scale multiply into an fp32
// temporary and a cast, all on PyTorch's non-vectorized elementwise path, plus
// a transposing copy per backward operand (validation/h100x4/diag23: 0.34 s of
// a 0.49 s llama-3.2-1b step). Here: one reduction, then one cast that
// computes the scale itself and writes the fp8 bytes row-major, transposed, or
// both.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "runtime/kernels/fused_kernels.hpp"
#include "runtime/kernels/kernel_util.cuh"

namespace planner::rt::fused {
namespace {

constexpr float kE4m3Max = 448.f, kE5m2Max = 57344.f;

// Non-negative floats order as their bit patterns; NaN (fabsf clears the
// sign) lies above every finite value and infinity, so a NaN propagates as
// ATen's max-norm does.
__device__ __forceinline__ unsigned abs_bits(float v) { return __float_as_uint(fabsf(v)); }

template <class T, int N>
__global__ void amax_kernel(const T* x, int64_t n, unsigned* amax) {
  unsigned m = 0;
  const int64_t groups = n / N, stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < groups; i += stride) {
    float v[N];
    load<T, N>(x + i * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) m = max(m, abs_bits(v[k]));
  }
  for (int64_t i = groups * N + first; i < n; i += stride) m = max(m, abs_bits(to_f(x[i])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ unsigned part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < int(blockDim.x >> 5) ? part[lane] : 0u;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) atomicMax(amax, m);
  }
}

// scale = fmax / amax as ATen computes it: amax.reciprocal() then * fmax, in fp32.
__device__ __forceinline__ float scale_of(const float* amax, float fmax) {
  const float a = *amax;
  return a > 0.f ? (1.f / a) * fmax : 1.f;
}

template <bool E5>
__device__ __forceinline__ uint8_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, E5 ? __NV_E5M2 : __NV_E4M3);
}

// Row-major only: N elements a thread (16-byte loads), N bytes stored at once.
template <class T, int N, bool E5>
__global__ void cast_kernel(const T* x, int64_t n, const float* amax, uint8_t* out, float* scale_inv) {
  const float s = scale_of(amax, E5 ? kE5m2Max : kE4m3Max);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.f / s;
  const int64_t groups = n / N, stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < groups; i += stride) {
    float v[N];
    load<T, N>(x + i * N, v);
    Pack<uint8_t, N> q;
#pragma unroll
    for (int k = 0; k < N; ++k) q.v[k] = to_fp8<E5>(v[k] * s);
    *reinterpret_cast<Pack<uint8_t, N>*>(out + i * N) = q;
  }
  for (int64_t i = groups * N + first; i < n; i += stride) out[i] = to_fp8<E5>(to_f(x[i]) * s);
}

// Transposed (and, when out is given, row-major too), 16-bit inputs: a 64 x 64
// tile a block of 256 threads. Loading, each thread takes eight adjacent
// elements (one 16-byte load) of a row, eight threads a row, 32 rows a pass;
// storing, eight threads write a transposed row's 64 bytes, eight bytes each,
// gathered from the tile in shared memory (rows padded to 68 bytes: at most
// two threads of a warp on a bank).
constexpr int kTile = 64, kPad = kTile + 4, kThreads = 256, kVec = 8;

template <class T, bool E5>
__global__ void cast_t_kernel(const T* x, int64_t rows, int64_t cols, const float* amax, uint8_t* out, uint8_t* out_t,
                              float* scale_inv) {
  static_assert(sizeof(T) * kVec == 16, "16-bit elements, eight to a 16-byte load");
  __shared__ __align__(16) uint8_t tile[kTile][kPad];
  const float s = scale_of(amax, E5 ? kE5m2Max : kE4m3Max);
  const int t = threadIdx.x;
  if (blockIdx.x == 0 && blockIdx.y == 0 && t == 0) *scale_inv = 1.f / s;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int lane8 = (t % 8) * kVec;  // this thread's eight elements (load) or eight bytes (store)
#pragma unroll
  for (int pass = 0; pass < kTile * kTile / (kThreads * kVec); ++pass) {
    const int lr = t / 8 + pass * (kThreads / 8);
    const int64_t r = r0 + lr, c = c0 + lane8;
    if (r < rows && c < cols) {
      float v[kVec];
      load<T, kVec>(x + r * cols + c, v);
      Pack<uint8_t, kVec> q;
#pragma unroll
      for (int k = 0; k < kVec; ++k) q.v[k] = to_fp8<E5>(v[k] * s);
      if (out) *reinterpret_cast<Pack<uint8_t, kVec>*>(out + r * cols + c) = q;
      uint32_t w[2];
      memcpy(w, q.v, 8);
      *reinterpret_cast<uint32_t*>(&tile[lr][lane8]) = w[0];
      *reinterpret_cast<uint32_t*>(&tile[lr][lane8 + 4]) = w[1];
    }
  }
  __syncthreads();
#pragma unroll
  for (int pass = 0; pass < kTile * kTile / (kThreads * kVec); ++pass) {
    const int lc = t / 8 + pass * (kThreads / 8);
    const int64_t c = c0 + lc, r = r0 + lane8;
    if (c < cols && r < rows) {
      Pack<uint8_t, kVec> q;
#pragma unroll
      for (int k = 0; k < kVec; ++k) q.v[k] = tile[lane8 + k][lc];
      *reinterpret_cast<Pack<uint8_t, kVec>*>(out_t + c * rows + r) = q;
    }
  }
}

template <class T>
void amax_t(const void* x, int64_t n, float* amax, cudaStream_t st) {
  constexpr int V = 16 / sizeof(T);
  const int th = 256;
  const cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), st);
  if (e != cudaSuccess) throw std::runtime_error(std::string("fp8_amax (memset): ") + cudaGetErrorString(e));
  auto* u = reinterpret_cast<unsigned*>(amax);
  const int blocks = std::min(blocks_for(std::max<int64_t>(n / V, 1), th), 2048);
  if (aligned16(x))
    amax_kernel<T, V><<<blocks, th, 0, st>>>(static_cast<const T*>(x), n, u);
  else
    amax_kernel<T, 1><<<blocks, th, 0, st>>>(static_cast<const T*>(x), n, u);
  check_launch("fp8_amax");
}

template <class T, bool E5>
void cast_e(const T* x, int64_t rows, int64_t cols, const float* amax, uint8_t* out, uint8_t* out_t, float* scale_inv,
            cudaStream_t st) {
  if (out_t) {
    if constexpr (sizeof(T) == 2) {
      const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile));
      cast_t_kernel<T, E5><<<grid, kThreads, 0, st>>>(x, rows, cols, amax, out, out_t, scale_inv);
    } else {
      throw std::invalid_argument("fp8_cast: the transposed cast takes 16-bit inputs (fp8_cast_supported)");
    }
    return;
  }
  constexpr int V = 16 / sizeof(T);
  const int th = 256;
  const int64_t n = rows * cols;
  if (aligned16(x) && (reinterpret_cast<uintptr_t>(out) % V) == 0)
    cast_kernel<T, V, E5><<<std::min(blocks_for(std::max<int64_t>(n / V, 1), th), 8192), th, 0, st>>>(x, n, amax, out,
                                                                                                     scale_inv);
  else
    cast_kernel<T, 1, E5><<<std::min(blocks_for(n, th), 8192), th, 0, st>>>(x, n, amax, out, scale_inv);
}

template <class T>
void cast_t(const void* x, int64_t rows, int64_t cols, const float* amax, bool e5m2, void* out, void* out_t,
            float* scale_inv, cudaStream_t st) {
  const T* in = static_cast<const T*>(x);
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  if (e5m2) cast_e<T, true>(in, rows, cols, amax, o, ot, scale_inv, st);
  else cast_e<T, false>(in, rows, cols, amax, o, ot, scale_inv, st);
  check_launch("fp8_cast");
}

}  // namespace

void fp8_amax(Dtype t, const void* x, int64_t n, float* amax, void* stream) {
  PLANNER_DISPATCH(t, amax_t, x, n, amax, S(stream));
}

bool fp8_cast_supported(Dtype t, const void* x, int64_t rows, int64_t cols) {
  return t != Dtype::F32 && rows % kVec == 0 && cols % kVec == 0 && aligned16(x) &&
         (cols + kTile - 1) / kTile < (int64_t(1) << 31) && (rows + kTile - 1) / kTile < 65536;
}

void fp8_cast(Dtype t, const void* x, int64_t rows, int64_t cols, const float* amax, bool e5m2, void* out, void* out_t,
              float* scale_inv, void* stream) {
  PLANNER_DISPATCH(t, cast_t, x, rows, cols, amax, e5m2, out, out_t, scale_inv, S(stream));
}

}  // namespace planner::rt::fused
