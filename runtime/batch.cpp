#include "runtime/batch.hpp"

#include <cstring>

namespace planner::rt {

std::pair<at::Tensor, at::Tensor> make_batch(TokenSource& tokens, const ModelSpec& spec, int64_t seq, uint64_t seed,
                                             double mlm_fraction, int64_t step, int64_t micro, int64_t rows,
                                             at::Device device, std::vector<int64_t>& scratch) {
  const int64_t s = seq;
  tokens.batch(step, micro, rows, s, scratch);
  const bool cuda = device.is_cuda();
  auto host_opts = at::TensorOptions().dtype(at::kLong).pinned_memory(cuda);
  at::Tensor host = at::empty({rows, s + 1}, host_opts);
  std::memcpy(host.data_ptr<int64_t>(), scratch.data(), scratch.size() * sizeof(int64_t));
  if (spec.arch == Arch::Encoder) {
    // MLM: mask a fraction of the positions (chosen from the batch's own stream of
    // the seed); masked inputs become the last vocabulary id, the labels there are
    // the original tokens, -100 elsewhere.
    at::Tensor ids = host.narrow(1, 0, s).clone();
    at::Tensor labels = at::full({rows, s}, -100, at::TensorOptions().dtype(at::kLong).pinned_memory(cuda));
    int64_t* pi = ids.data_ptr<int64_t>();
    int64_t* pl = labels.data_ptr<int64_t>();
    uint64_t st = seed ^ (0x4D4C4Dull + static_cast<uint64_t>(step) * 1000003ull + static_cast<uint64_t>(micro));
    const auto thresh = static_cast<uint64_t>(mlm_fraction * 18446744073709551615.0);
    for (int64_t i = 0; i < rows * s; ++i) {
      if (splitmix64(st) < thresh || i == 0) {
        pl[i] = pi[i];
        pi[i] = spec.vocab - 1;
      }
    }
    return {ids.to(device, /*non_blocking=*/cuda), labels.to(device, /*non_blocking=*/cuda)};
  }
  at::Tensor dev = host.to(device, /*non_blocking=*/cuda);
  return {dev.narrow(1, 0, s), dev.narrow(1, 1, s)};
}

}  // namespace planner::rt
