// Qwen3's and Gemma-3's per-head RMS norms of q and k with the rotary
// positions after them, on the fused projection's output, one kernel each way
// (runtime/kernels/fused_kernels.hpp, qk_norm_rotary_*). ATen ran them as a
// strided copy, a norm and a rotation per tensor, and its norm backward's
// weight-gradient kernel over many 128- or 256-wide rows took 0.0146 s of a
// 0.47 s Gemma-3-1B step on one H200 (validation/h200/gemma3_54).
//
// A head of one token is a row of d elements. G = d / (2 N) threads share a
// row (G a power of two up to 32, so a row's threads sit in one warp and sum
// with shuffles over G lanes): thread t holds the N-element vectors at
// columns t N of both halves, so the rotation's partner of every element it
// holds is its own. A block of 256 threads takes 256 / G rows at a time.
#include "runtime/kernels/fused_kernels.hpp"
#include "runtime/kernels/kernel_util.cuh"

namespace planner::rt::fused {
namespace {

constexpr int kQkThreads = 256;

// The sum of v over the G lanes of a row (every lane of the warp calls it).
__device__ __forceinline__ float row_sum(float v, int G) {
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, G);
  return v;
}

struct QkDims {
  int64_t rows, s, d;  // tokens, rotary table rows (row r at position r mod s), head width
  int nq, nkv;
  float eps;
};

// A head's values at this thread's columns of both halves, and their sum of squares.
template <class T, int N>
__device__ __forceinline__ float load_head(const T* src, int64_t c, int64_t half, float (&x1)[N], float (&x2)[N]) {
  load<T, N>(src + c, x1);
  load<T, N>(src + half + c, x2);
  float ss = 0.f;
#pragma unroll
  for (int n = 0; n < N; ++n) ss += x1[n] * x1[n] + x2[n] * x2[n];
  return ss;
}

// Row r's rotary tables and a head's weights at this thread's columns c (first
// half) and half + c (second half).
template <class T, int N>
struct RowTables {
  float w1[N], w2[N], c1[N], c2[N], s1[N], s2[N];
  __device__ __forceinline__ RowTables(const T* w, const T* cos, const T* sin, int64_t pos, int64_t c, int64_t half) {
    load<T, N>(w + c, w1);
    load<T, N>(w + half + c, w2);
    load<T, N>(cos + pos + c, c1);
    load<T, N>(cos + pos + half + c, c2);
    load<T, N>(sin + pos + c, s1);
    load<T, N>(sin + pos + half + c, s2);
  }
};

// Forward: head j < nq of token r is q's head j, else k's head j - nq; both
// read from qkv's row r at column j d. n = x rstd w, y1 = n1 cos1 - n2 sin1,
// y2 = n2 cos2 + n1 sin2 (halves 1 and 2 of the head).
template <class T, int N>
__global__ void qk_fwd_kernel(const T* qkv, const T* wq, const T* wk, const T* cos, const T* sin, T* q, T* k,
                              QkDims D, int G) {
  const int64_t half = D.d / 2, width = (D.nq + 2 * int64_t(D.nkv)) * D.d, heads = D.nq + D.nkv;
  const int64_t total = D.rows * heads, per_block = blockDim.x / G, c = int64_t(threadIdx.x % G) * N;
  for (int64_t base = blockIdx.x * per_block; base < total; base += int64_t(gridDim.x) * per_block) {
    const int64_t i = base + threadIdx.x / G;
    const bool ok = i < total;
    const int64_t r = ok ? i / heads : 0, j = ok ? i % heads : 0;
    float x1[N], x2[N];
    const float ss = row_sum(ok ? load_head<T, N>(qkv + r * width + j * D.d, c, half, x1, x2) : 0.f, G);
    if (!ok) continue;
    const float rstd = rsqrtf(ss / float(D.d) + D.eps);
    const RowTables<T, N> t(j < D.nq ? wq : wk, cos, sin, (r % D.s) * D.d, c, half);
    float y1[N], y2[N];
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const float n1 = x1[n] * rstd * t.w1[n], n2 = x2[n] * rstd * t.w2[n];
      y1[n] = n1 * t.c1[n] - n2 * t.s1[n];
      y2[n] = n2 * t.c2[n] + n1 * t.s2[n];
    }
    T* dst = j < D.nq ? q + (r * D.nq + j) * D.d : k + (r * D.nkv + (j - D.nq)) * D.d;
    store<T, N>(dst + c, y1);
    store<T, N>(dst + half + c, y2);
  }
}

// Backward over all nq + 2 nkv heads of each token: for q and k heads the
// rotation's transpose dn1 = dy1 cos1 + dy2 sin2, dn2 = dy2 cos2 - dy1 sin1,
// then the RMS norm's dx = rstd (g - xhat mean(g xhat)), g = dn w, xhat = x rstd
// (rstd recomputed from x), written into dqkv; v heads copy dv. The weight
// gradients sum dn xhat over rows: in registers, then the block's rows in
// shared memory, then one atomic add a column per block into dw (fp32, 2 d:
// q's then k's, zeroed by the caller).
template <class T, int N>
__global__ void qk_bwd_kernel(const T* dq, const T* dk, const T* dv, const T* qkv, const T* wq, const T* wk,
                              const T* cos, const T* sin, T* dqkv, float* dw, QkDims D, int G) {
  extern __shared__ float sh[];  // 2 d
  for (int64_t n = threadIdx.x; n < 2 * D.d; n += blockDim.x) sh[n] = 0.f;
  __syncthreads();
  const int64_t half = D.d / 2, width = (D.nq + 2 * int64_t(D.nkv)) * D.d, heads = D.nq + 2 * int64_t(D.nkv);
  const int64_t total = D.rows * heads, per_block = blockDim.x / G, c = int64_t(threadIdx.x % G) * N;
  float aq1[N], aq2[N], ak1[N], ak2[N];
#pragma unroll
  for (int n = 0; n < N; ++n) aq1[n] = aq2[n] = ak1[n] = ak2[n] = 0.f;
  for (int64_t base = blockIdx.x * per_block; base < total; base += int64_t(gridDim.x) * per_block) {
    const int64_t i = base + threadIdx.x / G;
    const bool ok = i < total;
    const int64_t r = ok ? i / heads : 0, j = ok ? i % heads : 0;
    const bool normed = ok && j < D.nq + D.nkv, isq = j < D.nq;
    T* out = dqkv + r * width + j * D.d;
    float x1[N], x2[N], dn1[N], dn2[N], w1[N], w2[N], ss = 0.f;
    if (ok && !normed) {  // a v head: its gradient copied
      const T* src = dv + (r * D.nkv + (j - D.nq - D.nkv)) * D.d;
      load<T, N>(src + c, x1);
      load<T, N>(src + half + c, x2);
      store<T, N>(out + c, x1);
      store<T, N>(out + half + c, x2);
    }
    if (normed) ss = load_head<T, N>(qkv + r * width + j * D.d, c, half, x1, x2);
    ss = row_sum(ss, G);
    const float rstd = rsqrtf(ss / float(D.d) + D.eps);
    float t = 0.f;
    if (normed) {
      const T* g = isq ? dq + (r * D.nq + j) * D.d : dk + (r * D.nkv + (j - D.nq)) * D.d;
      const RowTables<T, N> tb(isq ? wq : wk, cos, sin, (r % D.s) * D.d, c, half);
      float y1[N], y2[N];
      load<T, N>(g + c, y1);
      load<T, N>(g + half + c, y2);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        w1[n] = tb.w1[n], w2[n] = tb.w2[n];
        dn1[n] = y1[n] * tb.c1[n] + y2[n] * tb.s2[n];
        dn2[n] = y2[n] * tb.c2[n] - y1[n] * tb.s1[n];
        x1[n] *= rstd, x2[n] *= rstd;  // xhat
        t += dn1[n] * w1[n] * x1[n] + dn2[n] * w2[n] * x2[n];
      }
    }
    t = row_sum(t, G) / float(D.d);
    if (!normed) continue;
    float o1[N], o2[N];
#pragma unroll
    for (int n = 0; n < N; ++n) {
      o1[n] = rstd * (dn1[n] * w1[n] - x1[n] * t);
      o2[n] = rstd * (dn2[n] * w2[n] - x2[n] * t);
      if (isq) aq1[n] += dn1[n] * x1[n], aq2[n] += dn2[n] * x2[n];
      else ak1[n] += dn1[n] * x1[n], ak2[n] += dn2[n] * x2[n];
    }
    store<T, N>(out + c, o1);
    store<T, N>(out + half + c, o2);
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    atomicAdd(&sh[c + n], aq1[n]);
    atomicAdd(&sh[half + c + n], aq2[n]);
    atomicAdd(&sh[D.d + c + n], ak1[n]);
    atomicAdd(&sh[D.d + half + c + n], ak2[n]);
  }
  __syncthreads();
  for (int64_t n = threadIdx.x; n < 2 * D.d; n += blockDim.x) atomicAdd(&dw[n], sh[n]);
}

// Threads a row for vectors of N elements, or 0 when d does not split so.
int threads_per_row(int64_t d, int N) {
  if (d <= 0 || d % (2 * N) != 0) return 0;
  const int64_t g = d / (2 * N);
  return g <= 32 && (g & (g - 1)) == 0 ? int(g) : 0;
}

// The vector width the pointers and d allow: 16 bytes, else one element.
template <class T>
int qk_vec(int64_t d, std::initializer_list<const void*> ptrs) {
  constexpr int V = 16 / sizeof(T);
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return threads_per_row(d, 1) ? 1 : 0;
  return threads_per_row(d, V) ? V : threads_per_row(d, 1) ? 1 : 0;
}

template <class T>
void qk_fwd_t(const void* qkv, const void* wq, const void* wk, const void* cos, const void* sin, void* q, void* k,
              QkDims D, cudaStream_t st) {
  const int N = qk_vec<T>(D.d, {qkv, wq, wk, cos, sin, q, k});
  if (N == 0) throw std::runtime_error("qk_norm_rotary_forward: head width " + std::to_string(D.d) + " not taken");
  const int G = threads_per_row(D.d, N);
  const int blocks = blocks_for(D.rows * (D.nq + D.nkv) * G, kQkThreads);
  auto C = [](const void* p) { return static_cast<const T*>(p); };
  auto M = [](void* p) { return static_cast<T*>(p); };
  if (N > 1)
    qk_fwd_kernel<T, 16 / sizeof(T)>
        <<<blocks, kQkThreads, 0, st>>>(C(qkv), C(wq), C(wk), C(cos), C(sin), M(q), M(k), D, G);
  else
    qk_fwd_kernel<T, 1><<<blocks, kQkThreads, 0, st>>>(C(qkv), C(wq), C(wk), C(cos), C(sin), M(q), M(k), D, G);
  check_launch("qk_norm_rotary_forward");
}

template <class T>
void qk_bwd_t(const void* dq, const void* dk, const void* dv, const void* qkv, const void* wq, const void* wk,
              const void* cos, const void* sin, void* dqkv, float* dw, QkDims D, cudaStream_t st) {
  const int N = qk_vec<T>(D.d, {dq, dk, dv, qkv, wq, wk, cos, sin, dqkv});
  if (N == 0) throw std::runtime_error("qk_norm_rotary_backward: head width " + std::to_string(D.d) + " not taken");
  const int G = threads_per_row(D.d, N);
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 132;
  // Four blocks an SM (each ends with 2 d atomic adds), fewer for small inputs.
  const int blocks = std::min(4 * sms, blocks_for(D.rows * (D.nq + 2 * int64_t(D.nkv)) * G, kQkThreads));
  const size_t shared = size_t(2 * D.d) * sizeof(float);
  if (cudaMemsetAsync(dw, 0, shared, st) != cudaSuccess) throw std::runtime_error("qk_norm_rotary_backward: memset");
  auto C = [](const void* p) { return static_cast<const T*>(p); };
  if (N > 1)
    qk_bwd_kernel<T, 16 / sizeof(T)><<<blocks, kQkThreads, shared, st>>>(
        C(dq), C(dk), C(dv), C(qkv), C(wq), C(wk), C(cos), C(sin), static_cast<T*>(dqkv), dw, D, G);
  else
    qk_bwd_kernel<T, 1><<<blocks, kQkThreads, shared, st>>>(C(dq), C(dk), C(dv), C(qkv), C(wq), C(wk), C(cos),
                                                            C(sin), static_cast<T*>(dqkv), dw, D, G);
  check_launch("qk_norm_rotary_backward");
}

}  // namespace

bool qk_norm_rotary_supported(Dtype t, int64_t d) { return threads_per_row(d, t == Dtype::F32 ? 4 : 8) > 0; }

void qk_norm_rotary_forward(Dtype t, const void* qkv, const void* wq, const void* wk, const void* cos, const void* sin,
                            void* q, void* k, int64_t rows, int64_t s, int64_t nq, int64_t nkv, int64_t d, double eps,
                            void* stream) {
  const QkDims D{rows, s, d, int(nq), int(nkv), float(eps)};
  if (rows > 0) PLANNER_DISPATCH(t, qk_fwd_t, qkv, wq, wk, cos, sin, q, k, D, S(stream));
}

void qk_norm_rotary_backward(Dtype t, const void* dq, const void* dk, const void* dv, const void* qkv, const void* wq,
                             const void* wk, const void* cos, const void* sin, void* dqkv, float* dw, int64_t rows,
                             int64_t s, int64_t nq, int64_t nkv, int64_t d, double eps, void* stream) {
  const QkDims D{rows, s, d, int(nq), int(nkv), float(eps)};
  PLANNER_DISPATCH(t, qk_bwd_t, dq, dk, dv, qkv, wq, wk, cos, sin, dqkv, dw, D, S(stream));
}

}  // namespace planner::rt::fused
