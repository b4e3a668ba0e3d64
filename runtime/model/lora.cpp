#include "runtime/model/lora.hpp"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/model/fused_ops.hpp"
#include "runtime/model/kernel_dispatch.hpp"

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

namespace {

// (256, 2): the two weights' levels of each byte of packed codes.
at::Tensor pair_table(const at::Device& d) {
  const auto& l = nf4_levels();
  std::vector<float> t(512);
  for (int p = 0; p < 256; ++p) t[size_t(2 * p)] = l[size_t(p & 15)], t[size_t(2 * p + 1)] = l[size_t(p >> 4)];
  return at::tensor(t, at::TensorOptions().dtype(at::kFloat)).view({256, 2}).to(d);
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
  // Two codes per byte (weight 2i in the low nibble): the paper's 4 bits per weight.
  at::Tensor codes = at::bucketize(norm, mid).to(at::kByte).narrow(0, 0, q.numel);
  codes = at::constant_pad_nd(codes, {0, q.numel % 2}).view({-1, 2});
  q.codes = (codes.select(1, 0) + codes.select(1, 1) * 16).contiguous();
  q.pairs = pair_table(w.device());
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
  const at::Device d = q.codes.device();
  at::Tensor out = at::empty({q.numel}, at::TensorOptions().device(d).dtype(dtype));
#if PLANNER_FUSED_CUDA
  // One kernel (runtime/kernels/nf4_kernels.cu), the same values as below.
  if (kernels_run_on(out) && q.codes.is_contiguous() && q.absmax_codes.is_contiguous() &&
      q.absmax_scale.is_contiguous()) {
    fused::nf4_dequantize(*kernel_dtype(out), q.codes.data_ptr<uint8_t>(),
                          static_cast<const uint8_t*>(q.absmax_codes.data_ptr()), q.absmax_scale.data_ptr<float>(),
                          q.absmax_mean, nf4_levels().data(), out.data_ptr(), q.numel, stream_of(out));
    return out.view(q.shape);
  }
#endif
  const at::Tensor table = q.pairs.defined() ? q.pairs : pair_table(d);
  const at::Tensor absmax = nf4_absmax(q);
  // In slices of 2^24 weights (a multiple of the block): the temporaries
  // (int32 indices, 4 bytes per pair of weights; fp32 levels, 4 per weight)
  // stay at 96 MiB beside the output (nf4_dequantize_transient_bytes, which
  // the memory model counts). Each slice is four kernels (index conversion,
  // gather, scale multiply written straight into the output's dtype): on a
  // GPU, smaller slices made the dequantisation host-bound (validation/
  // h100x4/diag23: 88,000 launches a step for llama-2-7b with 2^22).
  constexpr int64_t kSlice = kNf4DequantSlice;
  for (int64_t s0 = 0; s0 < q.numel; s0 += kSlice) {
    const int64_t n = std::min(kSlice, q.numel - s0), bytes = (n + 1) / 2, blocks = (n + kBlock - 1) / kBlock;
    at::Tensor v = table.index_select(0, q.codes.narrow(0, s0 / 2, bytes).to(at::kInt)).view({-1});
    const at::Tensor scale = absmax.narrow(0, s0 / kBlock, blocks).unsqueeze(1);
    if (2 * bytes == blocks * kBlock && n == 2 * bytes) {  // whole blocks: straight into the output
      at::Tensor o = out.narrow(0, s0, n).view({blocks, kBlock});
      at::mul_out(o, v.view({blocks, kBlock}), scale);
      continue;
    }
    v = at::constant_pad_nd(v, {0, blocks * kBlock - 2 * bytes}).view({blocks, kBlock});
    v = v * scale;
    out.narrow(0, s0, n).copy_(v.view({-1}).narrow(0, 0, n));
  }
  return out.view(q.shape);
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
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    at::Tensor y = b.numel() > 0 ? at::addmm(b, x2, w.t()) : at::mm(x2, w.t());
    auto shape = x.sizes().vec();
    shape.back() = w.size(0);
    // Not a view (y is this function's own): the adapters add into it in place.
    return at::_unsafe_view(y, shape);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto* q = reinterpret_cast<const Nf4Tensor*>(ctx->saved_data["nf4"].toInt());
    const at::Tensor w = nf4_dequantize(*q, grads[0].scalar_type());
    return {at::matmul(grads[0], w), at::Tensor(), at::Tensor()};
  }
};

enum class TpKind : int64_t { None, Column, Row };

// The adapters of one base matrix: y (.., n) += scale * (x A_i^T) B_i^T into
// each adapted part's columns [offset_i, offset_i + rows_i), in place, each
// as one GEMM accumulating into that column slice of y (cuBLAS's leading
// dimension: no term tensor, no separate add). A custom function, so that
// autograd saves A and B themselves (leaves), not views of them: under ZeRO-3
// the Engine gathers a unit's parameters again for its backward into another
// buffer (the leaf's data rebound), and a saved view would read the forward's
// buffer, reused by then. dA and dB go to the leaves' bound gradients as any
// parameter's; the adapters' dX of all parts accumulate into one tensor.
// Under tp (lora.hpp): a column-parallel matrix's A is whole, its gradient
// summed over tp here; a row-parallel one's partial z is summed in the
// forward and the term is counted on tp rank 0 only (the gradient still
// reaches every rank's B).
struct LoraAdd : torch::autograd::Function<LoraAdd> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor y, const at::Tensor& x, at::TensorList As,
                            at::TensorList Bs, std::vector<int64_t> offsets, double scale, int64_t tp, int64_t kind,
                            bool first) {
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    at::Tensor y2 = y.view({-1, y.size(-1)});
    std::vector<at::Tensor> saved{x};
    for (const at::Tensor& A : As) saved.push_back(A);
    for (const at::Tensor& B : Bs) saved.push_back(B);
    for (size_t i = 0; i < As.size(); ++i) {
      at::Tensor z = at::mm(x2, As[i].t());  // (tokens, r)
      if (TpKind(kind) == TpKind::Row) reinterpret_cast<Communicator*>(tp)->all_reduce(z)->wait();
      if (TpKind(kind) != TpKind::Row || first)
        y2.narrow(1, offsets[i], Bs[i].size(0)).addmm_(z, Bs[i].t(), /*beta=*/1, /*alpha=*/scale);
      saved.push_back(z);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["offsets"] = offsets;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["kind"] = kind;
    ctx->mark_dirty({y});
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const std::vector<int64_t> offsets = ctx->saved_data["offsets"].toIntVector();
    const size_t parts = offsets.size();
    const double scale = ctx->saved_data["scale"].toDouble();
    const bool column = TpKind(ctx->saved_data["kind"].toInt()) == TpKind::Column;
    const at::Tensor& x = s[0];
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    // The output gradient as it comes; each part's as a column slice of it
    // (row stride the whole width: no copy).
    const at::Tensor g2 = grads[0].reshape({-1, grads[0].size(-1)});
    at::Tensor dx;
    tensor_list dA(parts), dB(parts);
    for (size_t i = 0; i < parts; ++i) {
      const at::Tensor &A = s[1 + i], &B = s[1 + parts + i], &z = s[1 + 2 * parts + i];
      const at::Tensor gi = g2.narrow(1, offsets[i], B.size(0));  // (tokens, rows)
      dB[i] = at::mm(gi.t(), z).mul_(scale);                     // (rows, r)
      const at::Tensor dz = at::mm(gi, B).mul_(scale);          // (tokens, r)
      dA[i] = at::mm(dz.t(), x2);                                // (r, in)
      if (column) reinterpret_cast<Communicator*>(ctx->saved_data["tp"].toInt())->all_reduce(dA[i])->wait();
      if (x.requires_grad()) dx = dx.defined() ? dx.addmm_(dz, A) : at::mm(dz, A);
    }
    tensor_list out{grads[0], dx.defined() ? dx.view(x.sizes()) : at::Tensor()};
    out.insert(out.end(), dA.begin(), dA.end());
    out.insert(out.end(), dB.begin(), dB.end());
    out.resize(out.size() + 5);  // offsets, scale, tp, kind, first
    return out;
  }
};

}  // namespace

LoraAdapters::LoraAdapters(TransformerModel& model, const Finetune& f, uint64_t seed) : model_(model), f_(f) {
  declare();
  ParamStore& base = model.store();
  store_.materialize(base.get(0).device(), at::kFloat);
  at::manual_seed(seed);
  // Gradients: autograd's own tensors (a torch optimizer's zero_grad detaches
  // them, which views of one flat buffer forbid).
  for (size_t k = 0; k < store_.infos().size(); ++k) {
    init_tensor(store_.infos()[k], store_.get(int(k)));
    store_.bind_grad(int(k), at::Tensor());
  }
  for (int id = 0; id < int(base.infos().size()); ++id) base.bind_grad(id, at::Tensor());
  if (f.quantized_base())
    for (auto& [id, mx] : matrices_) quantize(id, base.get(id));
}

LoraAdapters::LoraAdapters(TransformerModel& model, const Finetune& f, Communicator* tp)
    : model_(model), f_(f), tp_(model.tp_size() > 1 ? tp : nullptr), tp_rank_(tp_ ? tp_->rank() : 0) {
  if (model.tp_size() > 1 && (!tp || tp->size() != model.tp_size()))
    throw std::invalid_argument("LoraAdapters: the model is tensor-parallel but no tp group of its size was given");
  declare();
}

void LoraAdapters::declare() {
  if (!f_.frozen_base()) throw std::invalid_argument("LoraAdapters: finetune=full has no adapters");
  if (model_.sequence_parallel())
    throw std::invalid_argument("LoraAdapters: finetune with sequence parallelism is not executed (sp=0)");
  if (model_.tp_size() > 1 && !tp_)
    throw std::invalid_argument("LoraAdapters: a tensor-parallel model needs the Engine's constructor (its tp group)");
  const int tp = model_.tp_size();
  const ModelSpec& m = model_.spec();
  ParamStore& base = model_.store();
  // The frozen base: no gradient anywhere.
  for (int id = 0; id < int(base.infos().size()); ++id)
    if (base.get(id).defined()) base.get(id).requires_grad_(false);
  const int64_t q = m.q_dim(), kv = m.kv_dim(), ffn = m.ffn;
  using Rows = std::vector<std::pair<unsigned, int64_t>>;
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerIds& l = model_.layer_ids(i);
    const int group = int(i) + 1;  // the layer's unit (strategies/partition.hpp)
    // (id, row-parallel, target bit and whole rows of each part in the fused matrix)
    const std::vector<std::tuple<int, bool, Rows>> mats = {
        {l.qkv_w, false, {{kLoraQ, q}, {kLoraK, kv}, {kLoraV, kv}}},
        {l.o_w, true, {{kLoraO, m.hidden}}},
        {l.fc1_w, false, m.mlp == MlpKind::SwiGlu ? Rows{{kLoraMlp, ffn}, {kLoraMlp, ffn}} : Rows{{kLoraMlp, ffn}}},
        {l.fc2_w, true, {{kLoraMlp, m.hidden}}}};
    for (const auto& [id, row_parallel, parts] : mats) {
      Matrix mx;
      mx.row = row_parallel && tp > 1;
      const ParamInfo& info = base.infos()[size_t(id)];
      const int64_t in = info.full_shape.at(1);
      int64_t row = 0;
      for (const auto& [bit, whole] : parts) {
        // Under tp the adapter splits as its matrix (costmodel/finetune.hpp,
        // adapter_params): a column-parallel matrix's B by rows (this rank's
        // heads or ffn columns), A whole; a row-parallel one's A by columns
        // (this rank's inputs), B whole.
        const int64_t rows = row_parallel ? whole : whole / tp;
        Part p;
        p.row0 = row, p.rows = rows;
        row += rows;
        if (f_.targets_any(bit)) {
          const std::string name = info.name + ".lora" + std::to_string(mx.parts.size());
          p.a = store_.add(name + ".A", {f_.r, in}, Init::Normal, group, row_parallel ? TpSplit{1, {in}} : TpSplit{}, tp);
          p.b = store_.add(name + ".B", {whole, f_.r}, Init::Zeros, group, row_parallel ? TpSplit{} : TpSplit{0, {whole}}, tp);
        }
        mx.parts.push_back(p);
      }
      if (row != info.shape.at(0)) throw std::logic_error("LoraAdapters: fused matrix rows do not add up");
      matrices_.emplace(id, std::move(mx));
    }
  }
  model_.linear_hook = [this](const at::Tensor& x, int w, int b) { return forward(x, w, b); };
}

void LoraAdapters::init_tensor(const ParamInfo& i, at::Tensor t) const {
  at::NoGradGuard no_grad;
  if (i.init == Init::Zeros) {
    t.zero_();  // B: the adapted model starts as the base (PEFT)
    return;
  }
  // A: PEFT's Kaiming-uniform with a = sqrt(5), whose bound is 1/sqrt(fan_in).
  // A part under tp: the whole matrix is drawn (the generator advances as in
  // one process) and this rank keeps its columns.
  const double bound = 1.0 / std::sqrt(double(i.full_shape.at(1)));
  if (!i.split.split()) {
    t.uniform_(-bound, bound);
    return;
  }
  at::Tensor full = at::empty(i.full_shape, t.options()).uniform_(-bound, bound);
  t.view(i.shape).copy_(tp_slice(full, i.split, tp_rank_, model_.tp_size()));
}

void LoraAdapters::quantize(int w, const at::Tensor& values) {
  matrices_.at(w).nf4 = std::make_unique<Nf4Tensor>(nf4_quantize(values));
}

int64_t LoraAdapters::nf4_bytes() const {
  int64_t b = 0;
  for (const auto& [id, mx] : matrices_)
    if (mx.nf4)
      b += mx.nf4->codes.numel() + mx.nf4->absmax_codes.numel() + mx.nf4->absmax_scale.numel() * 4;
  return b;
}

LoraAdapters::~LoraAdapters() { model_.linear_hook = nullptr; }

at::Tensor LoraAdapters::forward(const at::Tensor& x, int w, int b) const {
  auto it = matrices_.find(w);
  if (it == matrices_.end()) return {};
  const Matrix& mx = it->second;
  const ParamStore& store = model_.store();
  Communicator* tp = tp_;
  // A row-parallel matrix under tp gives this rank's partial sum (the model
  // sums it over tp): its bias and its adapter's term go in on rank 0 only.
  const bool first = tp_rank_ == 0;
  const at::Tensor bias = b >= 0 && (!mx.row || first) ? store.get(b) : at::empty({0}, x.options());
  at::Tensor y = mx.nf4 ? Nf4Linear::apply(x, bias, reinterpret_cast<int64_t>(mx.nf4.get()))
                        : (bias.numel() > 0 ? at::linear(x, store.get(w), bias) : at::linear(x, store.get(w)));
  // The adapters, in the compute precision: (x A^T) B^T * alpha / r
  // accumulated in place into their parts' columns of y (nothing for a part
  // without an adapter). y is this function's own: at::linear and Nf4Linear
  // save their input and weight, not their output.
  // Column-parallel under tp: A is whole on every rank but each rank's
  // dZ = dY B covers only its rows of B, so A's gradient is summed over tp;
  // x's gradient through A is summed by the model's enter_tp as the base's
  // is. Row-parallel: x holds this rank's columns, z is partial (summed in the
  // forward; dZ = dY B is whole on every rank).
  std::vector<at::Tensor> As, Bs;
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (const Part& p : mx.parts) {
    if (p.a >= 0) {
      As.push_back(store_.get(p.a)), Bs.push_back(store_.get(p.b));
      if (As.back().scalar_type() != x.scalar_type())
        throw std::logic_error("LoraAdapters: adapters and activations in different precisions");
      offsets.push_back(offset);
    }
    offset += p.rows;
  }
  if (As.empty()) return y;
  const TpKind kind = !tp ? TpKind::None : mx.row ? TpKind::Row : TpKind::Column;
  return LoraAdd::apply(y, x, at::TensorList(As), at::TensorList(Bs), offsets, f_.scale(),
                        reinterpret_cast<int64_t>(tp), int64_t(kind), first);
}

std::vector<at::Tensor> LoraAdapters::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& [id, mx] : matrices_)
    for (const Part& p : mx.parts)
      if (p.a >= 0) out.push_back(store_.get(p.a)), out.push_back(store_.get(p.b));
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
    if (p.a >= 0)
      W.narrow(0, p.row0, p.rows).add_(at::mm(store_.get(p.b).to(at::kFloat), store_.get(p.a).to(at::kFloat)) * f_.scale());
  return W;
}

}  // namespace planner::rt
