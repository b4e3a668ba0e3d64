#include "runtime/data.hpp"

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "strategies/errors.hpp"
#include "strategies/parse_util.hpp"

namespace planner::rt {

static_assert(std::endian::native == std::endian::little,
              "token files are read as little-endian; add a byte swap for this host");

TokenDtype parse_token_dtype(const std::string& s) {
  if (s == "uint16" || s == "u16") return TokenDtype::UInt16;
  if (s == "int32" || s == "i32") return TokenDtype::Int32;
  throw InputError("token dtype '" + s + "' is not one of uint16|int32");
}

const char* to_string(TokenDtype d) { return d == TokenDtype::UInt16 ? "uint16" : "int32"; }

namespace {
// One independent stream per (seed, step, micro, row): the rows of a batch do not
// depend on how many rows came before, so a batch of 2k rows is the
// concatenation of two batches of k rows (the gradient-accumulation test uses this).
uint64_t stream_seed(uint64_t seed, int64_t step, int64_t micro, int64_t row) {
  uint64_t s = seed;
  uint64_t a = splitmix64(s) ^ static_cast<uint64_t>(step);
  uint64_t b = splitmix64(a) ^ static_cast<uint64_t>(micro);
  uint64_t c = splitmix64(b) ^ static_cast<uint64_t>(row);
  return splitmix64(c);
}
}  // namespace

SyntheticTokens::SyntheticTokens(int64_t vocab, uint64_t seed) : vocab_(vocab), seed_(seed), succ_(vocab) {
  if (vocab <= 1) throw InputError("synthetic tokens need a vocabulary of at least 2");
  std::iota(succ_.begin(), succ_.end(), 0);
  uint64_t s = seed ^ 0x5EEDull;
  for (int64_t i = vocab - 1; i > 0; --i) {  // Fisher-Yates
    int64_t j = static_cast<int64_t>(splitmix64(s) % static_cast<uint64_t>(i + 1));
    std::swap(succ_[i], succ_[j]);
  }
}

void SyntheticTokens::batch(int64_t step, int64_t micro, int64_t rows, int64_t seq, std::vector<int64_t>& out) {
  const int64_t len = seq + 1;
  out.resize(static_cast<size_t>(rows * len));
  const uint64_t v = static_cast<uint64_t>(vocab_);
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t s = stream_seed(seed_, step, micro, r);
    int64_t* row = out.data() + r * len;
    int64_t tok = static_cast<int64_t>(splitmix64(s) % v);
    row[0] = tok;
    for (int64_t i = 1; i < len; ++i) {
      uint64_t x = splitmix64(s);
      // low 2 bits: 3 of 4 follow the chain; the high bits pick the uniform token
      tok = (x & 3u) != 0 ? succ_[tok] : static_cast<int64_t>((x >> 2) % v);
      row[i] = tok;
    }
  }
}

std::string SyntheticTokens::describe() const {
  return "synthetic Markov tokens (seed " + std::to_string(seed_) + ")";
}

struct FileTokens::File {
  std::ifstream in;
};

FileTokens::FileTokens(const std::string& path, TokenDtype dtype, int64_t vocab, int64_t seq, uint64_t seed)
    : path_(path), dtype_(dtype), vocab_(vocab), seed_(seed), file_(std::make_unique<File>()) {
  // A directory opens as a stream on Linux and seeks to a size of INT64_MAX:
  // refuse what is not a regular file (or a FIFO/device, which cannot seek) first.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError("--tokens: '" + clip(path) + "' is a directory, not a token file");
  file_->in.open(path, std::ios::binary);
  if (!file_->in) throw InputError("--tokens: token file '" + clip(path) + "' cannot be opened for reading");
  file_->in.seekg(0, std::ios::end);
  const std::streamoff bytes = file_->in.tellg();
  if (bytes < 0 || !std::filesystem::is_regular_file(path, ec))
    throw InputError("--tokens: token file '" + clip(path) + "' is not a regular file that can be read");
  const int64_t esize = dtype == TokenDtype::UInt16 ? 2 : 4;
  if (bytes % esize != 0)
    throw InputError("--tokens: token file '" + clip(path) + "' has " + std::to_string(bytes) + " bytes, not a multiple of " +
                     std::to_string(esize) + " (" + to_string(dtype) + " ids)");
  n_tokens_ = bytes / esize;
  if (n_tokens_ < seq + 1)
    throw InputError("--tokens: token file '" + clip(path) + "' holds " + std::to_string(n_tokens_) +
                     " tokens, fewer than seq + 1 = " + std::to_string(seq + 1));
}

FileTokens::~FileTokens() = default;

void FileTokens::batch(int64_t step, int64_t micro, int64_t rows, int64_t seq, std::vector<int64_t>& out) {
  const int64_t len = seq + 1;
  const int64_t esize = dtype_ == TokenDtype::UInt16 ? 2 : 4;
  out.resize(static_cast<size_t>(rows * len));
  std::vector<char> buf(static_cast<size_t>(len * esize));
  const uint64_t starts = static_cast<uint64_t>(n_tokens_ - len + 1);
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t s = stream_seed(seed_, step, micro, r);
    const int64_t start = static_cast<int64_t>(splitmix64(s) % starts);
    file_->in.clear();
    file_->in.seekg(start * esize);
    file_->in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (!file_->in) throw InputError("--tokens: token file '" + clip(path_) + "': read failed at token " + std::to_string(start));
    int64_t* row = out.data() + r * len;
    for (int64_t i = 0; i < len; ++i) {
      int64_t id;
      if (dtype_ == TokenDtype::UInt16) {
        uint16_t u;
        std::memcpy(&u, buf.data() + i * 2, 2);
        id = u;
      } else {
        int32_t u;
        std::memcpy(&u, buf.data() + i * 4, 4);
        id = u;
      }
      if (id < 0 || id >= vocab_)
        throw InputError("--tokens: token file '" + clip(path_) + "': id " + std::to_string(id) + " at token " +
                         std::to_string(start + i) + " is outside the vocabulary [0, " + std::to_string(vocab_) +
                         ")");
      row[i] = id;
    }
  }
}

std::string FileTokens::describe() const {
  return "token file " + path_ + " (" + to_string(dtype_) + ", " + std::to_string(n_tokens_) + " tokens)";
}

}  // namespace planner::rt
