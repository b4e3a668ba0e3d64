// The AdamW of one shard range (adam_range) and, on the host, its one-pass
// update on a team of this file's own threads (runtime/optim/adamw.hpp says why).
#include "runtime/optim/adamw.hpp"

#include <c10/util/Half.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define PLANNER_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define PLANNER_CLONES
#endif

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace planner::rt {

namespace {

// A fixed team of helper threads that run one job at a time: the caller and
// `threads - 1` helpers take blocks from a shared counter until none is left,
// so that a core the hypervisor or another process takes for a while delays
// only the blocks that core holds, not a barrier after every operation. The
// helpers sleep on a condition variable between jobs (no spinning: the offload
// step's main thread and NCCL's threads share these cores).
class Team {
 public:
  static Team& get() {
    static Team* team = new Team;  // never destroyed: its sleeping helpers outlive static destruction
    return *team;
  }

  void run(int threads, int64_t blocks, const std::function<void(int64_t)>& body) {
    std::lock_guard<std::mutex> one_job(job_mu_);
    const int helpers = int(std::max<int64_t>(0, std::min<int64_t>(threads, blocks) - 1));
    grow(helpers);
    {
      std::lock_guard<std::mutex> lk(mu_);
      body_ = &body;
      blocks_ = blocks;
      next_.store(0);
      active_ = helpers;
      running_ = helpers;
      ++generation_;
    }
    if (helpers > 0) wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return running_ == 0; });
    body_ = nullptr;
  }

 private:
  void work() {
    for (int64_t b; (b = next_.fetch_add(1)) < blocks_;) (*body_)(b);
  }

  // A new helper starts from the generation before the job about to be posted,
  // so that it takes part in that job however late it starts.
  void grow(int helpers) {
    uint64_t current = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      current = generation_;
    }
    while (int(helpers_.size()) < helpers) {
      const int index = int(helpers_.size());
      helpers_.emplace_back([this, index, current] { helper(index, current); });
      helpers_.back().detach();
    }
  }

  void helper(int index, uint64_t seen) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        wake_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= active_) continue;
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      if (--running_ == 0) done_.notify_one();
    }
  }

  std::mutex job_mu_, mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> helpers_;
  const std::function<void(int64_t)>* body_ = nullptr;
  std::atomic<int64_t> next_{0};
  int64_t blocks_ = 0;
  int active_ = 0, running_ = 0;
  uint64_t generation_ = 0;
};

// Elements per block: the block's gradient in fp32 and its results stay in the
// core's L1/L2 cache between the three loops below, so memory sees each array
// once (read gradient, master, m, v; write master, m, v and the 16-bit copy:
// 28 bytes per parameter with 16-bit gradients, against about 50 for the
// conversion, the fused AdamW and the copy as three passes over the shard).
constexpr int64_t kBlock = 4096;

// The constants of one AdamW update, as at::_fused_adamw_ forms them from its
// double arguments (PyTorch's CPU fused kernel, aten/src/ATen/native/cpu/
// FusedAdamKernel.cpp: the bias corrections in double, each constant then
// rounded to float once).
struct Consts {
  float c1;            // 1 - beta1, the weight of lerp(m, g, 1 - beta1)
  float beta2, c2;     // v = fma((1 - beta2) * g, g, v * beta2)
  float bc2_sqrt;      // sqrt(1 - beta2^t)
  float eps;
  float neg_step;      // -lr / (1 - beta1^t)
  float divisor;
};

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float to bf16, rounded to nearest even (NaN kept quiet): c10::BFloat16's
// rounding, written so that the compiler vectorizes it.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7fffffffu) > 0x7f800000u ? uint16_t(0x7fc0) : uint16_t(rounded);
}

// fp16 <-> fp32 (IEEE binary16, rounded to nearest even, as c10::Half) eight
// at a time with F16C where the CPU has it. c10::Half's conversions, written
// in bit operations, are not vectorized, and neither are GCC's _Float16 ones
// for AVX2: they made fp16 plans compute-bound at about a fifth of bf16's
// rate on one core.
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void half_to_float_f16c(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}
__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = _cvtss_sh(s[i], _MM_FROUND_TO_NEAREST_INT);
}
bool has_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();  // may run before the constructors that would call it
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  }();
  return yes;
}
#endif

void half_to_float(const uint16_t* s, float* d, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return half_to_float_f16c(s, d, n);
#endif
  for (int64_t i = 0; i < n; ++i) d[i] = float(c10::Half(s[i], c10::Half::from_bits()));
}

void float_to_half(const float* s, uint16_t* d, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return float_to_half_f16c(s, d, n);
#endif
  for (int64_t i = 0; i < n; ++i) d[i] = c10::Half(s[i]).x;
}

// One block of at most kBlock elements: the gradient converted and divided
// into g (in cache), master, m and v updated in place, the copy written. The
// operations and their order are the fused kernel's, so that on a CPU with
// FMA the results are the kernel's bit for bit (tests/runtime/test_engine.cpp
// "[adam]"). Compiled twice (x86-64-v3 with AVX2 and FMA, and the baseline),
// the loader picking one: the loops are vectorized.
PLANNER_CLONES void update_block(
    float* __restrict p, float* __restrict m, float* __restrict v, const void* grad, at::ScalarType grad_type,
    int64_t n, int64_t split, const Consts& k, float decay_factor, bool scaled, void* out, at::ScalarType out_type) {
  alignas(64) float g[kBlock];
  if (grad_type == at::kFloat) {
    const float* __restrict s = static_cast<const float*>(grad);
    for (int64_t i = 0; i < n; ++i) g[i] = s[i];
  } else if (grad_type == at::kBFloat16) {
    const uint16_t* __restrict s = static_cast<const uint16_t*>(grad);
    for (int64_t i = 0; i < n; ++i) g[i] = bf16_to_float(s[i]);
  } else {
    half_to_float(static_cast<const uint16_t*>(grad), g, n);
  }
  if (scaled) {
    const float d = k.divisor;
    for (int64_t i = 0; i < n; ++i) g[i] = g[i] / d;
  }
  // AdamW's decoupled weight decay on [0, split) only.
  for (int64_t i = 0; i < split; ++i) p[i] = p[i] * decay_factor;
  const float c1 = k.c1, b2 = k.beta2, c2 = k.c2, bc = k.bc2_sqrt, eps = k.eps, ns = k.neg_step;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    // lerp with a weight under 0.5: m + w * (g - m), fused; v's update fused
    // as the kernel's build contracts it (found by comparing results)
    const float mi = std::fma(c1, gi - m[i], m[i]);
    const float vi = std::fma(c2 * gi, gi, v[i] * b2);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc + eps;
    p[i] = p[i] + ns * mi / denom;
  }
  if (!out) return;
  if (out_type == at::kFloat) {
    float* __restrict d = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) d[i] = p[i];
  } else if (out_type == at::kBFloat16) {
    uint16_t* __restrict d = static_cast<uint16_t*>(out);
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(p[i]);
  } else {
    float_to_half(p, static_cast<uint16_t*>(out), n);
  }
}

}  // namespace

void host_adamw(float* master, float* m, float* v, const void* grad, at::ScalarType grad_type, int64_t n,
                int64_t decay_len, const AdamHyper& h, double step, float divisor, void* out16, at::ScalarType out_type,
                int threads) {
  if (grad_type != at::kFloat && grad_type != at::kBFloat16 && grad_type != at::kHalf)
    throw std::invalid_argument("host AdamW: gradients must be fp32, bf16 or fp16");
  if (out16 && out_type != at::kBFloat16 && out_type != at::kHalf && out_type != at::kFloat)
    throw std::invalid_argument("host AdamW: the parameters' copy must be bf16, fp16 or fp32");
  Consts k;
  const double bc1 = 1.0 - std::pow(h.beta1, step), bc2 = 1.0 - std::pow(h.beta2, step);
  k.c1 = float(1.0 - h.beta1);
  k.beta2 = float(h.beta2);
  k.c2 = float(1.0 - h.beta2);
  k.bc2_sqrt = float(std::sqrt(bc2));
  k.eps = float(h.eps);
  k.neg_step = float(-(h.lr / bc1));
  k.divisor = divisor;
  const bool scaled = divisor != 1.0f;
  const float decay_factor = h.weight_decay != 0.0 ? float(1.0 - h.lr * h.weight_decay) : 1.0f;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const size_t gsize = at::elementSize(grad_type), osize = out16 ? at::elementSize(out_type) : 0;
  auto body = [&](int64_t b) {
    const int64_t o = b * kBlock, len = std::min(kBlock, n - o);
    const int64_t split = h.weight_decay != 0.0 ? std::clamp(decay_len - o, int64_t(0), len) : 0;
    update_block(master + o, m + o, v + o, static_cast<const char*>(grad) + size_t(o) * gsize, grad_type, len, split,
                 k, decay_factor, scaled, out16 ? static_cast<char*>(out16) + size_t(o) * osize : nullptr, out_type);
  };
  Team::get().run(std::max(1, threads), blocks, body);
}

// AdamW over [o, o + n) of the shard buffers: host tensors by host_adamw
// above; device tensors split at the decay boundary and in chunks, as
// the equivalence tests' reference trainer (tests/reference_trainer.hpp) does for
// the whole buffer.
void adam_range(at::Tensor master, at::Tensor m, at::Tensor v, at::Tensor grad16, at::Tensor work, int64_t decay_len,
                const AdamHyper& h, const at::Tensor& step_count, const at::Tensor& divisor, at::Tensor out16) {
  const int64_t n = master.numel();
  // PLANNER_HOST_ADAM=libtorch runs the host update as the device's, for
  // comparison (benchmarks/host_adam_bench.cpp); read at each call.
  const char* impl = std::getenv("PLANNER_HOST_ADAM");
  if (!master.is_cuda() && !(impl && std::string(impl) == "libtorch")) {
    auto contiguous = [](const at::Tensor& t) { return !t.defined() || t.is_contiguous(); };
    if (master.scalar_type() != at::kFloat || m.scalar_type() != at::kFloat || v.scalar_type() != at::kFloat ||
        m.numel() != n || v.numel() != n || grad16.numel() != n || (out16.defined() && out16.numel() != n) ||
        !contiguous(master) || !contiguous(m) || !contiguous(v) || !contiguous(grad16) || !contiguous(out16))
      throw std::invalid_argument("adam_range: host buffers must be contiguous, fp32 master and moments, n elements");
    host_adamw(master.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), grad16.data_ptr(),
               grad16.scalar_type(), n, decay_len, h, step_count.item<double>(), divisor.item<float>(),
               out16.defined() ? out16.data_ptr() : nullptr, out16.defined() ? out16.scalar_type() : at::kBFloat16,
               at::get_num_threads());
    return;
  }
  for (int part = 0; part < 2; ++part) {
    const int64_t a = part == 0 ? 0 : decay_len, len = part == 0 ? decay_len : n - decay_len;
    for (int64_t o = 0; o < len; o += kOptChunk) {
      const int64_t cnum = std::min(kOptChunk, len - o);
      at::Tensor g = grad16.narrow(0, a + o, cnum);
      if (g.scalar_type() != at::kFloat) g = work.narrow(0, 0, cnum).copy_(g);
      at::_fused_adamw_({master.narrow(0, a + o, cnum)}, {g}, {m.narrow(0, a + o, cnum)}, {v.narrow(0, a + o, cnum)}, {},
                        {step_count}, h.lr, h.beta1, h.beta2, part == 0 ? h.weight_decay : 0.0, h.eps,
                        /*amsgrad=*/false, /*maximize=*/false, divisor, /*found_inf=*/std::nullopt);
    }
  }
  if (out16.defined()) out16.copy_(master);
}

}  // namespace planner::rt
