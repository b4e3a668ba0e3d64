#include "runtime/model/tensor_parallel.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace planner::rt {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

int64_t part_len(int64_t len, int tp) { return (len + tp - 1) / tp; }

// Rows of piece `len` that rank r really holds (the rest of its range is padding).
int64_t rows_held(int64_t len, int r, int tp) {
  return std::clamp<int64_t>(len - int64_t(r) * part_len(len, tp), 0, part_len(len, tp));
}

void check_split(const std::vector<int64_t>& full, const TpSplit& s) {
  if (s.dim < 0 || size_t(s.dim) >= full.size()) throw std::invalid_argument("TpSplit: dimension out of range");
  int64_t sum = 0;
  for (int64_t p : s.parts) sum += p;
  if (sum != full[size_t(s.dim)]) throw std::invalid_argument("TpSplit: the pieces do not add up to the dimension");
}

}  // namespace

std::vector<int64_t> tp_local_shape(const std::vector<int64_t>& full, const TpSplit& s, int tp) {
  if (!s.split() || tp == 1) return full;
  check_split(full, s);
  std::vector<int64_t> out = full;
  out[size_t(s.dim)] = 0;
  for (int64_t p : s.parts) out[size_t(s.dim)] += part_len(p, tp);
  return out;
}

at::Tensor tp_slice(const at::Tensor& full, const TpSplit& s, int rank, int tp) {
  if (!s.split() || tp == 1) return full.contiguous();
  at::Tensor out = at::zeros(tp_local_shape(full.sizes().vec(), s, tp), full.options());
  int64_t src = 0, dst = 0;
  for (int64_t len : s.parts) {
    const int64_t n = rows_held(len, rank, tp);
    out.narrow(s.dim, dst, n).copy_(full.narrow(s.dim, src + int64_t(rank) * part_len(len, tp), n));
    src += len, dst += part_len(len, tp);
  }
  return out;
}

at::Tensor tp_assemble(const at::Tensor& gathered, const TpSplit& s, const std::vector<int64_t>& full_shape) {
  const int tp = int(gathered.size(0));
  if (!s.split() || tp == 1) return gathered.select(0, 0).reshape(full_shape);
  check_split(full_shape, s);
  at::Tensor out = at::empty(full_shape, gathered.options());
  int64_t dst = 0, src = 0;
  for (int64_t len : s.parts) {
    for (int r = 0; r < tp; ++r) {
      const int64_t n = rows_held(len, r, tp);
      out.narrow(s.dim, dst + int64_t(r) * part_len(len, tp), n).copy_(gathered.select(0, r).narrow(s.dim, src, n));
    }
    dst += len, src += part_len(len, tp);
  }
  return out;
}

namespace {

// Collectives on activations (no autograd). Each waits for its Work at once.
// In place (the Communicator's all-reduce sums into its argument), as
// Megatron-LM's f and g do: no copy of a full activation per reduction. The
// callers below say why nothing else sees the change.
at::Tensor all_reduced_in_place(const at::Tensor& x, Communicator& c) {
  at::Tensor y = x.is_contiguous() ? x : x.contiguous();
  c.all_reduce(y)->wait();
  return y;
}

}  // namespace

PendingSeq all_gather_seq_start(const at::Tensor& x, Communicator& c) {
  const int t = c.size();
  at::Tensor in = x.contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  if (shape.size() < 2) throw std::invalid_argument("all_gather_seq: expected (b, s/tp, ...)");
  shape[1] *= t;
  // Rank r's shard is the r-th of tp equal runs of the flattened (b * s) tokens
  // (tp.hpp), so the gathered chunks in rank order are the full tensor itself.
  at::Tensor out = at::empty(shape, in.options());
  WorkPtr w = c.all_gather(in, out);
  return {w, [out] { return out; }};
}

PendingSeq reduce_scatter_seq_start(const at::Tensor& x, Communicator& c) {
  const int t = c.size();
  std::vector<int64_t> shape = x.sizes().vec();
  if (shape.size() < 2 || shape[1] % t != 0)
    throw std::invalid_argument("reduce_scatter_seq: the sequence (" + std::to_string(shape.size() < 2 ? 0 : shape[1]) +
                                ") is not a multiple of tp=" + std::to_string(t));
  at::Tensor in = x.contiguous();  // tp chunks of the flattened tokens, in rank order
  shape[1] /= t;
  at::Tensor out = at::empty(shape, x.options());
  WorkPtr w = c.reduce_scatter(in, out);
  return {w, [out] { return out; }};
}

at::Tensor all_gather_seq(const at::Tensor& x, Communicator& c) { return all_gather_seq_start(x, c).wait(); }
at::Tensor reduce_scatter_seq(const at::Tensor& x, Communicator& c) { return reduce_scatter_seq_start(x, c).wait(); }

at::Tensor seq_shard(const at::Tensor& x, Communicator& c) {
  const int t = c.size();
  std::vector<int64_t> shape = x.sizes().vec();
  if (shape.size() < 2 || shape[1] % t != 0)
    throw std::invalid_argument("seq_shard: the sequence (" + std::to_string(shape.size() < 2 ? 0 : shape[1]) +
                                ") is not a multiple of tp=" + std::to_string(t));
  shape[1] /= t;
  const at::Tensor flat = x.contiguous().view({int64_t(t), -1});  // tp runs of the flattened tokens
  return flat.select(0, c.rank()).clone().view(shape);
}

namespace {

Communicator& comm_of(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(ctx->saved_data["tp"].toInt());
}

template <at::Tensor (*Fwd)(const at::Tensor&, Communicator&), at::Tensor (*Bwd)(const at::Tensor&, Communicator&)>
struct TpComm : torch::autograd::Function<TpComm<Fwd, Bwd>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["tp"] = comm;
    return Fwd(x, *reinterpret_cast<Communicator*>(comm));
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {Bwd(grads[0], comm_of(ctx)), at::Tensor()};
  }
};

at::Tensor identity(const at::Tensor& x, Communicator&) { return x; }

template <typename F>
at::Tensor apply(const at::Tensor& x, Communicator* tp) {
  if (!tp || tp->size() == 1) return x;
  return F::apply(x, reinterpret_cast<int64_t>(tp));
}

}  // namespace

// tp.hpp says what it computes.
at::Tensor vocab_parallel_grad(const at::Tensor& logits, const at::Tensor& labelled, const at::Tensor& target,
                               at::ScalarType acc, Communicator& tp, int64_t begin, int64_t valid,
                               at::Tensor& loss_sum) {
  const int64_t c = logits.size(0);
  at::Tensor z = logits.to(acc, /*non_blocking=*/false, /*copy=*/true);  // (c, Vl)
  at::Tensor mx = std::get<0>(z.max(1));                                  // (c) this rank's row maxima
  at::Tensor all = at::empty({int64_t(tp.size()), c}, mx.options());
  tp.all_gather(mx, all)->wait();
  mx = std::get<0>(all.max(0));                                           // (c) the rows' maxima
  at::Tensor local = target - begin;                                      // (c, 1)
  at::Tensor mine = local.ge(0).logical_and(local.lt(valid)).logical_and(labelled.unsqueeze(1));
  local = local.clamp(0, z.size(1) - 1);
  z.sub_(mx.unsqueeze(1));
  at::Tensor zero = at::zeros({}, z.options());
  at::Tensor zt = at::where(mine, z.gather(1, local), zero);             // (c, 1) the target's z - max, on its owner
  z.exp_();
  at::Tensor stats = at::cat({z.sum(1, /*keepdim=*/true), zt}, 1);       // (c, 2)
  tp.all_reduce(stats)->wait();
  at::Tensor sum = stats.select(1, 0);
  loss_sum.add_(at::where(labelled, sum.log() - stats.select(1, 1), zero).sum());
  z.div_(sum.unsqueeze(1));                                               // softmax
  z.scatter_add_(1, local, -mine.to(acc));                                // - onehot on the owner
  return z;
}

// Forward identity; backward the all-reduce, in place on the gradient that
// arrives: the input gradient of the column-parallel GEMMs this feeds (or
// autograd's sum of theirs), which nothing else holds.
struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["tp"] = comm;
    return x;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {all_reduced_in_place(grads[0], comm_of(ctx)), at::Tensor()};
  }
};

// Forward the all-reduce, in place on its input: the output of a
// row-parallel GEMM (or of the vocabulary-parallel embedding's masked
// lookup), used by nothing but this and saved by no autograd node; marked
// dirty, as autograd asks of an input changed in place. Backward identity.
struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["tp"] = comm;
    at::Tensor y = all_reduced_in_place(x, *reinterpret_cast<Communicator*>(comm));
    if (y.is_same(x)) ctx->mark_dirty({x});
    return y;
  }
  static tensor_list backward(AutogradContext*, tensor_list grads) { return {grads[0], at::Tensor()}; }
};

at::Tensor copy_to_tp(const at::Tensor& x, Communicator* tp) { return apply<CopyToTp>(x, tp); }
at::Tensor reduce_from_tp(const at::Tensor& x, Communicator* tp) { return apply<ReduceFromTp>(x, tp); }
at::Tensor scatter_seq(const at::Tensor& x, Communicator* tp) {
  return apply<TpComm<reduce_scatter_seq, all_gather_seq>>(x, tp);
}
at::Tensor gather_seq(const at::Tensor& x, Communicator* tp) {
  return apply<TpComm<all_gather_seq, reduce_scatter_seq>>(x, tp);
}
at::Tensor gather_seq_whole(const at::Tensor& x, Communicator* tp) {
  return apply<TpComm<all_gather_seq, seq_shard>>(x, tp);
}

}  // namespace planner::rt
