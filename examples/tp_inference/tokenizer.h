// SentencePiece-style BPE tokenizer built from the vocabulary stored in a GGUF file (tokenizer.ggml.tokens /
// scores / token_type), behaving like llama2.c's run.c:
//   encode: optional BOS, a "dummy prefix" space token when the text is not empty, one token per UTF-8 code point
//           (bytes without a token fall back to <0xXX> byte tokens), then greedy merging of the adjacent pair whose
//           merged string has the highest score, until no pair merges; optional EOS.
//   decode: the piece of a token with U+2581 shown as a space; a leading space is dropped right after BOS; byte
//           tokens <0xXX> decode to their byte; lone unprintable control bytes are dropped.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf.h"

namespace tp_inference {

class Tokenizer {
 public:
  /// Reads the vocabulary; throws GgufError when it is missing or inconsistent.
  explicit Tokenizer(const GgufFile& file);

  /// Token ids for text, with BOS first and/or EOS last when asked.
  std::vector<int> encode(const std::string& text, bool add_bos, bool add_eos) const;
  /// Fewest tokens encode() can give `bytes` bytes of text (without BOS/EOS): each token spells at most the
  /// longest piece. Lets a caller refuse a text too long for the context before encoding it.
  size_t min_tokens(size_t bytes) const { return (bytes + max_piece_bytes_ - 1) / max_piece_bytes_; }
  /// Text to print for `token` when it follows `prev` (see the header comment); empty for control tokens. A
  /// view into the tokenizer (no allocation per generated token), valid while it lives.
  std::string_view decode(int prev, int token) const;
  /// The stored piece (U+2581 turned into spaces), for tests and debugging.
  const std::string& piece(int token) const { return pieces_.at(static_cast<size_t>(token)); }
  /// The merge score of `token` (for tests).
  float score(int token) const { return scores_.at(static_cast<size_t>(token)); }
  /// -1 when the string is not a token.
  int lookup(const std::string& piece) const;

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int bos() const { return bos_; }
  int eos() const { return eos_; }

 private:
  void merge(std::vector<int>& work) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int> byte_token_;  // byte value -> token id, -1 when the vocabulary lacks it
  std::vector<int> byte_value_;  // token id -> byte value for <0xXX> tokens, else -1
  std::vector<bool> control_;    // control / unknown tokens print nothing
  size_t max_piece_bytes_ = 1;   // longest piece, in bytes (at least 1: byte fallback)
  std::string all_bytes_;        // byte b at index b: what a <0xXX> token prints
  std::unordered_map<std::string, int> index_;
  int bos_ = 1;
  int eos_ = 2;
  int unk_ = 0;
};

}  // namespace tp_inference
