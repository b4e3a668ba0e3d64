#include "runtime/model/moe_gemm.hpp"

#include <torch/csrc/autograd/custom_function.h>

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

// The gradient the leaf has bound now (under ZeRO-2/3 the Engine binds a
// unit's gradient buffer just before its backward), or a zeroed tensor of its
// shape that the backward returns to autograd instead.
struct WeightGrad {
  at::Tensor bound, own;
  explicit WeightGrad(const at::Tensor& leaf) : bound(leaf.grad()) {
    if (!bound.defined()) own = at::zeros_like(leaf);
  }
  at::Tensor& target() { return bound.defined() ? bound : own; }
  at::Tensor to_autograd() const { return own; }  // undefined when accumulated into the bound one
};

// Rows [r0, r0 + n) of t padded with zeros to np rows (np >= n).
at::Tensor padded_rows(const at::Tensor& t, int64_t r0, int64_t n, int64_t np) {
  const at::Tensor r = t.narrow(0, r0, n);
  return np == n ? r : at::constant_pad_nd(r, {0, 0, 0, np - n});
}

// f(j, first row, rows, padded rows) for every expert with rows.
template <typename F>
void for_each_expert(const std::vector<int64_t>& rows, int64_t pad_rows, F&& f) {
  int64_t at_row = 0;
  for (size_t j = 0; j < rows.size(); ++j) {
    const int64_t n = rows[j];
    if (n == 0) continue;
    f(int64_t(j), at_row, n, (n + pad_rows - 1) / pad_rows * pad_rows);
    at_row += n;
  }
}

struct WeightLinear : torch::autograd::Function<WeightLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});  // w: the leaf, read again in the backward
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    // Its own tensor, not a view made here (as LinearAccum's output).
    return at::_unsafe_view(at::mm(x.reshape({-1, w.size(1)}), w.t()), shape);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const at::Tensor g = grads[0].reshape({-1, w.size(0)});  // (tokens, out)
    at::Tensor gx;
    if (ctx->needs_input_grad(0)) gx = at::mm(g, w).view(x.sizes());
    WeightGrad gw(w);
    gw.target().addmm_(g.t(), x.reshape({-1, w.size(1)}));
    return {gx, gw.to_autograd()};
  }
};

struct ExpertGemm : torch::autograd::Function<ExpertGemm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, std::vector<int64_t> rows,
                            int64_t pad_rows) {
    ctx->save_for_backward({x, w});  // w: the stacked leaf, read again in the backward
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["pad"] = pad_rows;
    at::Tensor y = at::empty({x.size(0), w.size(1)}, x.options());
    for_each_expert(rows, pad_rows, [&](int64_t j, int64_t r0, int64_t n, int64_t np) {
      y.narrow(0, r0, n).copy_(at::mm(padded_rows(x, r0, n, np), w.select(0, j).t()).narrow(0, 0, n));
    });
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const auto rows = ctx->saved_data["rows"].toIntVector();
    const int64_t pad_rows = ctx->saved_data["pad"].toInt();
    const at::Tensor g = grads[0].contiguous();  // (N, out)
    at::Tensor gx = ctx->needs_input_grad(0) ? at::empty_like(x) : at::Tensor();
    WeightGrad gw(w);
    for_each_expert(rows, pad_rows, [&](int64_t j, int64_t r0, int64_t n, int64_t np) {
      const at::Tensor gj = padded_rows(g, r0, n, np);
      if (gx.defined()) gx.narrow(0, r0, n).copy_(at::mm(gj, w.select(0, j)).narrow(0, 0, n));
      gw.target().select(0, j).addmm_(gj.t(), padded_rows(x, r0, n, np));
    });
    return {gx, gw.to_autograd(), at::Tensor(), at::Tensor()};
  }
};

struct GroupedExpertGemm : torch::autograd::Function<GroupedExpertGemm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w, const at::Tensor& ends) {
    const at::Tensor x = x_in.contiguous();
    ctx->save_for_backward({x, w, ends});  // w: the stacked leaf, read again in the backward
    return at::_grouped_mm(x, w.transpose(1, 2), ends);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &ends = saved[2];
    const at::Tensor g = grads[0].contiguous();  // (N, out)
    at::Tensor gx;
    if (ctx->needs_input_grad(0)) gx = at::_grouped_mm(g, w, ends);  // (N, in)
    // (E, out, in): group j's g_j^T x_j, the contraction over its rows.
    at::Tensor gw = at::_grouped_mm(g.t(), x, ends);
    if (at::Tensor bound = w.grad(); bound.defined()) {
      bound.add_(gw);
      gw = at::Tensor();
    }
    return {gx, gw, at::Tensor()};
  }
};

}  // namespace

at::Tensor weight_linear(const at::Tensor& x, const at::Tensor& w) { return WeightLinear::apply(x, w); }

at::Tensor expert_gemm(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& rows, int64_t pad_rows) {
  return ExpertGemm::apply(x, w, rows, pad_rows);
}

at::Tensor grouped_expert_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& ends) {
  return GroupedExpertGemm::apply(x, w, ends);
}

}  // namespace planner::rt
