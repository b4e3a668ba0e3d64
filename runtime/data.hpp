#pragma once
// Token batches for the runtime's training step. No LibTorch here: a batch is a
// plain vector of token ids, (mbs, seq + 1) row-major; the trainer copies it to
// the device and splits it into inputs [:, :seq] and next-token labels [:, 1:].
//
// Two sources:
//  - SyntheticTokens: deterministic from (seed, step, micro-batch), independent of
//    LibTorch's random generators, so the same batches come out on the CPU, on a
//    GPU and in benchmarks/pytorch_reference.py (which implements the same
//    generator). The text is a first-order Markov chain: with probability 3/4 the
//    next token is succ[token] (a fixed random permutation of the vocabulary drawn
//    from the seed), otherwise uniform. Its entropy floor is about
//    0.25 ln(V) + H(0.75) nats, far below the ln(V) of the freshly initialised model,
//    so a loss curve shows learning (a uniform random stream would not).
//  - FileTokens: a flat file of token ids, raw little-endian, either uint16
//    (nanoGPT's train.bin) or int32; each sequence starts at an offset drawn
//    from (seed, step, micro-batch, row), like nanoGPT's get_batch. Every id must be
//    smaller than the model's vocabulary.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace planner::rt {

enum class TokenDtype { UInt16, Int32 };
// "uint16"/"u16" or "int32"/"i32"; throws InputError otherwise.
TokenDtype parse_token_dtype(const std::string& s);
const char* to_string(TokenDtype d);

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Fills `out` with rows * (seq + 1) token ids for micro-batch `micro` of
  // optimizer step `step` (deterministic in these two numbers).
  virtual void batch(int64_t step, int64_t micro, int64_t rows, int64_t seq, std::vector<int64_t>& out) = 0;
  virtual std::string describe() const = 0;
};

// splitmix64: the generator both sources (and the Python reference) use.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SyntheticTokens final : public TokenSource {
 public:
  SyntheticTokens(int64_t vocab, uint64_t seed);
  void batch(int64_t step, int64_t micro, int64_t rows, int64_t seq, std::vector<int64_t>& out) override;
  std::string describe() const override;

 private:
  int64_t vocab_;
  uint64_t seed_;
  std::vector<int64_t> succ_;  // the chain's preferred successor of each token
};

class FileTokens final : public TokenSource {
 public:
  // Throws InputError when the file is missing, unreadable, of a size that is not
  // a multiple of the element size, or shorter than seq + 1 tokens.
  FileTokens(const std::string& path, TokenDtype dtype, int64_t vocab, int64_t seq, uint64_t seed);
  ~FileTokens() override;
  // Throws InputError when a token id is out of range [0, vocab).
  void batch(int64_t step, int64_t micro, int64_t rows, int64_t seq, std::vector<int64_t>& out) override;
  std::string describe() const override;
  int64_t tokens() const { return n_tokens_; }

 private:
  std::string path_;
  TokenDtype dtype_;
  int64_t vocab_;
  uint64_t seed_;
  int64_t n_tokens_ = 0;
  struct File;
  std::unique_ptr<File> file_;
};

}  // namespace planner::rt
