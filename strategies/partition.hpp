#pragma once
// How a model's layers are laid out over pipeline stages and virtual stages:
// one layout that the memory model, the time model and the runtime all use.
//
// Units are what a stage computes one after another, and what ZeRO-3 gathers and
// a gradient bucket covers one at a time:
//   unit 0            the embedding (token, position, type embeddings, their norm)
//   units 1..L        transformer layers 0..L-1
//   unit L + 1        the head (final norm, LM head or MLM head, the loss)
// Virtual stage v (= chunk * pp + stage, Narayanan et al. 2021 sec. 2.2) holds a
// contiguous run of layers; the first virtual stage also holds the embedding, the
// last the head.
//
// Worked example, 10 layers, pp = 2, vpp = 2 (4 virtual stages): layers per
// virtual stage 2, 3, 3, 2 (the extra layers go to the middle first, because
// the first and the last virtual stage already carry the embedding and the
// head); units of virtual stage 0 = [0, 3) (embedding, layers 0-1), 1 = [3, 6),
// 2 = [6, 9), 3 = [9, 12) (layers 8-9 and the head, unit 11).
#include <cstdint>
#include <utility>
#include <vector>

namespace planner {

// Transformer layers per chunk, for `chunks` = pp * vpp virtual stages.
// Throws InputError when chunks < 1 or chunks > layers.
std::vector<int> partition_layers(int64_t layers, int chunks);

class LayerPartition {
 public:
  LayerPartition(int64_t layers, int pp, int vpp = 1);

  int pp() const { return pp_; }
  int vpp() const { return vpp_; }
  int layers() const { return int(layers_); }
  int units() const { return int(layers_) + 2; }      // embedding + layers + head
  int head_unit() const { return int(layers_) + 1; }
  const std::vector<int>& chunk_layers() const { return chunk_layers_; }  // per virtual stage

  // Units [begin, end) of virtual stage v = chunk * pp + stage.
  std::pair<int, int> units_of(int stage, int chunk) const;
  // Every unit a stage holds, in the order of its chunks.
  std::vector<int> stage_units(int stage) const;
  // The stage and chunk that hold unit u.
  std::pair<int, int> owner(int unit) const;

 private:
  int64_t layers_;
  int pp_, vpp_;
  std::vector<int> chunk_layers_;
  std::vector<int> first_unit_;  // per virtual stage, size pp*vpp + 1
};

}  // namespace planner
