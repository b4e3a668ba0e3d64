// FP8 linear layers through at::_scaled_mm (runtime/model/fp8_linear.hpp).
#include "runtime/model/fp8_linear.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/comm/communicator.hpp"
#include "runtime/model/fused_ops.hpp"
#include "runtime/model/kernel_dispatch.hpp"
#include "runtime/model/tensor_parallel.hpp"
#include "runtime/model/transformer.hpp"

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

double max_of(at::ScalarType fp8) {
  if (fp8 == at::kFloat8_e4m3fn) return kE4m3Max;
  if (fp8 == at::kFloat8_e5m2) return kE5m2Max;
  throw std::invalid_argument("fp8: expected Float8_e4m3fn or Float8_e5m2");
}

// at::_scaled_mm (cuBLASLt on Hopper) wants every dimension a multiple of 16.
void check_dims(int64_t tokens, int64_t out, int64_t in) {
  if (tokens % 16 || out % 16 || in % 16)
    throw std::invalid_argument("precision=fp8: the FP8 GEMM needs tokens, in and out features multiples of 16, got " +
                                std::to_string(tokens) + " x " + std::to_string(in) + " -> " + std::to_string(out));
}

enum Fp8Flags : int64_t { kRow = 1, kGatherSeq = 2, kBiasInForward = 4 };

int64_t flags_of(const Fp8Tp& t) {
  return (t.row ? kRow : 0) | (t.gather_seq ? kGatherSeq : 0) | (t.bias_in_forward ? kBiasInForward : 0);
}

// The forward's amaxes of x and w, each the whole tensor's: under tp one
// all-reduce MAX of both over the tp group (the header says which are split).
std::array<at::Tensor, 2> forward_amaxes(const at::Tensor& x2, const at::Tensor& w, Communicator* tp) {
  if (!tp) return {fp8_amax(x2), fp8_amax(w)};
  at::Tensor both = at::cat({fp8_amax(x2), fp8_amax(w)});  // (2) fp32
  tp->all_reduce_max(both)->wait();
  return {both.narrow(0, 0, 1), both.narrow(0, 1, 1)};
}

// y = x w^T + b with x (.., in), w (out, in), b (out) or empty; see the header.
// The forward's amax of x and of w are kept for the backward (x is saved and
// w does not change before the optimizer step), so the backward reads each
// of them once, for its transposed cast. `comm` is the tp group's
// Communicator* (0 without tp), `flags` Fp8Flags.
struct Fp8LinearFn : torch::autograd::Function<Fp8LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& b,
                            int64_t comm, int64_t flags) {
    auto* tp = reinterpret_cast<Communicator*>(comm);
    const int64_t out = w.size(0), in = w.size(1);
    // Under sp (column-parallel) the whole sequence, gathered here and not kept.
    const at::Tensor x = flags & kGatherSeq ? all_gather_seq(x_in, *tp) : x_in;
    const at::Tensor x2 = x.reshape({-1, in});
    check_dims(x2.size(0), out, in);
    const auto [amax_x, amax_w] = forward_amaxes(x2, w, tp);
    const Fp8Tensor x8 = cast_fp8(x2, amax_x, at::kFloat8_e4m3fn, true, false).row;
    const Fp8Tensor w8 = cast_fp8(w, amax_w, at::kFloat8_e4m3fn, true, false).row;
    // x (row-major) times w^T: w8 is (out, in) contiguous, so its transpose is column-major.
    const bool bias = b.numel() > 0 && (flags & kBiasInForward);
    at::Tensor y = fp8_mm(x8, {w8.data.t(), w8.scale_inv}, x.scalar_type(), bias ? b : at::Tensor());
    ctx->save_for_backward({x_in, w, b});
    ctx->saved_data["gx"] = x_in.requires_grad();
    ctx->saved_data["amax_x"] = amax_x;
    ctx->saved_data["amax_w"] = amax_w;
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["flags"] = flags;
    auto shape = x.sizes().vec();
    shape.back() = out;
    // Not a view (y is this function's own), as LinearAccum returns it: a
    // later in-place op on a custom function's view output is refused.
    return at::_unsafe_view(y, shape);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x_in = saved[0], &w = saved[1], &b = saved[2];
    const int64_t out = w.size(0), in = w.size(1), flags = ctx->saved_data["flags"].toInt();
    auto* tp = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const at::ScalarType dt = x_in.scalar_type();
    const at::Tensor g2 = grads[0].reshape({-1, out});  // (tokens, out)
    const bool need_gx = ctx->saved_data["gx"].toBool();
    std::optional<PendingSeq> gather;
    if (flags & kGatherSeq) gather = all_gather_seq_start(x_in, *tp);  // for dW; overlaps dX's GEMM
    // dY in e5m2: row-major for dX, transposed (out x tokens) for dW. A
    // column-parallel layer's dY holds this rank's output columns: its amax
    // is the maximum over tp.
    at::Tensor amax_g = fp8_amax(g2);
    if (tp && !(flags & kRow)) tp->all_reduce_max(amax_g)->wait();
    Fp8Casts g8 = cast_fp8(g2, amax_g, at::kFloat8_e5m2, need_gx, true);
    at::Tensor gx, gw_ret, gb_ret;
    std::optional<PendingSeq> scatter;
    if (need_gx) {
      // dX (tokens x in) = dY (tokens x out) W (out x in): W column-major is
      // W's transposed cast (in x out, contiguous), transposed back as a view.
      const Fp8Tensor wt = cast_fp8(w, ctx->saved_data["amax_w"].toTensor(), at::kFloat8_e4m3fn, false, true).t;
      std::vector<int64_t> shape = x_in.sizes().vec();
      if (gather) shape[1] *= tp->size();  // the gathered sequence
      gx = fp8_mm(g8.row, {wt.data.t(), wt.scale_inv}, dt).view(shape);
      g8.row = {};  // freed before X's cast (costmodel/fp8_costs.cpp counts these moments)
      if (gather) scatter = reduce_scatter_seq_start(gx, *tp);  // overlaps dW's GEMM
    }
    // dW (out x in) = dY^T (out x tokens, row-major) X (tokens x in, column-major: X's transposed cast).
    const at::Tensor x = gather ? gather->wait() : x_in;
    const Fp8Tensor xt =
        cast_fp8(x.reshape({-1, in}), ctx->saved_data["amax_x"].toTensor(), at::kFloat8_e4m3fn, false, true).t;
    const at::Tensor dw = fp8_mm(g8.t, {xt.data.t(), xt.scale_inv}, dt);
    // Saved leaves unpack as the parameters themselves, so .grad() is the
    // gradient buffer bound now (as LinearAccum, runtime/model/transformer.cpp).
    at::Tensor gw = w.grad();
    if (gw.defined()) gw.add_(dw);
    else gw_ret = dw;
    if (b.numel() > 0) {  // on every tp rank, also where the forward left the bias out
      at::Tensor db = g2.sum(0);
      at::Tensor gb = b.grad();
      if (gb.defined()) gb.add_(db);
      else gb_ret = db;
    }
    if (scatter) gx = scatter->wait();
    return {gx, gw_ret, gb_ret, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fp8_amax(const at::Tensor& x) {
#if PLANNER_FUSED_CUDA
  if (kernels_run_on(x) && x.is_contiguous()) {
    at::Tensor amax = at::empty({1}, x.options().dtype(at::kFloat));
    fused::fp8_amax(*kernel_dtype(x), x.data_ptr(), x.numel(), amax.data_ptr<float>(), stream_of(x));
    return amax;
  }
#endif
  // One reduction kernel reading x (no |x| temporary), in fp32.
  return at::linalg_vector_norm(x, INFINITY, std::nullopt, false, at::kFloat).reshape({1});
}

at::Tensor fp8_scale_from_amax(const at::Tensor& amax, at::ScalarType fp8) {
  const double mx = max_of(fp8);
  return at::where(amax > 0, amax.reciprocal().mul_(mx), 1.0).reshape({1});
}

at::Tensor fp8_scale(const at::Tensor& x, at::ScalarType fp8) { return fp8_scale_from_amax(fp8_amax(x), fp8); }

Fp8Casts cast_fp8(const at::Tensor& x2, const at::Tensor& amax, at::ScalarType fp8, bool row, bool transposed) {
  (void)max_of(fp8);  // refuses a dtype that is not FP8
  if (x2.dim() != 2) throw std::invalid_argument("cast_fp8: expected a matrix");
  Fp8Casts out;
#if PLANNER_FUSED_CUDA
  if (kernels_run_on(x2) && x2.is_contiguous() &&
      (!transposed || fused::fp8_cast_supported(*kernel_dtype(x2), x2.data_ptr(), x2.size(0), x2.size(1)))) {
    const int64_t rows = x2.size(0), cols = x2.size(1);
    const at::Tensor scale_inv = at::empty({1}, x2.options().dtype(at::kFloat));
    if (row) out.row = {at::empty({rows, cols}, x2.options().dtype(fp8)), scale_inv};
    if (transposed) out.t = {at::empty({cols, rows}, x2.options().dtype(fp8)), scale_inv};
    fused::fp8_cast(*kernel_dtype(x2), x2.data_ptr(), rows, cols, amax.data_ptr<float>(), fp8 == at::kFloat8_e5m2,
                    row ? out.row.data.data_ptr() : nullptr, transposed ? out.t.data.data_ptr() : nullptr,
                    scale_inv.data_ptr<float>(), stream_of(x2));
    return out;
  }
#endif
  const at::Tensor scale = fp8_scale_from_amax(amax, fp8);
  // A one-element (not 0-dim) fp32 scale promotes the product to fp32, so
  // the scaling rounds once, at the cast. No clamp is needed: |x| <= amax,
  // so |x * scale| exceeds max_fp8 by a few fp32 rounding steps at most,
  // which the cast rounds back to max_fp8 (the next step, 480 for e4m3 and
  // 65536 for e5m2, lies 7% and 14% higher), never to NaN or inf.
  at::Tensor q = at::mul(x2, scale).to(fp8);
  const at::Tensor scale_inv = scale.reciprocal();
  if (transposed) out.t = {q.t().contiguous(), scale_inv};
  if (row) out.row = {std::move(q), scale_inv};
  return out;
}

Fp8Tensor quantize_fp8(const at::Tensor& x, at::ScalarType fp8) {
  const at::Tensor x2 = x.reshape({-1, x.dim() > 0 ? x.size(-1) : 1});
  Fp8Tensor q = cast_fp8(x2, fp8_amax(x2), fp8, true, false).row;
  q.data = q.data.view(x.sizes());
  return q;
}

at::Tensor dequantize_fp8(const Fp8Tensor& q, at::ScalarType out) {
  return (q.data.to(at::kFloat) * q.scale_inv).to(out);
}

at::Tensor fp8_mm(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType out, const at::Tensor& bias) {
  std::optional<at::Tensor> bias_opt;
  if (bias.defined()) bias_opt = bias;
  return at::_scaled_mm(a.data, b.data, a.scale_inv, b.scale_inv, bias_opt, /*scale_result=*/std::nullopt, out,
                        /*use_fast_accum=*/false);
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const Fp8Tp& tp) {
  if ((tp.gather_seq || !tp.bias_in_forward) && !tp.tp)
    throw std::invalid_argument("fp8_linear: a sequence-parallel or rank-0-bias layer needs its tp group");
  return Fp8LinearFn::apply(x, w, b, reinterpret_cast<int64_t>(tp.tp), flags_of(tp));
}

bool fp8_gemm_available(const at::Device& device) {
  // A 16 x 16 FP8 GEMM, tried once per device: CUDA needs compute capability
  // 8.9 or later, and whether a CPU kernel exists depends on the LibTorch build.
  static std::mutex mu;
  static std::map<std::string, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = device.str();
  if (auto it = known.find(key); it != known.end()) return it->second;
  bool ok = false;
  try {
    const auto opts = at::TensorOptions().device(device);
    const at::Tensor a = at::ones({16, 16}, opts.dtype(at::kFloat)).to(at::kFloat8_e4m3fn);
    const at::Tensor one = at::ones({1}, opts.dtype(at::kFloat));
    const at::Tensor y = at::_scaled_mm(a, a.t(), one, one, std::nullopt, std::nullopt, at::kBFloat16, false);
    ok = y.to(at::kFloat).sum().item<double>() == 16.0 * 16 * 16;
  } catch (const std::exception&) {
    ok = false;
  }
  known[key] = ok;
  return ok;
}

Fp8Linears::Fp8Linears(TransformerModel& model, Communicator* tp)
    : model_(model), tp_(model.tp_size() > 1 ? tp : nullptr) {
  if (model.tp_size() > 1 && (!tp || tp->size() != model.tp_size()))
    throw std::invalid_argument("precision=fp8: the model is tensor-parallel (tp=" + std::to_string(model.tp_size()) +
                                ") but no tp group of its size was given");
  if (model.linear_hook) throw std::invalid_argument("precision=fp8: the model's linear layers are already hooked (LoRA)");
  for (int64_t i = 0; i < model.spec().layers; ++i) {
    const LayerIds& l = model.layer_ids(i);
    for (int id : {l.qkv_w, l.o_w, l.fc1_w, l.fc2_w})
      if (id >= 0) weights_.insert(id);
    for (int id : {l.o_w, l.fc2_w})
      if (id >= 0) rows_.insert(id);
  }
  model.linear_hook = [this](const at::Tensor& x, int w, int b) -> at::Tensor {
    if (!weights_.count(w)) return {};  // the embedding projection, the head, the MLM transform: bf16
    const ParamStore& store = model_.store();
    const at::Tensor bias = b >= 0 ? store.get(b) : at::empty({0}, x.options());
    Fp8Tp t;
    if (tp_) {
      t.tp = tp_;
      t.row = rows_.count(w) > 0;
      t.gather_seq = model_.sequence_parallel() && !t.row;
      t.bias_in_forward = !t.row || tp_->rank() == 0;  // under sp a row-parallel layer gets no bias (b = -1)
    }
    return fp8_linear(x, store.get(w), bias, t);
  };
}

Fp8Linears::~Fp8Linears() { model_.linear_hook = nullptr; }

}  // namespace planner::rt
