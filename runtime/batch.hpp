#pragma once
// One micro-batch of token ids and labels on the device, from a token source:
// the inputs (rows, seq) and the next-token labels (decoders), or the masked
// inputs and MLM labels (encoders: a fraction of the positions, chosen from the
// batch's own stream of the seed, become the last vocabulary id; labels -100
// elsewhere). Micro-batch `micro` of step `step` is the same tokens whichever
// rank reads it, so a data-parallel run and a single process see the same data.
#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "specs/model_spec.hpp"
#include "runtime/data.hpp"

namespace planner::rt {

std::pair<at::Tensor, at::Tensor> make_batch(TokenSource& tokens, const ModelSpec& spec, int64_t seq, uint64_t seed,
                                             double mlm_fraction, int64_t step, int64_t micro, int64_t rows,
                                             at::Device device, std::vector<int64_t>& scratch);

}  // namespace planner::rt
