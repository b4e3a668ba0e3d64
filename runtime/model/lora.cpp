#include "runtime/model/lora.hpp"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

const std::array<float, 16>& nf4_levels() {
  // Dettmers et al. 2023, appendix E ("NormalFloat 4-bit data type"): the
  // quantiles of N(0, 1) for 8 positive and 7 negative levels plus zero,
  // normalised into [-1, 1] (bitsandbytes' NF4 table).
  static const std::array<float, 16> levels = {
      -1.0f,          -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
      0.07958029955625534f,  0.16093020141124725f,  0.24611230194568634f,  0.33791524171829224f,
      0.44070982933044434f,  0.5626170039176941f,   0.7229568362236023f,   1.0f};
  return levels;
}

double Nf4Tensor::packed_bits() const {
  const double blocks = double(absmax_codes.numel());
  return 4.0 * double(numel) + 8.0 * blocks + 32.0 * double(absmax_scale.numel()) + 32.0;
}

namespace {

constexpr int64_t kBlock = kNf4BlockSize;          // weights per absmax (paper: 64)
constexpr int64_t kBlock2 = kNf4AbsmaxBlockSize;   // absmax constants per second-level scale (paper: 256)
constexpr double kE4m3Max = 448.0;                 // largest float8_e4m3fn

at::Tensor levels_tensor(const at::Device& d) {
  const auto& l = nf4_levels();
  return at::tensor(std::vector<float>(l.begin(), l.end()), at::TensorOptions().dtype(at::kFloat)).to(d);
}

// x padded to whole blocks of `block` along a new trailing dimension: (blocks, block).
at::Tensor blocked(const at::Tensor& flat, int64_t block) {
  const int64_t n = flat.numel(), blocks = (n + block - 1) / block;
  return at::constant_pad_nd(flat, {0, blocks * block - n}).view({blocks, block});
}

}  // namespace

Nf4Tensor nf4_quantize(const at::Tensor& w_in) {
  at::NoGradGuard no_grad;
  Nf4Tensor q;
  q.shape = w_in.sizes().vec();
  q.numel = w_in.numel();
  const at::Tensor w = blocked(w_in.detach().reshape({-1}).to(at::kFloat), kBlock);  // (blocks, 64)
  at::Tensor absmax = w.abs().amax(1);                                                // (blocks)
  const at::Tensor safe = at::where(absmax > 0, absmax, at::ones_like(absmax));
  // Nearest level of each normalised weight.
  const at::Tensor norm = (w / safe.unsqueeze(1)).reshape({-1});                      // (n) in [-1, 1]
  // Nearest level: the index among the 15 midpoints between adjacent levels.
  const at::Tensor levels = levels_tensor(w.device());
  const at::Tensor mid = (levels.narrow(0, 0, 15) + levels.narrow(0, 1, 15)) / 2;
  q.codes = at::bucketize(norm, mid).to(at::kByte).narrow(0, 0, q.numel).contiguous();
  // Double quantization (sec. 3): the fp32 constants, centred on their mean,
  // as 8-bit floats with one fp32 scale per block of 256.
  q.absmax_mean = absmax.mean().item<float>();
  const at::Tensor centred = blocked(absmax - q.absmax_mean, kBlock2);                  // (blocks2, 256)
  at::Tensor scale = centred.abs().amax(1) / kE4m3Max;
  scale = at::where(scale > 0, scale, at::ones_like(scale));
  q.absmax_scale = scale.contiguous();
  q.absmax_codes = (centred / scale.unsqueeze(1)).reshape({-1}).narrow(0, 0, absmax.numel()).to(at::kFloat8_e4m3fn);
  return q;
}

at::Tensor nf4_absmax(const Nf4Tensor& q) {
  const int64_t blocks = q.absmax_codes.numel();
  at::Tensor c = blocked(q.absmax_codes.to(at::kFloat), kBlock2) * q.absmax_scale.unsqueeze(1);
  return c.reshape({-1}).narrow(0, 0, blocks) + q.absmax_mean;
}

at::Tensor nf4_dequantize(const Nf4Tensor& q, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  const at::Tensor values = levels_tensor(q.codes.device()).index_select(0, q.codes.to(at::kLong));
  const at::Tensor absmax = nf4_absmax(q);
  const at::Tensor w = blocked(values, kBlock) * absmax.unsqueeze(1);
  return w.reshape({-1}).narrow(0, 0, q.numel).view(q.shape).to(dtype);
}

namespace {

// y = x W^T (+ b) with W stored in NF4: dequantised for the forward GEMM and
// again for the backward's dx = dy W; only the 4-bit state is kept in between
// (the dequantised matrix is a temporary of each GEMM).
struct Nf4Linear : torch::autograd::Function<Nf4Linear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& b, int64_t nf4) {
    const auto* q = reinterpret_cast<const Nf4Tensor*>(nf4);
    ctx->saved_data["nf4"] = nf4;
    const at::Tensor w = nf4_dequantize(*q, x.scalar_type());  // (out, in)
    return b.numel() > 0 ? at::linear(x, w, b) : at::linear(x, w);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto* q = reinterpret_cast<const Nf4Tensor*>(ctx->saved_data["nf4"].toInt());
    const at::Tensor w = nf4_dequantize(*q, grads[0].scalar_type());
    return {at::matmul(grads[0], w), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

LoraAdapters::LoraAdapters(TransformerModel& model, const Finetune& f, uint64_t seed) : model_(model), f_(f) {
  if (!f.frozen_base()) throw std::invalid_argument("LoraAdapters: finetune=full has no adapters");
  if (model.tp_size() > 1) throw std::invalid_argument("LoraAdapters: tensor parallelism is not supported (tp=1)");
  const ModelSpec& m = model.spec();
  ParamStore& store = model.store();
  // The frozen base: no gradient anywhere (the flat gradient buffer unbound).
  for (int id = 0; id < int(store.infos().size()); ++id) {
    store.get(id).requires_grad_(false);
    store.bind_grad(id, at::Tensor());
  }
  const at::Tensor any = store.get(0);
  const auto opts = at::TensorOptions().device(any.device()).dtype(at::kFloat);
  at::manual_seed(seed);
  const int64_t q = m.q_dim(), kv = m.kv_dim(), ffn = m.ffn;
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerIds& l = model.layer_ids(i);
    // (id, target bit, rows of each part in the fused matrix)
    const std::vector<std::tuple<int, std::vector<std::pair<unsigned, int64_t>>>> mats = {
        {l.qkv_w, {{kLoraQ, q}, {kLoraK, kv}, {kLoraV, kv}}},
        {l.o_w, {{kLoraO, m.hidden}}},
        {l.fc1_w, m.mlp == MlpKind::SwiGlu ? std::vector<std::pair<unsigned, int64_t>>{{kLoraMlp, ffn}, {kLoraMlp, ffn}}
                                           : std::vector<std::pair<unsigned, int64_t>>{{kLoraMlp, ffn}}},
        {l.fc2_w, {{kLoraMlp, m.hidden}}}};
    for (const auto& [id, parts] : mats) {
      Matrix mx;
      const int64_t in = store.get(id).size(1);
      int64_t row = 0;
      for (const auto& [bit, rows] : parts) {
        Part p;
        p.row0 = row, p.rows = rows;
        row += rows;
        if (f.targets_any(bit)) {
          // PEFT's init: A Kaiming-uniform (a = sqrt(5): bound 1/sqrt(in)), B zero,
          // so the adapted model starts as the base.
          const double bound = 1.0 / std::sqrt(double(in));
          p.A = (at::rand({f.r, in}, opts) * 2 - 1).mul_(bound).requires_grad_(true);
          p.B = at::zeros({rows, f.r}, opts).requires_grad_(true);
        }
        mx.parts.push_back(std::move(p));
      }
      if (row != store.get(id).size(0)) throw std::logic_error("LoraAdapters: fused matrix rows do not add up");
      if (f.quantized_base()) mx.nf4 = std::make_unique<Nf4Tensor>(nf4_quantize(store.get(id)));
      matrices_.emplace(id, std::move(mx));
    }
  }
  model.linear_hook = [this](const at::Tensor& x, int w, int b) { return forward(x, w, b); };
}

LoraAdapters::~LoraAdapters() { model_.linear_hook = nullptr; }

at::Tensor LoraAdapters::forward(const at::Tensor& x, int w, int b) const {
  auto it = matrices_.find(w);
  if (it == matrices_.end()) return {};
  const Matrix& mx = it->second;
  const ParamStore& store = model_.store();
  const at::Tensor bias = b >= 0 ? store.get(b) : at::empty({0}, x.options());
  at::Tensor y = mx.nf4 ? Nf4Linear::apply(x, bias, reinterpret_cast<int64_t>(mx.nf4.get()))
                        : (bias.numel() > 0 ? at::linear(x, store.get(w), bias) : at::linear(x, store.get(w)));
  // The adapters, in the compute precision: (x A^T) B^T * alpha / r per part,
  // zeros where a part of the fused matrix has none.
  std::vector<at::Tensor> outs;
  bool any = false;
  for (const Part& p : mx.parts) {
    if (p.A.defined()) {
      const at::Tensor z = at::linear(x, p.A.to(x.scalar_type()));                 // (.., r)
      outs.push_back(at::linear(z, p.B.to(x.scalar_type())) * f_.scale());         // (.., rows)
      any = true;
    } else {
      auto shape = x.sizes().vec();
      shape.back() = p.rows;
      outs.push_back(at::zeros(shape, x.options()));
    }
  }
  return any ? y + at::cat(outs, -1) : y;
}

std::vector<at::Tensor> LoraAdapters::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& [id, mx] : matrices_)
    for (const Part& p : mx.parts)
      if (p.A.defined()) out.push_back(p.A), out.push_back(p.B);
  return out;
}

int64_t LoraAdapters::numel() const {
  int64_t n = 0;
  for (const at::Tensor& t : parameters()) n += t.numel();
  return n;
}

std::vector<int> LoraAdapters::matrix_ids() const {
  std::vector<int> ids;
  for (const auto& [id, mx] : matrices_) ids.push_back(id);
  return ids;
}

at::Tensor LoraAdapters::merged_weight(int w) const {
  at::NoGradGuard no_grad;
  const Matrix& mx = matrices_.at(w);
  at::Tensor W = mx.nf4 ? nf4_dequantize(*mx.nf4, at::kFloat) : model_.store().get(w).to(at::kFloat).clone();
  for (const Part& p : mx.parts)
    if (p.A.defined()) W.narrow(0, p.row0, p.rows).add_(at::mm(p.B, p.A) * f_.scale());
  return W;
}

}  // namespace planner::rt
