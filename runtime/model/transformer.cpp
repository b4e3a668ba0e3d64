#include "runtime/model/transformer.hpp"

#include "runtime/model/attention.hpp"
#include "runtime/model/context_parallel.hpp"
#include "runtime/model/fused_ops.hpp"
#include "runtime/model/moe.hpp"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "strategies/errors.hpp"

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// ---- ParamStore -------------------------------------------------------------

int ParamStore::add(std::string name, std::vector<int64_t> shape, Init init, int group, const TpSplit& split, int tp,
                    int ep, int ep_rank) {
  if (materialized()) throw std::logic_error("ParamStore::add after materialize");
  ParamInfo info;
  info.name = std::move(name);
  info.full_shape = shape;
  info.shape = tp_local_shape(shape, split, tp);
  if (tp > 1) info.split = split;
  if (ep > 0) info.expert = true, info.ep = ep, info.ep_rank = ep_rank, info.shape[0] /= ep;
  info.numel = 1, info.full_numel = 1;
  for (auto d : info.shape) info.numel *= d;
  for (auto d : shape) info.full_numel *= d;
  info.decay = shape.size() >= 2;
  info.init = init;
  info.group = group;
  infos_.push_back(std::move(info));
  layout();
  return static_cast<int>(infos_.size()) - 1;
}

int64_t ParamStore::group_numel(int group) const {
  int64_t n = 0;
  for (auto& i : infos_)
    if (i.group == group) n += i.numel;
  return n;
}

void ParamStore::layout() {
  // Offsets: decayed tensors first (declaration order within each class), packed
  // tightly, so the flat buffer is exactly numel() long as the memory model and
  // the ZeRO shard math assume. The vocabulary matrix (the one odd-sized matrix in
  // most presets) is declared first, so it starts at offset 0.
  int64_t off = 0, full = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& i : infos_) {
      if (i.decay != (pass == 0)) continue;
      i.offset = off, i.full_offset = full;
      off += i.numel, full += i.full_numel;
    }
    if (pass == 0) decay_numel_ = off;
  }
  numel_ = off, full_numel_ = full;
}

void ParamStore::materialize(at::Device device, at::ScalarType dtype) {
  layout();
  auto opts = at::TensorOptions().device(device).dtype(dtype);
  params = at::zeros({numel_}, opts);
  grads = at::zeros({numel_}, opts);
  tensors_.clear();
  for (auto& i : infos_) {
    // detach(): a new leaf sharing the slice's storage; in-place updates of the
    // flat buffer (under NoGradGuard) are what the model computes with.
    at::Tensor t = params.narrow(0, i.offset, i.numel).view(i.shape).detach();
    t.requires_grad_(true);
    t.mutable_grad() = grads.narrow(0, i.offset, i.numel).view(i.shape);
    tensors_.push_back(t);
  }
}

void ParamStore::make_leaves(at::Device device, at::ScalarType dtype) {
  layout();
  tensors_.clear();
  for (size_t k = 0; k < infos_.size(); ++k) {
    at::Tensor t = at::empty({0}, at::TensorOptions().device(device).dtype(dtype));
    t.requires_grad_(true);
    tensors_.push_back(t);
  }
}

void ParamStore::bind(int id, const at::Tensor& data) {
  // set_data keeps the leaf (and its autograd identity, which saved tensors and
  // gradient accumulators refer to) and swaps the storage under it: ZeRO-3
  // gathers a unit into fresh memory and frees it after use.
  tensors_.at(size_t(id)).set_data(data);
}

void ParamStore::bind_grad(int id, const at::Tensor& grad) {
  tensors_.at(size_t(id)).mutable_grad() = grad;
}

// ---- Autograd functions -----------------------------------------------------

namespace {

// Full activation checkpointing of one layer: the forward keeps only the layer's
// input; the backward recomputes the layer with autograd on and back-propagates
// through the recomputed graph (PyTorch's reentrant torch.utils.checkpoint). The
// parameters' gradients accumulate into their flat buffer from the inner
// backward; the function returns the gradient of the input.
struct LayerCheckpoint : torch::autograd::Function<LayerCheckpoint> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t model, int64_t layer) {
    ctx->save_for_backward({x});
    ctx->saved_data["model"] = model;
    ctx->saved_data["layer"] = layer;
    auto* m = reinterpret_cast<const TransformerModel*>(model);
    return m->layer(layer, x, false);  // runs with grad mode off: nothing else saved
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto* m = reinterpret_cast<const TransformerModel*>(ctx->saved_data["model"].toInt());
    const int64_t layer = ctx->saved_data["layer"].toInt();
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = m->layer(layer, x, false);
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor(), at::Tensor()};
  }
};

// y = x w^T (+ b) whose backward accumulates the weight and bias gradients
// straight into the parameters' views of the flat gradient buffer (an in-place
// addmm with beta = 1: Megatron-LM's gradient-accumulation fusion), instead of
// materialising dW and letting autograd add it in a second pass. The weight's
// gradient reaches autograd as undefined (nothing to accumulate there).
//
// padded_rows > rows of w: the GEMM runs on w padded with zero rows to that
// count (the LM head: vocabularies such as GPT-2's 50257 are not a multiple of 8,
// and cuBLAS then falls back to unaligned kernels several times slower; padding
// the copy to a multiple of 64 keeps the parameter count exact), and the output's
// extra columns are set to -inf so that a softmax over them gives them nothing.
// valid_rows >= 0: only the first valid_rows rows of w are real (a
// vocabulary-parallel shard whose range ends past the vocabulary): the columns
// of the rows after them are -inf too.
//
// seq_tp set (a column-parallel layer under sequence
// parallelism): x is this rank's sequence shard (b, s/tp, in), all-gathered
// along the sequence for the GEMM; the backward gathers it again for dW and
// reduce-scatters dx (Megatron-LM's sequence-parallel linear; runtime/model/tensor_parallel.hpp).
//
// bias_in_forward false: b is not added to this rank's output, but its gradient
// (the column sum of the output gradient) is still accumulated. A
// row-parallel layer without sp adds its bias in the GEMM's epilogue on one
// tensor-parallel rank only, so that the all-reduce of the partial outputs
// carries it once; every rank's bias gradient is the column sum of the same
// full output gradient, as when the bias is added after the all-reduce (which
// costs a broadcast add over the full activation, several times slower per
// byte than the epilogue).
struct LinearAccum : torch::autograd::Function<LinearAccum> {
  // out_slot: null, or the tensor the output is written into (made or remade
  // there when it is not (tokens, out) of x's options):
  // TransformerModel::keep_head_logits.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& b,
                            int64_t padded_rows, int64_t valid_rows, Communicator* seq_tp, bool bias_in_forward,
                            at::Tensor* out_slot) {
    const int64_t rows = w.size(0), in = w.size(1);
    const int64_t out = std::max(rows, padded_rows);
    const int64_t valid = valid_rows >= 0 ? valid_rows : rows;
    ctx->saved_data["seq_tp"] = reinterpret_cast<int64_t>(seq_tp);  // saved_data holds IValues, not pointers
    at::Tensor x = seq_tp ? all_gather_seq(x_in, *seq_tp) : x_in;
    at::Tensor x2 = x.reshape({-1, in});                                               // (tokens, in)
    at::Tensor wp = out > rows ? at::constant_pad_nd(w, {0, 0, 0, out - rows}) : w;     // (out, in)
    at::Tensor y;
    const bool has_b = b.numel() > 0;
    if (out_slot) {
      at::Tensor& slot = *out_slot;
      if (!slot.defined() || slot.sizes() != at::IntArrayRef{x2.size(0), out} ||
          slot.scalar_type() != x2.scalar_type() || slot.device() != x2.device())
        slot = at::empty({x2.size(0), out}, x2.options());
      y = slot;
    }
    if (has_b && bias_in_forward) {
      at::Tensor bp = out > rows ? at::constant_pad_nd(b, {0, out - rows}) : b;
      y = y.defined() ? at::addmm_out(y, bp, x2, wp.t()) : at::addmm(bp, x2, wp.t());
    } else {
      y = y.defined() ? at::mm_out(y, x2, wp.t()) : at::mm(x2, wp.t());            // (tokens, out)
    }
    if (out > valid) y.narrow(1, valid, out - valid).fill_(-std::numeric_limits<double>::infinity());
    if (!has_b) ctx->save_for_backward({x_in, w});
    ctx->saved_data["gx"] = x_in.requires_grad();
    ctx->saved_data["out"] = out;
    ctx->saved_data["has_b"] = has_b;
    // The gradient buffers are looked up in the backward, not here: under
    // ZeRO-2/3 the runtime binds a unit's gradient buffer just before its
    // backward (runtime/engine.cpp).
    if (has_b) ctx->save_for_backward({x_in, w, b});
    auto shape = x.sizes().vec();
    shape.back() = out;
    // Not a view (y is this function's own): reduce_from_tp sums it in place,
    // which autograd forbids on a view made inside a custom function. As
    // at::matmul folds its batch dimensions.
    return at::_unsafe_view(y, shape);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& w = saved[1];
    const int64_t rows = w.size(0), in = w.size(1), out = ctx->saved_data["out"].toInt();
    auto* seq_tp = reinterpret_cast<Communicator*>(ctx->saved_data["seq_tp"].toInt());
    at::Tensor g2 = grads[0].reshape({-1, out});  // (tokens, out)
    std::optional<PendingSeq> gather;
    if (seq_tp) gather = all_gather_seq_start(saved[0], *seq_tp);  // overlaps dx's GEMM
    at::Tensor gx, gw_ret, gb_ret;
    if (ctx->saved_data["gx"].toBool()) {
      at::Tensor wp = out > rows ? at::constant_pad_nd(w, {0, 0, 0, out - rows}) : w;
      gx = at::mm(g2, wp);  // (tokens, in)
    }
    const at::Tensor x = gather ? gather->wait() : saved[0];
    at::Tensor x2 = x.reshape({-1, in});
    std::optional<PendingSeq> scatter;
    if (gx.defined()) {
      gx = gx.view(x.sizes());
      if (seq_tp) scatter = reduce_scatter_seq_start(gx, *seq_tp);  // overlaps dW's GEMM
    }
    // Saved leaves unpack as the parameters themselves, so .grad() is the
    // buffer bound now.
    at::Tensor gw = w.grad();
    if (gw.defined()) {
      if (out > rows) gw.add_(at::mm(g2.t(), x2).narrow(0, 0, rows));
      else gw.addmm_(g2.t(), x2);
    } else {
      gw_ret = at::mm(g2.t(), x2).narrow(0, 0, rows);
    }
    if (ctx->saved_data["has_b"].toBool()) {
      at::Tensor db = g2.sum(0).narrow(0, 0, rows);
      at::Tensor gb = saved[2].grad();
      if (gb.defined()) gb.add_(db);
      else gb_ret = db;
    }
    if (scatter) gx = scatter->wait();
    return {gx, gw_ret, gb_ret, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Selective recomputation (Korthikanti et al. 2022, sec. 4.2): the attention core
// (QK^T, softmax, AV) keeps only q, k, v and recomputes the rest in the backward.
// With the flash kernels (GPU, and LibTorch's CPU flash kernel) the core keeps no
// s^2 tensor in the first place (only q, k, v, the output, which the output
// projection keeps anyway, and a (b, heads, s) log-sum-exp), so selective saves
// almost nothing over none; it matters only for the math backend.
struct AttentionCoreCheckpoint : torch::autograd::Function<AttentionCoreCheckpoint> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool causal, bool gqa, int64_t window) {
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["gqa"] = gqa;
    ctx->saved_data["window"] = window;
    return attend(q, k, v, causal, gqa, window);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor q = saved[0].detach().requires_grad_(true);
    at::Tensor k = saved[1].detach().requires_grad_(true);
    at::Tensor v = saved[2].detach().requires_grad_(true);
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      out = attend(q, k, v, ctx->saved_data["causal"].toBool(), ctx->saved_data["gqa"].toBool(),
                   ctx->saved_data["window"].toInt());
    }
    auto g = torch::autograd::grad({out}, {q, k, v}, {grads[0]});
    return {g[0], g[1], g[2], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Cross-entropy over (N, V) logits in the working precision, mean over the rows
// whose label is not -100. The forward computes, chunk of rows by chunk in fp32,
// the loss and the gradient of the mean loss with respect to the logits
// (softmax - onehot) / count, and keeps that gradient in the logits' dtype; the
// backward only scales it. Memory: the gradient (N x V in the working precision)
// plus one fp32 chunk, instead of an fp32 copy, fp32 log-probabilities and their
// fp32 gradient. `grad_hint` is the factor the backward will bring (1/gas times
// fp16's loss scale): the kept gradient is stored pre-multiplied by it, so that
// in fp16 the (softmax - onehot) / count values, ~1e-9 for a 50k vocabulary and
// 16k tokens, do not flush to zero (as they would before the loss scale).
//
// Vocabulary-parallel (tp != 0, a Communicator*; Megatron-LM's cross-entropy,
// Shoeybi et al. 2019, sec. 3): the logits are this rank's columns, vocabulary
// ids [begin, begin + valid) (the rest -inf), and the full rows never exist on
// one rank. Per chunk: the row maxima are all-gathered and their maximum taken
// (the Communicator only sums); the sums of exp(z - max) and each row's target
// logit (only its owner contributes) go through one all-reduce; the loss is
// log(sum) - (z_target - max) and the gradient softmax - onehot on the local
// columns. Every tp rank gets the same loss.
//
// Final logit soft-capping (Gemma-2, cap > 0): the loss is taken over
// y = cap * tanh(z / cap) of the head's logits z. Since the gradient is
// formed in the forward anyway, dL/dz = dL/dy * (1 - (y / cap)^2) is formed
// there too: y lives only during the forward (one more logits-sized tensor
// then), and what is kept for the backward is dL/dz alone, as without the cap.
// Columns beyond this rank's `vocab_valid` (the padding, -inf) stay -inf in y
// and get no gradient.
at::Tensor soft_cap(const at::Tensor& z, double cap, int64_t vocab_valid) {
  at::Tensor y = z.mul(1.0 / cap);
  y.tanh_().mul_(cap);
  const int64_t pad = y.size(1) - vocab_valid;
  if (pad > 0) y.narrow(1, vocab_valid, pad).fill_(-std::numeric_limits<double>::infinity());
  return y;
}

// grad <- grad * (1 - (y / cap)^2), in place; y is consumed (squared in place).
void soft_cap_backward_(at::Tensor& grad, at::Tensor& y, double cap, int64_t vocab_valid) {
  const int64_t pad = y.size(1) - vocab_valid;
  if (pad > 0) y.narrow(1, vocab_valid, pad).zero_();  // -inf would turn the padding's zero gradient into NaN
  y.mul_(y);
  grad.addcmul_(grad, y, -1.0 / (cap * cap));
}

struct ChunkedCrossEntropy : torch::autograd::Function<ChunkedCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& head_logits, const at::Tensor& labels,
                            int64_t chunk_rows, double grad_hint, int64_t tp, int64_t vocab_begin,
                            int64_t vocab_valid, double softcap) {
    at::Tensor capped = softcap > 0 ? soft_cap(head_logits, softcap, vocab_valid) : at::Tensor();
    const at::Tensor& logits = softcap > 0 ? capped : head_logits;
    const int64_t n = logits.size(0);
    at::Tensor grad = at::empty_like(logits);
    at::Tensor valid_all = labels.ne(-100);
    // fp32 math for the 16-bit and fp32 models; double stays double (gradient checks).
    const at::ScalarType acc = logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor count = valid_all.sum().clamp_min(1).to(acc);  // device scalar, no host sync
    ctx->saved_data["hint"] = grad_hint;
    if (tp == 0) {
      // One kernel for the whole (n, V) on CUDA (runtime/model/fused_ops.hpp): no fp32 chunk.
      at::Tensor fused = fused_cross_entropy(logits, labels, count, grad_hint, grad);
      if (fused.defined()) {
        if (softcap > 0) soft_cap_backward_(grad, capped, softcap, vocab_valid);
        ctx->save_for_backward({grad});
        return fused / count;
      }
    }
    at::Tensor loss_sum = at::zeros({}, logits.options().dtype(acc));
    for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
      const int64_t c = std::min(chunk_rows, n - r0);
      at::Tensor valid = valid_all.narrow(0, r0, c);
      at::Tensor validf = valid.to(acc).unsqueeze(1);                                      // (c, 1)
      at::Tensor target = at::where(valid, labels.narrow(0, r0, c), at::zeros({}, labels.options())).unsqueeze(1);
      at::Tensor lp;
      if (tp == 0) {
        // fp32 log-probabilities of the working-precision logits. Measured on H100: for bf16
        // input ATen first converts to fp32 in a separate copy kernel, for fp16 the softmax
        // kernel converts itself (docs/TIME_MODEL_CHECKS.md, sec. 10).
        lp = at::log_softmax(logits.narrow(0, r0, c), 1, acc);                           // (c, V)
        loss_sum.sub_((lp.gather(1, target) * validf).sum());
        lp.exp_();                                   // softmax
        lp.scatter_add_(1, target, -validf);         // - onehot on labelled rows
      } else {
        lp = vocab_parallel_grad(logits.narrow(0, r0, c), valid, target, acc, *reinterpret_cast<Communicator*>(tp),
                                 vocab_begin, vocab_valid, loss_sum);
      }
      lp.mul_(validf * (grad_hint / count));       // mean; unlabelled rows get no gradient
      grad.narrow(0, r0, c).copy_(lp);
    }
    if (softcap > 0) soft_cap_backward_(grad, capped, softcap, vocab_valid);
    ctx->save_for_backward({grad});
    return loss_sum / count;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    // Scales the kept gradient in place: the graph is never run backward twice.
    at::Tensor g = ctx->get_saved_variables()[0];
    scale_by_ratio_(g, grads[0], ctx->saved_data["hint"].toDouble());
    return {g, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

// ---- TransformerModel -------------------------------------------------------

TransformerModel::TransformerModel(const ModelSpec& spec, int64_t seq, Communicator* tp, bool sp, Communicator* ep)
    : spec_(spec), seq_(seq), tp_(tp && tp->size() > 1 ? tp : nullptr), tp_size_(tp_ ? tp_->size() : 1),
      tp_rank_(tp_ ? tp_->rank() : 0), sp_(sp && tp_ != nullptr) {
  spec_.validate();
  if (seq <= 0) throw InputError("seq must be positive");
  if (spec_.pos == PosEmbed::Learned && seq > spec_.max_positions)
    throw InputError("seq " + std::to_string(seq) + " is longer than the model's " +
                     std::to_string(spec_.max_positions) + " learned positions");
  if (spec_.pos == PosEmbed::Rotary && spec_.head_dim() % 2 != 0)
    throw InputError("rotary positions need an even head dimension");
  if (tp_) {
    const std::string t = std::to_string(tp_size_);
    auto need = [&](int64_t v, const char* what) {
      if (v % tp_size_ != 0)
        throw InputError("tensor parallelism splits " + std::string(what) + " over the tp ranks: " + spec_.name + " has " +
                         std::to_string(v) + ", not a multiple of tp=" + t);
    };
    need(spec_.heads, "the attention heads");
    need(spec_.kv_heads, "the key/value heads");
    need(spec_.ffn, "the MLP width (ffn)");
    if (sp_) need(seq, "the sequence (sp=1)");
  }
  if (spec_.moe.enabled()) moe_ = std::make_shared<MoeBlock>(spec_, tp_, ep, sp_);

  const int64_t h = spec_.hidden, qd = spec_.q_dim(), kv = spec_.kv_dim(), f = spec_.ffn, V = spec_.vocab;
  const int64_t width = spec_.word_embed_dim > 0 ? spec_.word_embed_dim : h;
  const bool ln = spec_.norm == NormKind::LayerNorm;
  const int L = static_cast<int>(spec_.layers);
  auto& S = store_;
  // Tensor-parallel splits (runtime/model/tensor_parallel.hpp); replicated when not given.
  const TpSplit rows_vocab{0, {V}}, rows_qkv{0, {qd, kv, kv}}, cols_h{1, {qd}}, cols_f{1, {f}};
  const TpSplit rows_fc1{0, spec_.mlp == MlpKind::SwiGlu ? std::vector<int64_t>{f, f} : std::vector<int64_t>{f}};
  auto add = [&](std::string name, std::vector<int64_t> shape, Init init, int group, const TpSplit& split = {}) {
    return S.add(std::move(name), std::move(shape), init, group, split, tp_size_);
  };

  // Embedding (group 0). The token embedding is declared first so that it sits at
  // offset 0 of the flat buffer (an aligned start for the vocabulary matrix).
  wte_ = add("wte", {V, width}, Init::Normal, 0, rows_vocab);
  if (spec_.pos == PosEmbed::Learned)  // OPT keeps position_offset (2) unused leading rows
    wpe_ = add("wpe", {spec_.max_positions + spec_.position_offset, h}, Init::Normal, 0);
  if (spec_.type_vocab > 0) wtt_ = add("wtt", {spec_.type_vocab, h}, Init::Normal, 0);
  if (spec_.word_embed_dim > 0 && spec_.word_embed_dim != h) proj_in_ = add("project_in", {h, width}, Init::Normal, 0);
  if (spec_.embed_norm) {
    emb_norm_w_ = add("emb_norm.w", {h}, Init::Ones, 0);
    if (ln) emb_norm_b_ = add("emb_norm.b", {h}, Init::Zeros, 0);
  }

  // Layers (groups 1..L).
  layers_.resize(static_cast<size_t>(L));
  for (int i = 0; i < L; ++i) {
    auto& l = layers_[static_cast<size_t>(i)];
    const std::string pre = "h." + std::to_string(i) + ".";
    const int g = i + 1;
    l.norm1_w = add(pre + "norm1.w", {h}, Init::Ones, g);
    if (ln) l.norm1_b = add(pre + "norm1.b", {h}, Init::Zeros, g);
    if (!spec_.parallel_block) {
      l.norm2_w = add(pre + "norm2.w", {h}, Init::Ones, g);
      if (ln) l.norm2_b = add(pre + "norm2.b", {h}, Init::Zeros, g);
    }
    if (spec_.sandwich_norm && !spec_.parallel_block) {  // Gemma-2's post-attention and post-MLP norms
      l.post1_w = add(pre + "post_norm1.w", {h}, Init::Ones, g);
      if (ln) l.post1_b = add(pre + "post_norm1.b", {h}, Init::Zeros, g);
      l.post2_w = add(pre + "post_norm2.w", {h}, Init::Ones, g);
      if (ln) l.post2_b = add(pre + "post_norm2.b", {h}, Init::Zeros, g);
    }
    l.qkv_w = add(pre + "attn.qkv.w", {qd + 2 * kv, h}, Init::Normal, g, rows_qkv);
    if (spec_.qkv_bias) l.qkv_b = add(pre + "attn.qkv.b", {qd + 2 * kv}, Init::Zeros, g, rows_qkv);
    if (spec_.qk_norm) {  // Qwen3: a norm of width head_dim over each q head and each k head
      l.q_norm_w = add(pre + "attn.q_norm.w", {spec_.head_dim()}, Init::Ones, g);
      if (ln) l.q_norm_b = add(pre + "attn.q_norm.b", {spec_.head_dim()}, Init::Zeros, g);
      l.k_norm_w = add(pre + "attn.k_norm.w", {spec_.head_dim()}, Init::Ones, g);
      if (ln) l.k_norm_b = add(pre + "attn.k_norm.b", {spec_.head_dim()}, Init::Zeros, g);
    }
    l.o_w = add(pre + "attn.o.w", {h, qd}, Init::OutputNormal, g, cols_h);
    if (spec_.out_bias) l.o_b = add(pre + "attn.o.b", {h}, Init::Zeros, g);
    if (moe_ && moe_->is_moe_layer(i)) {  // router, experts, shared MLP instead of the dense MLP
      moe_->declare(S, i, pre, g);
      continue;
    }
    const int64_t up = spec_.mlp == MlpKind::SwiGlu ? 2 * f : f;
    l.fc1_w = add(pre + "mlp.fc1.w", {up, h}, Init::Normal, g, rows_fc1);
    if (spec_.mlp_bias) l.fc1_b = add(pre + "mlp.fc1.b", {up}, Init::Zeros, g, rows_fc1);
    l.fc2_w = add(pre + "mlp.fc2.w", {h, f}, Init::OutputNormal, g, cols_f);
    if (spec_.mlp_bias) l.fc2_b = add(pre + "mlp.fc2.b", {h}, Init::Zeros, g);
  }

  // Head (group L + 1).
  const int gh = L + 1;
  if (spec_.final_norm) {
    final_norm_w_ = add("final_norm.w", {h}, Init::Ones, gh);
    if (ln) final_norm_b_ = add("final_norm.b", {h}, Init::Zeros, gh);
  }
  if (spec_.word_embed_dim > 0 && spec_.word_embed_dim != h) proj_out_ = add("project_out", {width, h}, Init::Normal, gh);
  if (!spec_.tied_embeddings) head_w_ = add("lm_head.w", {V, width}, Init::Normal, gh, rows_vocab);
  if (spec_.lm_head_bias) head_b_ = add("lm_head.b", {V}, Init::Zeros, gh, rows_vocab);
  if (spec_.pooler) {
    pool_w_ = add("pooler.w", {h, h}, Init::Normal, gh);
    pool_b_ = add("pooler.b", {h}, Init::Zeros, gh);
  }
  if (spec_.mlm_head) {
    mlm_w_ = add("mlm.dense.w", {h, h}, Init::Normal, gh);
    mlm_b_ = add("mlm.dense.b", {h}, Init::Zeros, gh);
    mlm_norm_w_ = add("mlm.norm.w", {h}, Init::Ones, gh);
    if (ln) mlm_norm_b_ = add("mlm.norm.b", {h}, Init::Zeros, gh);
    mlm_bias_ = add("mlm.bias", {V}, Init::Zeros, gh, rows_vocab);
  }
}

int64_t count_model_params(const ModelSpec& spec, int64_t seq) {
  return TransformerModel(spec, seq).store().numel();
}

at::Tensor TransformerModel::materialize(at::Device device, at::ScalarType dtype, uint64_t seed) {
  const bool mixed = dtype != at::kFloat;
  // Initial values in fp32; for bf16/fp16 the optimizer keeps them as its master copy.
  store_.materialize(device, dtype);
  at::Tensor init;
  if (mixed) init = at::empty({store_.numel()}, at::TensorOptions().device(device).dtype(at::kFloat));
  at::Tensor target = mixed ? init : store_.params;

  at::manual_seed(seed);
  {
    at::NoGradGuard no_grad;
    for (const auto& i : store_.infos()) init_tensor(i, target.narrow(0, i.offset, i.numel));
    if (mixed) store_.params.copy_(init);
  }
  prepare(device, dtype);
  return mixed ? init : store_.params;
}

void TransformerModel::init_tensor(const ParamInfo& i, at::Tensor t) const {
  // GPT-2's scheme; the output projections scaled by 1/sqrt(2 * layers).
  const double std_out = 0.02 / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(1, spec_.layers)));
  at::NoGradGuard no_grad;
  if ((i.split.split() || i.ep > 1) && (i.init == Init::Normal || i.init == Init::OutputNormal)) {
    // A tensor-parallel part: the full tensor is drawn (the generator advances
    // as in one process) and this rank keeps its part, so the values are the
    // single-process run's.
    ParamInfo whole = i;
    whole.split = {}, whole.ep = 1, whole.shape = i.full_shape, whole.numel = i.full_numel;
    at::Tensor full = at::empty(i.full_shape, t.options());
    init_tensor(whole, full);
    if (i.ep > 1) full = full.narrow(0, int64_t(i.ep_rank) * (i.full_shape[0] / i.ep), i.full_shape[0] / i.ep);
    t.view(i.shape).copy_(tp_slice(full, i.split, tp_rank_, tp_size_));
    return;
  }
  switch (i.init) {
    case Init::Normal: t.normal_(0.0, 0.02); break;
    case Init::OutputNormal: t.normal_(0.0, std_out); break;
    case Init::Zeros: t.zero_(); break;
    case Init::Ones: t.fill_(1.0); break;
  }
}

void TransformerModel::prepare(at::Device device, at::ScalarType dtype) {
  no_bias_ = at::empty({0}, at::TensorOptions().device(device).dtype(dtype));
  if (spec_.pos == PosEmbed::Rotary) {
    // GPT-NeoX rotary: theta_j = base^(-2j/d) (base = rope_theta, 10000 unless the spec says), angles
    // (s, d/2) duplicated to (s, d).
    const int64_t d = spec_.head_dim();
    auto f32 = at::TensorOptions().device(device).dtype(at::kFloat);
    at::Tensor inv = at::pow(spec_.rotary_base(), at::arange(0, d, 2, f32) / static_cast<double>(d)).reciprocal();
    at::Tensor ang = at::outer(at::arange(seq_, f32), inv);
    at::Tensor emb = at::cat({ang, ang}, -1).unsqueeze(1);  // (s, 1, d)
    rope_cos_ = emb.cos().to(dtype);
    rope_sin_ = emb.sin().to(dtype);
  }
}

at::Tensor TransformerModel::linear(const at::Tensor& x, int w, int b, int64_t padded_rows, int64_t valid_rows) const {
  if (linear_hook)
    if (at::Tensor y = linear_hook(x, w, b); y.defined()) return y;
  // No bias: an empty (defined) tensor, which every LibTorch version's custom
  // Function machinery accepts as an input.
  return LinearAccum::apply(x, p(w), b >= 0 ? p(b) : no_bias_, padded_rows, valid_rows,
                            static_cast<Communicator*>(nullptr), true, static_cast<at::Tensor*>(nullptr));
}

at::Tensor TransformerModel::row_linear(const at::Tensor& x, int w, int b) const {
  // The hook: without tp or under sp through linear() (under sp with no bias:
  // row_out adds it); under tp without sp here, with the bias (the hook puts
  // it in on tp rank 0 only, as below).
  if (linear_hook && tp_ && !sp_)
    if (at::Tensor y = linear_hook(x, w, b); y.defined()) return y;
  if (!bias_in_row_gemm()) return linear(x, w, tp_ ? -1 : b);  // under sp: the bias in row_out
  return LinearAccum::apply(x, p(w), b >= 0 ? p(b) : no_bias_, int64_t(0), int64_t(-1),
                            static_cast<Communicator*>(nullptr), tp_rank_ == 0, static_cast<at::Tensor*>(nullptr));
}

at::Tensor TransformerModel::col_linear(const at::Tensor& x, int w, int b, int64_t padded_rows,
                                        int64_t valid_rows, at::Tensor* out_slot) const {
  // Under sp the hook gets the sequence shard and gathers it itself (fp8's
  // linears; LoRA refuses sp).
  if (linear_hook)
    if (at::Tensor y = linear_hook(x, w, b); y.defined()) return y;
  return LinearAccum::apply(x, p(w), b >= 0 ? p(b) : no_bias_, padded_rows, valid_rows,
                            sp_ ? tp_ : static_cast<Communicator*>(nullptr), true, out_slot);
}

at::Tensor TransformerModel::enter_tp(const at::Tensor& x) const {
  // Under sp the all-gather is inside the column-parallel GEMMs (col_linear).
  if (!tp_ || sp_) return x;
  return copy_to_tp(x, tp_);
}

at::Tensor TransformerModel::leave_tp(const at::Tensor& x) const {
  if (!tp_) return x;
  return sp_ ? scatter_seq(x, tp_) : reduce_from_tp(x, tp_);
}

at::Tensor TransformerModel::row_out(const at::Tensor& y, int bias) const {
  if (!tp_) return y;
  at::Tensor r = leave_tp(y);
  return bias >= 0 && !bias_in_row_gemm() ? r + p(bias) : r;
}

at::Tensor TransformerModel::post_norm(const at::Tensor& x, int w, int b) const {
  return w >= 0 ? norm(x, w, b) : x;
}

// Qwen3's q_norm/k_norm weights (or biases) as a rank uses them. Under tp
// without sp each rank normalises only its heads, so the replicated weight's
// gradient is partial: copy_to_tp (identity forward, all-reduce backward)
// sums it over the tp group; under sp the engine's ReplicaReduce sums the
// replicated gradients already.
at::Tensor TransformerModel::head_norm_weight(int w) const {
  if (w < 0) return at::Tensor();
  return tp_ && !sp_ ? copy_to_tp(p(w), tp_) : p(w);
}

// The q/k norms apart from the rotation (LayerNorm kinds, no rotary): ATen's
// norms over each head's head_dim values. The runtime's fused norm kernel
// (one 32-thread block a row) was tried here and ran Qwen3's 128-wide heads
// slower (validation/h200/qknorm55); RMS norms before rotary take
// qk_norm_rotary_qkv.
at::Tensor TransformerModel::head_norm(const at::Tensor& x, int w, int b) const {
  at::Tensor wt = head_norm_weight(w), bt = head_norm_weight(b);
  const int64_t d = spec_.head_dim();
  if (spec_.norm == NormKind::LayerNorm) return at::layer_norm(x, {d}, wt, bt, norm_eps());
  return at::rms_norm(x, {d}, wt, norm_eps());
}

// The model's norms go through runtime/model/fused_ops (one kernel each way on
// CUDA, at::layer_norm / at::rms_norm elsewhere).
at::Tensor TransformerModel::norm(const at::Tensor& x, int w, int b) const {
  return rt::norm(x, p(w), popt(b), norm_eps(), spec_.norm != NormKind::LayerNorm);
}

std::array<at::Tensor, 2> TransformerModel::add_norm(const at::Tensor& x, const at::Tensor& y, int w, int b) const {
  return rt::add_norm(x, y, p(w), popt(b), norm_eps(), spec_.norm != NormKind::LayerNorm);
}

// Under tp, xn is the full input (after enter_tp; under sp the sequence shard,
// which the qkv GEMM gathers) and the result this rank's
// partial output projection (its bias in the GEMM on tensor-parallel rank 0
// only, or under sp added by row_out after the reduce-scatter): this rank's
// heads, nh/tp of them and kv_heads/tp key/value heads.
at::Tensor TransformerModel::attention(int64_t i, const at::Tensor& xn, bool selective) const {
  const auto& l = layers_[static_cast<size_t>(i)];
  const int64_t hd = spec_.head_dim(), nh = spec_.heads / tp_size_, nkv = spec_.kv_heads / tp_size_;
  at::Tensor qkv = col_linear(xn, l.qkv_w, l.qkv_b);  // (b, s, h + 2 kv); sp: xn is (b, s/tp, h)
  const int64_t b = qkv.size(0), s = qkv.size(1), h = nh * hd, kv = nkv * hd;
  at::Tensor q, k, v;
  // Qwen3's and Gemma-3's q/k norms (RMS) and the rotation after them: one
  // function, v a view of the projection's output, which it keeps.
  const bool qk_fused = spec_.qk_norm && spec_.pos == PosEmbed::Rotary && spec_.norm != NormKind::LayerNorm;
  if (spec_.pos == PosEmbed::Rotary && !spec_.qk_norm) {
    // One fused function: rotated q and k and a copy of v, the projection's output then freed.
    auto r = rotary_qkv(qkv, rope_cos_.narrow(0, 0, s), rope_sin_.narrow(0, 0, s), nh, nkv, hd);
    q = r[0], k = r[1], v = r[2];
  } else if (qk_fused) {
    auto r = qk_norm_rotary_qkv(qkv, head_norm_weight(l.q_norm_w), head_norm_weight(l.k_norm_w),
                                rope_cos_.narrow(0, 0, s), rope_sin_.narrow(0, 0, s), nh, nkv, hd, norm_eps());
    q = r[0], k = r[1], v = r[2];
  } else {
    // split (not narrow): its backward concatenates the three gradients in one
    // kernel; narrow's would zero-fill three full-size tensors and add them.
    auto parts = qkv.split_with_sizes({h, kv, kv}, -1);
    q = parts[0].view({b, s, nh, hd});
    k = parts[1].view({b, s, nkv, hd});
    v = parts[2].view({b, s, nkv, hd});
  }
  if (spec_.qk_norm && !qk_fused) q = head_norm(q, l.q_norm_w, l.q_norm_b), k = head_norm(k, l.k_norm_w, l.k_norm_b);
  if (spec_.pos == PosEmbed::Rotary && spec_.qk_norm && !qk_fused) {  // after the norms: q and k rotated apart
    at::Tensor c = rope_cos_.narrow(0, 0, s), sn = rope_sin_.narrow(0, 0, s);
    q = rotary(q, c, sn);
    k = rotary(k, c, sn);
  }
  q = q.transpose(1, 2);  // (b, nh, s, hd)
  k = k.transpose(1, 2);  // (b, nkv, s, hd)
  v = v.transpose(1, 2);
  const bool causal = spec_.arch == Arch::Decoder, gqa = nkv != nh;
  // Sliding window (runtime/model/attention.hpp): the layers the spec windows;
  // s is the whole sequence here (sp's column-parallel GEMM gathered it; cp
  // with a window is refused in set_context_parallel).
  const int64_t window = spec_.layer_windowed(i) ? spec_.sliding_window : 0;
  at::Tensor o = cp_ ? cp_->attention(q, k, v)  // ring attention (causal)
                 : selective && at::GradMode::is_enabled()
                     ? AttentionCoreCheckpoint::apply(q, k, v, causal, gqa, window)
                     : attend(q, k, v, causal, gqa, window);
  o = o.transpose(1, 2).reshape({b, s, h});  // (b, s, h)
  return row_linear(o, l.o_w, l.o_b);
}

at::Tensor TransformerModel::mlp(int64_t i, const at::Tensor& xn) const {
  const auto& l = layers_[static_cast<size_t>(i)];
  at::Tensor u = col_linear(xn, l.fc1_w, l.fc1_b);  // (b, s, ffn) or (b, s, 2 ffn)
  at::Tensor a;
  switch (spec_.mlp) {
    case MlpKind::Gelu: a = at::gelu(u, spec_.arch == Arch::Encoder ? "none" : "tanh"); break;
    case MlpKind::Relu: a = at::relu(u); break;
    case MlpKind::SwiGlu:  // this rank's [gate_r; up_r]; GeGLU (Gemma): GELU-tanh gate, SwiGLU: SiLU
      a = glu(u, spec_.gelu_gate);
      break;
  }
  return row_linear(a, l.fc2_w, l.fc2_b);  // under tp: partial (row_linear says where its bias goes)
}

// Under tp, x and the result are the full activations on every rank (sp: this
// rank's sequence shard); enter_tp/row_out bracket each tensor-parallel region.
at::Tensor TransformerModel::layer(int64_t i, const at::Tensor& x, bool selective) const {
  const auto& l = layers_[static_cast<size_t>(i)];
  if (spec_.arch == Arch::Encoder) {  // post-norm (BERT)
    at::Tensor a = norm(x + row_out(attention(i, enter_tp(x), selective), l.o_b), l.norm1_w, l.norm1_b);
    return norm(a + row_out(mlp(i, enter_tp(a)), l.fc2_b), l.norm2_w, l.norm2_b);
  }
  if (spec_.parallel_block) {  // GPT-J
    at::Tensor n = norm(x, l.norm1_w, l.norm1_b);
    if (!tp_) return x + attention(i, n, selective) + mlp(i, n);
    // One collective for both branches: their partial outputs are summed first.
    at::Tensor ng = enter_tp(n);
    at::Tensor y = leave_tp(attention(i, ng, selective) + mlp(i, ng));
    if (!bias_in_row_gemm()) {  // else each partial output carried its bias on rank 0
      if (l.o_b >= 0) y = y + p(l.o_b);
      if (l.fc2_b >= 0) y = y + p(l.fc2_b);
    }
    return x + y;
  }
  // The attention's residual add and the second norm are one operation (fused_ops' add_norm).
  const auto [a, n2] =
      add_norm(x, post_norm(row_out(attention(i, enter_tp(norm(x, l.norm1_w, l.norm1_b)), selective), l.o_b),
                            l.post1_w, l.post1_b),
               l.norm2_w, l.norm2_b);
  if (moe_ && moe_->is_moe_layer(i)) return a + moe_->forward(store_, i, n2, moe_grad_scale);
  return a + post_norm(row_out(mlp(i, enter_tp(n2)), l.fc2_b), l.post2_w, l.post2_b);
}

void TransformerModel::set_context_parallel(const ContextParallel* cp) {
  if (cp && spec_.windowed_layers(seq_) > 0)  // also refused in legality (costmodel/compat.cpp)
    throw InputError("context parallelism with sliding-window attention is not run (the ring attends every K/V chunk)");
  cp_ = cp;
  // Rotary tables by the rank's positions: attention() reads their first rows.
  if (cp_ && rope_cos_.defined()) {
    const at::Tensor pos = cp_->positions(rope_cos_.device());
    rope_cos_ = rope_cos_.index_select(0, pos);
    rope_sin_ = rope_sin_.index_select(0, pos);
  }
}

at::Tensor TransformerModel::embed(const at::Tensor& ids) const {
  at::Tensor x;
  if (!tp_) {
    x = at::embedding(p(wte_), ids);  // (b, s, width)
  } else {
    // Vocabulary-parallel (Megatron-LM): ids outside this rank's rows look up
    // row 0 and are zeroed; the sum over the ranks is the embedding.
    const int64_t lo = vocab_begin();
    at::Tensor outside = ids.lt(lo).logical_or(ids.ge(lo + vocab_valid()));  // (b, s)
    x = at::embedding(p(wte_), (ids - lo).masked_fill(outside, 0)).masked_fill(outside.unsqueeze(-1), 0);
    x = leave_tp(x);  // (b, s, width); sp: (b, s/tp, width)
  }
  // This rank's positions: all of them, or under sp those of its shard's
  // tokens (a run of the flattened b * s tokens; runtime/model/tensor_parallel.hpp).
  const int64_t b = x.size(0), s = x.size(1);
  if (proj_in_ >= 0) x = linear(x, proj_in_, -1);
  if (wpe_ >= 0) {
    if (cp_) {  // this cp rank's two chunks (sp with learned positions is refused under cp: costmodel/compat.cpp)
      x = x + at::embedding(p(wpe_), cp_->positions(x.device()).add_(spec_.position_offset));
    } else if (!sp_ || b == 1) {  // one run of consecutive positions
      x = x + p(wpe_).narrow(0, spec_.position_offset + (sp_ ? int64_t(tp_rank_) * s : 0), s);
    } else {
      const int64_t n = b * s;
      at::Tensor pos = at::arange(int64_t(tp_rank_) * n, int64_t(tp_rank_ + 1) * n, ids.options().dtype(at::kLong));
      x = x + at::embedding(p(wpe_), pos.remainder(s * tp_size_).add_(spec_.position_offset).view({b, s}));
    }
  }
  if (wtt_ >= 0) x = x + p(wtt_).select(0, 0);  // token type 0 everywhere
  if (emb_norm_w_ >= 0) x = norm(x, emb_norm_w_, emb_norm_b_);
  return x;
}

at::Tensor TransformerModel::logits(const at::Tensor& x_in) const {
  at::Tensor x = x_in;
  if (spec_.mlm_head) {
    x = at::gelu(linear(x, mlm_w_, mlm_b_));
    x = norm(x, mlm_norm_w_, mlm_norm_b_);
    return col_linear(enter_tp(x), wte_, mlm_bias_, padded_vocab(), vocab_valid());
  }
  if (final_norm_w_ >= 0) x = norm(x, final_norm_w_, final_norm_b_);
  if (proj_out_ >= 0) x = linear(x, proj_out_, -1);
  // Under tp the head is column-parallel over the vocabulary: enter_tp's
  // backward (sp: the GEMM's reduce-scatter) sums the input gradient's
  // vocabulary parts.
  return col_linear(enter_tp(x), head_w_ >= 0 ? head_w_ : wte_, head_b_, padded_vocab(), vocab_valid(),
                    keep_head_logits ? &head_logits_ : nullptr);
}

at::Tensor TransformerModel::block(int64_t i, const at::Tensor& x, Ckpt ckpt) const {
  if (ckpt == Ckpt::Full && at::GradMode::is_enabled())
    return LayerCheckpoint::apply(x, reinterpret_cast<int64_t>(this), i);
  return layer(i, x, ckpt == Ckpt::Selective);
}

at::Tensor TransformerModel::head_loss(const at::Tensor& x, const at::Tensor& labels, double grad_hint) const {
  at::Tensor lg = logits(x);
  const int64_t V = padded_vocab();
  int64_t rows = loss_chunk_rows;
  if (rows <= 0) rows = std::max<int64_t>(1, (int64_t(256) << 20) / (4 * V));
  return ChunkedCrossEntropy::apply(lg.view({-1, V}), labels.reshape({-1}), rows, grad_hint,
                                    reinterpret_cast<int64_t>(tp_), vocab_begin(), vocab_valid(), spec_.logit_softcap);
}

at::Tensor TransformerModel::loss(const at::Tensor& ids, const at::Tensor& labels, Ckpt ckpt, double grad_hint) {
  moe_grad_scale = grad_hint;
  at::Tensor x = embed(ids);
  for (int64_t i = 0; i < spec_.layers; ++i) x = block(i, x, ckpt);
  if (before_head) before_head();
  return head_loss(x, labels, grad_hint);
}

}  // namespace planner::rt
