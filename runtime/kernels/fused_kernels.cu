// The runtime's fused CUDA kernels (declarations and layouts: fused_kernels.hpp).
// Each replaces a chain of ATen elementwise kernels that the H100 kernel profile
// of validation/h100/compile showed as the gap to torch.compile: one read of
// each input and one write of each output, 16-byte vector accesses where the
// widths allow, fp32 arithmetic.
#include "runtime/kernels/fused_kernels.hpp"
#include "runtime/kernels/kernel_util.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace planner::rt::fused {
namespace {

// to_f, from_f, Pack, load, store, blocks_for, check_launch, aligned16, S: kernel_util.cuh.

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

__device__ __forceinline__ float act(float g, bool gelu) {
  if (gelu) return 0.5f * g * (1.f + tanhf(kSqrt2OverPi * (g + kGeluC * g * g * g)));
  return g / (1.f + __expf(-g));
}
__device__ __forceinline__ float act_grad(float g, bool gelu) {
  if (gelu) {
    const float t = tanhf(kSqrt2OverPi * (g + kGeluC * g * g * g));
    return 0.5f * (1.f + t) + 0.5f * g * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluC * g * g);
  }
  const float sg = 1.f / (1.f + __expf(-g));
  return sg * (1.f + g * (1.f - sg));
}


// ---- GLU -------------------------------------------------------------------

template <class T, int N>
__global__ void glu_fwd_kernel(const T* u, T* a, int64_t rows, int64_t f, bool gelu) {
  const int64_t groups = f / N, total = rows * groups;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups, j = (i % groups) * N;
    float g[N], up[N], out[N];
    load<T, N>(u + r * 2 * f + j, g);
    load<T, N>(u + r * 2 * f + f + j, up);
#pragma unroll
    for (int n = 0; n < N; ++n) out[n] = act(g[n], gelu) * up[n];
    store<T, N>(a + r * f + j, out);
  }
}

template <class T, int N>
__global__ void glu_bwd_kernel(const T* u, const T* da, T* du, int64_t rows, int64_t f, bool gelu) {
  const int64_t groups = f / N, total = rows * groups;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups, j = (i % groups) * N;
    float g[N], up[N], d[N], dg[N], dup[N];
    load<T, N>(u + r * 2 * f + j, g);
    load<T, N>(u + r * 2 * f + f + j, up);
    load<T, N>(da + r * f + j, d);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      dg[n] = d[n] * up[n] * act_grad(g[n], gelu);
      dup[n] = d[n] * act(g[n], gelu);
    }
    store<T, N>(du + r * 2 * f + j, dg);
    store<T, N>(du + r * 2 * f + f + j, dup);
  }
}

template <class T>
void glu_fwd_t(const void* u, void* a, int64_t rows, int64_t f, bool gelu, cudaStream_t st) {
  constexpr int V = 16 / sizeof(T);
  const int th = 256;
  if (f % V == 0 && aligned16(u) && aligned16(a))
    glu_fwd_kernel<T, V><<<blocks_for(rows * (f / V), th), th, 0, st>>>(static_cast<const T*>(u), static_cast<T*>(a),
                                                                         rows, f, gelu);
  else
    glu_fwd_kernel<T, 1><<<blocks_for(rows * f, th), th, 0, st>>>(static_cast<const T*>(u), static_cast<T*>(a), rows,
                                                                   f, gelu);
  check_launch("glu_forward");
}

template <class T>
void glu_bwd_t(const void* u, const void* da, void* du, int64_t rows, int64_t f, bool gelu, cudaStream_t st) {
  constexpr int V = 16 / sizeof(T);
  const int th = 256;
  if (f % V == 0 && aligned16(u) && aligned16(da) && aligned16(du))
    glu_bwd_kernel<T, V><<<blocks_for(rows * (f / V), th), th, 0, st>>>(
        static_cast<const T*>(u), static_cast<const T*>(da), static_cast<T*>(du), rows, f, gelu);
  else
    glu_bwd_kernel<T, 1><<<blocks_for(rows * f, th), th, 0, st>>>(static_cast<const T*>(u), static_cast<const T*>(da),
                                                                   static_cast<T*>(du), rows, f, gelu);
  check_launch("glu_backward");
}

// ---- rotary ------------------------------------------------------------------

// One thread per N consecutive elements of a row of qkv (N divides d / 2, so a
// group never straddles the halves of a head). Forward, for x's element i of
// a head with partner p = i + d/2 (first half) or i - d/2 (second half):
// y_i = x_i cos_i - x_p sin_i (first half), x_i cos_i + x_p sin_i (second).
// Backward (the transpose): dx_i = dy_i cos_i + dy_p sin_p (first half),
// dy_i cos_i - dy_p sin_p (second).
template <class T, int N, bool Backward>
__global__ void rotary_kernel(const T* in_q, const T* in_k, const T* in_v, const T* cos, const T* sin, T* out_q,
                              T* out_k, T* out_v, const T* qkv, T* dqkv, int64_t rows, int64_t s, int64_t nq,
                              int64_t nkv, int64_t d) {
  const int64_t qw = nq * d, kw = nkv * d, width = qw + 2 * kw, groups = width / N, total = rows * groups;
  const int64_t half = d / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups, c = (i % groups) * N;
    // Where this group lives: its source and destination, by part.
    const T* src;
    T* dst;
    int64_t col, part_w;
    bool rotate = true;
    if (c < qw) {
      col = c, part_w = qw;
    } else if (c < qw + kw) {
      col = c - qw, part_w = kw;
    } else {
      col = c - qw - kw, part_w = kw, rotate = false;
    }
    if (!Backward) {
      src = qkv + r * width + (c - col);  // the part's start in this row of qkv
      dst = c < qw ? out_q : c < qw + kw ? out_k : out_v;
      dst += r * part_w;
    } else {
      src = c < qw ? in_q : c < qw + kw ? in_k : in_v;
      src += r * part_w;
      dst = dqkv + r * width + (c - col);
    }
    float x[N], y[N];
    load<T, N>(src + col, x);
    if (rotate) {
      const int64_t dd = col % d, pos = r % s;
      const bool first = dd < half;
      const int64_t pcol = first ? col + half : col - half;
      float xp[N], cs[N], sn[N];
      load<T, N>(src + pcol, xp);
      load<T, N>(cos + pos * d + dd, cs);
      if (!Backward) {
        load<T, N>(sin + pos * d + dd, sn);
#pragma unroll
        for (int n = 0; n < N; ++n) y[n] = first ? x[n] * cs[n] - xp[n] * sn[n] : x[n] * cs[n] + xp[n] * sn[n];
      } else {
        load<T, N>(sin + pos * d + (first ? dd + half : dd - half), sn);
#pragma unroll
        for (int n = 0; n < N; ++n) y[n] = first ? x[n] * cs[n] + xp[n] * sn[n] : x[n] * cs[n] - xp[n] * sn[n];
      }
    } else {
#pragma unroll
      for (int n = 0; n < N; ++n) y[n] = x[n];
    }
    store<T, N>(dst + col, y);
  }
}

template <class T, bool Backward>
void rotary_t(const void* in_q, const void* in_k, const void* in_v, const void* cos, const void* sin, void* q, void* k,
              void* v, const void* qkv, void* dqkv, int64_t rows, int64_t s, int64_t nq, int64_t nkv, int64_t d,
              cudaStream_t st) {
  constexpr int V = 16 / sizeof(T);
  const int th = 256;
  const int64_t width = (nq + 2 * nkv) * d;
  const bool vec = (d / 2) % V == 0 && aligned16(cos) && aligned16(sin) &&
                   (Backward ? aligned16(in_q) && aligned16(in_k) && aligned16(in_v) && aligned16(dqkv)
                             : aligned16(qkv) && aligned16(q) && aligned16(k) && aligned16(v));
  auto C = [](const void* p) { return static_cast<const T*>(p); };
  auto M = [](void* p) { return static_cast<T*>(p); };
  if (vec)
    rotary_kernel<T, V, Backward><<<blocks_for(rows * (width / V), th), th, 0, st>>>(
        C(in_q), C(in_k), C(in_v), C(cos), C(sin), M(q), M(k), M(v), C(qkv), M(dqkv), rows, s, nq, nkv, d);
  else
    rotary_kernel<T, 1, Backward><<<blocks_for(rows * width, th), th, 0, st>>>(
        C(in_q), C(in_k), C(in_v), C(cos), C(sin), M(q), M(k), M(v), C(qkv), M(dqkv), rows, s, nq, nkv, d);
  check_launch(Backward ? "rotary_backward" : "rotary_forward");
}

// ---- cross-entropy ---------------------------------------------------------------

constexpr int kCeThreads = 512;

// (max, sum of exp(x - max)) pairs merged.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2, s = s2;
    return;
  }
  if (m2 > m) {
    s = s * __expf(m - m2) + s2;
    m = m2;
  } else {
    s += s2 * __expf(m2 - m);
  }
}

// One block per row.
template <class T, int N>
__global__ void ce_kernel(const T* logits, const int64_t* labels, const float* count, float scale, T* grad,
                          float* row_loss, int64_t V) {
  const int64_t r = blockIdx.x;
  const T* z = logits + r * V;
  T* g = grad + r * V;
  float m = -INFINITY, s = 0.f;
  for (int64_t j = int64_t(threadIdx.x) * N; j < V; j += int64_t(blockDim.x) * N) {
    float x[N];
    load<T, N>(z + j, x);
#pragma unroll
    for (int n = 0; n < N; ++n) merge(m, s, x[n], 1.f);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge(m, s, m2, s2);
  }
  __shared__ float sm[kCeThreads / 32], ss[kCeThreads / 32];
  __shared__ float row_m, row_s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sm[warp] = m, ss[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = -INFINITY, S = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) merge(M, S, sm[w], ss[w]);
    row_m = M, row_s = S;
  }
  __syncthreads();
  const float M = row_m, inv = 1.f / row_s;
  const int64_t label = labels[r];
  const bool valid = label != -100;
  const float w = valid ? scale / *count : 0.f;
  if (threadIdx.x == 0) row_loss[r] = valid ? (logf(row_s) + M - to_f(z[label])) : 0.f;
  for (int64_t j = int64_t(threadIdx.x) * N; j < V; j += int64_t(blockDim.x) * N) {
    float x[N], y[N];
    load<T, N>(z + j, x);
#pragma unroll
    for (int n = 0; n < N; ++n) y[n] = (__expf(x[n] - M) * inv - (j + n == label ? 1.f : 0.f)) * w;
    store<T, N>(g + j, y);
  }
}

template <class T>
void ce_t(const void* logits, const int64_t* labels, const float* count, double scale, void* grad, float* row_loss,
          int64_t rows, int64_t V, cudaStream_t st) {
  constexpr int Vec = 16 / sizeof(T);
  if (rows <= 0) return;
  const unsigned grid = unsigned(rows);
  if (V % Vec == 0 && aligned16(logits) && aligned16(grad))
    ce_kernel<T, Vec><<<grid, kCeThreads, 0, st>>>(static_cast<const T*>(logits), labels, count, float(scale),
                                                   static_cast<T*>(grad), row_loss, V);
  else
    ce_kernel<T, 1><<<grid, kCeThreads, 0, st>>>(static_cast<const T*>(logits), labels, count, float(scale),
                                                 static_cast<T*>(grad), row_loss, V);
  check_launch("cross_entropy_forward");
}

// ---- norms --------------------------------------------------------------------

// The sum over the block of one value per thread, returned to every thread
// (blockDim.x a multiple of 32, at most 1024). sh holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // the previous call's readers are done with sh
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) t += sh[w];
  return t;
}

// Two sums at once (one pair of barriers). sh holds 64 floats.
__device__ __forceinline__ void block_sum2(float& a, float& b, float* sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = a, sh[32 + threadIdx.x / 32] = b;
  __syncthreads();
  a = 0.f, b = 0.f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) a += sh[w], b += sh[32 + w];
}

// A block per row (grid-stride over rows); thread t holds vectors t, t + blockDim,
// ... (K of them, N elements each) of the row in registers. Optional residual:
// a = round(x + y) is written to sum (the norm then reads the rounded sum, as
// the unfused add and norm do).
template <class T, int N, int K>
__global__ void norm_fwd_kernel(const T* x, const T* y, const T* w, const T* b, T* sum, T* out, float* mean_out,
                                float* rstd_out, int64_t rows, int64_t h, float eps, bool rms) {
  __shared__ float sh[32];
  const int64_t nv = h / N;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float v[K][N];
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (j < nv) {
        load<T, N>(x + r * h + j * N, v[k]);
        if (y) {
          float yv[N];
          load<T, N>(y + r * h + j * N, yv);
#pragma unroll
          for (int n = 0; n < N; ++n) v[k][n] = to_f(from_f<T>(v[k][n] + yv[n]));
          store<T, N>(sum + r * h + j * N, v[k]);
        }
#pragma unroll
        for (int n = 0; n < N; ++n) s += rms ? v[k][n] * v[k][n] : v[k][n];
      }
    }
    float mean = 0.f, rstd;
    if (rms) {
      rstd = rsqrtf(block_sum(s, sh) / float(h) + eps);
    } else {
      mean = block_sum(s, sh) / float(h);
      float q = 0.f;
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (threadIdx.x + int64_t(k) * blockDim.x < nv)
#pragma unroll
          for (int n = 0; n < N; ++n) q += (v[k][n] - mean) * (v[k][n] - mean);
      rstd = rsqrtf(block_sum(q, sh) / float(h) + eps);
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (j < nv) {
        float wv[N], bv[N], o[N];
        load<T, N>(w + j * N, wv);
        if (b) load<T, N>(b + j * N, bv);
#pragma unroll
        for (int n = 0; n < N; ++n) o[n] = (v[k][n] - mean) * rstd * wv[n] + (b ? bv[n] : 0.f);
        store<T, N>(out + r * h + j * N, o);
      }
    }
    if (threadIdx.x == 0) {
      if (!rms) mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

// The input gradient of each row, plus the residual's gradient dres when
// given: da = rstd (g - mean(g) - xhat mean(g xhat)) + dres with g = dn w,
// xhat = (a - mean) rstd (RMSNorm: no mean terms). The weight and bias
// gradients, sum over rows of dn xhat and dn, accumulate in registers over
// the block's rows and are written per block (dw_part, db_part: gridDim x h,
// fp32); norm_reduce_kernel sums them.
template <class T, int N, int K>
__global__ void norm_bwd_kernel(const T* dn, const T* a, const T* w, const float* mean, const float* rstd,
                                const T* dres, T* da, float* dw_part, float* db_part, int64_t rows, int64_t h,
                                bool rms) {
  __shared__ float sh[64];
  const int64_t nv = h / N;
  float dw[K][N], db[K][N];
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int n = 0; n < N; ++n) dw[k][n] = 0.f, db[k][n] = 0.f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float mu = rms ? 0.f : mean[r], rs = rstd[r];
    float xh[K][N], g[K][N];
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (j < nv) {
        float d[N], av[N], wv[N];
        load<T, N>(dn + r * h + j * N, d);
        load<T, N>(a + r * h + j * N, av);
        load<T, N>(w + j * N, wv);
#pragma unroll
        for (int n = 0; n < N; ++n) {
          xh[k][n] = (av[n] - mu) * rs;
          g[k][n] = d[n] * wv[n];
          s1 += g[k][n];
          s2 += g[k][n] * xh[k][n];
          dw[k][n] += d[n] * xh[k][n];
          db[k][n] += d[n];
        }
      }
    }
    if (rms)
      s2 = block_sum(s2, sh);
    else
      block_sum2(s1, s2, sh);
    const float m2 = s2 / float(h), m1 = rms ? 0.f : s1 / float(h);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (j < nv) {
        float o[N], rv[N];
        if (dres) load<T, N>(dres + r * h + j * N, rv);
#pragma unroll
        for (int n = 0; n < N; ++n) o[n] = rs * (g[k][n] - m1 - xh[k][n] * m2) + (dres ? rv[n] : 0.f);
        store<T, N>(da + r * h + j * N, o);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
    if (j < nv)
#pragma unroll
      for (int n = 0; n < N; ++n) {
        dw_part[blockIdx.x * h + j * N + n] = dw[k][n];
        if (db_part) db_part[blockIdx.x * h + j * N + n] = db[k][n];
      }
  }
}

// out[c] = sum over p < parts of part[p, c], written in T: blocks of 32 columns
// x 32 row groups (each thread sums every 32nd part of its column, coalesced
// across the warp), then the 32 groups summed in shared memory. blockIdx.y
// picks the weight's (0) or the bias's (1) sums.
template <class T>
__global__ void norm_sum_parts_kernel(const float* dw_part, const float* db_part, T* dw, T* db, int parts,
                                      int64_t h) {
  __shared__ float sh[32][33];
  const float* part = blockIdx.y == 0 ? dw_part : db_part;
  T* out = blockIdx.y == 0 ? dw : db;
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.f;
  if (c < h)
    for (int p = threadIdx.y; p < parts; p += 32) acc += part[p * h + c];
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < h) {
    float t = 0.f;
#pragma unroll 8
    for (int g = 0; g < 32; ++g) t += sh[g][threadIdx.x];
    out[c] = from_f<T>(t);
  }
}

// The vectors per thread (K) and threads per block for a row of nv vectors:
// the fewest vectors per thread that keep the block at 512 threads or fewer;
// 0 threads when even 8 vectors per thread would need more than 1024.
struct NormShape {
  int k = 0, threads = 0;
};
NormShape norm_shape(int64_t nv) {
  NormShape s;
  for (int k = 1; k <= 8; k *= 2) {
    const int64_t th = ((nv + k - 1) / k + 31) / 32 * 32;
    if (th <= 512 || (k == 8 && th <= 1024)) return {k, int(th)};
  }
  return s;
}

int vec_width(int64_t h, int elem, std::initializer_list<const void*> ptrs) {
  const int V = 16 / elem;
  if (h % V != 0) return 1;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return 1;
  return V;
}

// Calls f with std::integral_constant<int, k> for k in {1, 2, 4, 8} (the
// vectors per thread, a template argument of the norm kernels).
template <class F>
void with_k(int k, F&& f) {
  switch (k) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

template <class T, int N>
void norm_fwd_n(NormShape sh, const T* x, const T* y, const T* w, const T* b, T* sum, T* out, float* mean,
                float* rstd, int64_t rows, int64_t h, float eps, bool rms, cudaStream_t st) {
  const unsigned grid = unsigned(rows < 65535 * 16 ? rows : 65535 * 16);
  with_k(sh.k, [&](auto K) {
    norm_fwd_kernel<T, N, decltype(K)::value>
        <<<grid, sh.threads, 0, st>>>(x, y, w, b, sum, out, mean, rstd, rows, h, eps, rms);
  });
}

template <class T>
void norm_fwd_t(const void* x, const void* y, const void* w, const void* b, void* sum, void* out, float* mean,
                float* rstd, int64_t rows, int64_t h, double eps, bool rms, cudaStream_t st) {
  if (rows <= 0) return;
  const int N = vec_width(h, sizeof(T), {x, y, w, b, sum, out});
  const NormShape sh = norm_shape(h / N);
  if (sh.threads == 0) throw std::runtime_error("norm_forward: hidden size " + std::to_string(h) + " too wide");
  auto C = [](const void* p) { return static_cast<const T*>(p); };
  auto M = [](void* p) { return static_cast<T*>(p); };
  if (N > 1)
    norm_fwd_n<T, 16 / sizeof(T)>(sh, C(x), C(y), C(w), C(b), M(sum), M(out), mean, rstd, rows, h, float(eps), rms,
                                  st);
  else
    norm_fwd_n<T, 1>(sh, C(x), C(y), C(w), C(b), M(sum), M(out), mean, rstd, rows, h, float(eps), rms, st);
  check_launch("norm_forward");
}

template <class T, int N>
void norm_bwd_n(NormShape sh, unsigned grid, const T* dn, const T* a, const T* w, const float* mean,
                const float* rstd, const T* dres, T* da, float* dw_part, float* db_part, int64_t rows, int64_t h,
                bool rms, cudaStream_t st) {
  with_k(sh.k, [&](auto K) {
    norm_bwd_kernel<T, N, decltype(K)::value>
        <<<grid, sh.threads, 0, st>>>(dn, a, w, mean, rstd, dres, da, dw_part, db_part, rows, h, rms);
  });
}

template <class T>
void norm_bwd_t(const void* dn, const void* a, const void* w, const float* mean, const float* rstd, const void* dres,
                void* da, float* dw_part, float* db_part, void* dw, void* db, int parts, int64_t rows, int64_t h,
                bool rms, cudaStream_t st) {
  const int N = vec_width(h, sizeof(T), {dn, a, w, dres, da});
  const NormShape sh = norm_shape(h / N);
  if (sh.threads == 0) throw std::runtime_error("norm_backward: hidden size " + std::to_string(h) + " too wide");
  auto C = [](const void* p) { return static_cast<const T*>(p); };
  if (rows > 0) {
    if (N > 1)
      norm_bwd_n<T, 16 / sizeof(T)>(sh, unsigned(parts), C(dn), C(a), C(w), mean, rstd, C(dres), static_cast<T*>(da),
                                    dw_part, db_part, rows, h, rms, st);
    else
      norm_bwd_n<T, 1>(sh, unsigned(parts), C(dn), C(a), C(w), mean, rstd, C(dres), static_cast<T*>(da), dw_part,
                       db_part, rows, h, rms, st);
    check_launch("norm_backward");
  }
  const dim3 grid(unsigned((h + 31) / 32), db_part ? 2u : 1u), block(32, 32);
  norm_sum_parts_kernel<T><<<grid, block, 0, st>>>(dw_part, db_part, static_cast<T*>(dw), static_cast<T*>(db),
                                                   rows > 0 ? parts : 0, h);
  check_launch("norm_backward (weight gradients)");
}


}  // namespace

void glu_forward(Dtype t, const void* u, void* a, int64_t rows, int64_t f, bool gelu, void* stream) {
  PLANNER_DISPATCH(t, glu_fwd_t, u, a, rows, f, gelu, S(stream));
}
void glu_backward(Dtype t, const void* u, const void* da, void* du, int64_t rows, int64_t f, bool gelu, void* stream) {
  PLANNER_DISPATCH(t, glu_bwd_t, u, da, du, rows, f, gelu, S(stream));
}

template <class T>
void rotary_fwd_t(const void* qkv, const void* cos, const void* sin, void* q, void* k, void* v, int64_t rows, int64_t s,
                  int64_t nq, int64_t nkv, int64_t d, cudaStream_t st) {
  rotary_t<T, false>(nullptr, nullptr, nullptr, cos, sin, q, k, v, qkv, nullptr, rows, s, nq, nkv, d, st);
}
template <class T>
void rotary_bwd_t(const void* dq, const void* dk, const void* dv, const void* cos, const void* sin, void* dqkv,
                  int64_t rows, int64_t s, int64_t nq, int64_t nkv, int64_t d, cudaStream_t st) {
  rotary_t<T, true>(dq, dk, dv, cos, sin, nullptr, nullptr, nullptr, nullptr, dqkv, rows, s, nq, nkv, d, st);
}

void rotary_forward(Dtype t, const void* qkv, const void* cos, const void* sin, void* q, void* k, void* v,
                    int64_t rows, int64_t s, int64_t nq, int64_t nkv, int64_t d, void* stream) {
  PLANNER_DISPATCH(t, rotary_fwd_t, qkv, cos, sin, q, k, v, rows, s, nq, nkv, d, S(stream));
}
void rotary_backward(Dtype t, const void* dq, const void* dk, const void* dv, const void* cos, const void* sin,
                     void* dqkv, int64_t rows, int64_t s, int64_t nq, int64_t nkv, int64_t d, void* stream) {
  PLANNER_DISPATCH(t, rotary_bwd_t, dq, dk, dv, cos, sin, dqkv, rows, s, nq, nkv, d, S(stream));
}

void cross_entropy_forward(Dtype t, const void* logits, const int64_t* labels, const float* count, double scale,
                           void* grad, float* row_loss, int64_t rows, int64_t V, void* stream) {
  PLANNER_DISPATCH(t, ce_t, logits, labels, count, scale, grad, row_loss, rows, V, S(stream));
}

bool norm_supported(Dtype t, int64_t h, bool aligned) {
  const int64_t V = 16 / (t == Dtype::F32 ? 4 : 2);
  if (h <= 0) return false;
  if (aligned && h % V == 0 && norm_shape(h / V).threads > 0) return true;
  return norm_shape(h).threads > 0;
}

int norm_backward_parts(int64_t rows) {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 132;
  // Four blocks an SM: enough resident threads to hide the loads' latency,
  // few enough that the partial sums (parts x h fp32) stay small.
  const int64_t want = 4 * int64_t(sms);
  return int(rows < want ? (rows > 0 ? rows : 1) : want);
}

void norm_forward(Dtype t, const void* x, const void* y, const void* w, const void* b, void* sum, void* out,
                  float* mean, float* rstd, int64_t rows, int64_t h, double eps, bool rms, void* stream) {
  PLANNER_DISPATCH(t, norm_fwd_t, x, y, w, b, sum, out, mean, rstd, rows, h, eps, rms, S(stream));
}

void norm_backward(Dtype t, const void* dn, const void* a, const void* w, const float* mean, const float* rstd,
                   const void* dres, void* da, float* dw_part, float* db_part, void* dw, void* db, int parts,
                   int64_t rows, int64_t h, bool rms, void* stream) {
  PLANNER_DISPATCH(t, norm_bwd_t, dn, a, w, mean, rstd, dres, da, dw_part, db_part, dw, db, parts, rows, h, rms,
                   S(stream));
}

// ---- scaling by a device scalar ------------------------------------------------

template <class T, int N>
__global__ void scale_kernel(T* x, int64_t n, const float* num, float inv_den) {
  const float r = *num * inv_den;
  if (r == 1.f) return;
  const int64_t groups = n / N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    float v[N];
    load<T, N>(x + i * N, v);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] *= r;
    store<T, N>(x + i * N, v);
  }
}

template <class T>
void scale_t(void* x, int64_t n, const float* num, double den, cudaStream_t st) {
  constexpr int V = 16 / sizeof(T);
  const int th = 256;
  if (n <= 0) return;
  const float inv = float(1.0 / den);
  // A grid of at most 4096 blocks (grid-stride): when the ratio is 1 every
  // block only reads it and returns, and half a million such blocks cost 0.3 ms.
  auto grid = [&](int64_t work) { return std::min(blocks_for(work, th), 4096); };
  if (n % V == 0 && aligned16(x))
    scale_kernel<T, V><<<grid(n / V), th, 0, st>>>(static_cast<T*>(x), n, num, inv);
  else
    scale_kernel<T, 1><<<grid(n), th, 0, st>>>(static_cast<T*>(x), n, num, inv);
  check_launch("scale_by_ratio");
}

void scale_by_ratio(Dtype t, void* x, int64_t n, const float* num, double den, void* stream) {
  PLANNER_DISPATCH(t, scale_t, x, n, num, den, S(stream));
}

}  // namespace planner::rt::fused
