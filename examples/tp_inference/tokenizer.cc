// BPE as in llama2.c run.c: merges are chosen by the score of the merged piece (SentencePiece "unigram-scored
// BPE"), the first best pair wins ties. O(n^2) in the text length, which is fine for prompts.
#include "tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <queue>

namespace tp_inference {
namespace {

constexpr int kTokenTypeUnknown = 2;
constexpr int kTokenTypeControl = 3;
constexpr int kTokenTypeByte = 6;
constexpr size_t kMaxVocab = size_t{1} << 24;

// "▁" (U+2581, SentencePiece's space marker) -> " ".
std::string normalise_piece(const std::string& s) {
  static const std::string kMarker = "\xE2\x96\x81";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, kMarker.size(), kMarker) == 0) {
      out += ' ';
      i += kMarker.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

// Parses "<0xAB>"; returns -1 when the piece is not a byte token.
int parse_byte_piece(const std::string& s) {
  if (s.size() != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = s[static_cast<size_t>(i)];
    int digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

Tokenizer::Tokenizer(const GgufFile& file) {
  const GgufValue& tokens = file.get_array("tokenizer.ggml.tokens");
  if (tokens.array_type != GgufValueType::kString || tokens.strings.empty()) {
    throw GgufError("tokenizer: " + file.path() + ": tokenizer.ggml.tokens must be a non-empty string array");
  }
  const size_t n = tokens.strings.size();
  if (n > kMaxVocab) {
    throw GgufError("tokenizer: " + file.path() + ": vocabulary of " + std::to_string(n) + " tokens (more than " +
                    std::to_string(kMaxVocab) + ")");
  }
  const GgufValue* scores = file.find("tokenizer.ggml.scores");
  if (scores != nullptr && (scores->type != GgufValueType::kArray || scores->numbers.size() != n)) {
    throw GgufError("tokenizer: " + file.path() + ": tokenizer.ggml.scores must be a numeric array of " +
                    std::to_string(n) + " entries");
  }
  const GgufValue* types = file.find("tokenizer.ggml.token_type");
  if (types != nullptr && (types->type != GgufValueType::kArray || types->numbers.size() != n)) {
    throw GgufError("tokenizer: " + file.path() + ": tokenizer.ggml.token_type must be a numeric array of " +
                    std::to_string(n) + " entries");
  }
  const int last = static_cast<int>(n) - 1;  // n <= kMaxVocab, checked above
  bos_ = file.get_int_in("tokenizer.ggml.bos_token_id", 1, 0, last);
  eos_ = file.get_int_in("tokenizer.ggml.eos_token_id", 2, 0, last);
  unk_ = file.get_int_in("tokenizer.ggml.unknown_token_id", 0, 0, last);
  for (int id : {bos_, eos_, unk_}) {  // the defaults too
    if (id < 0 || static_cast<size_t>(id) >= n) {
      throw GgufError("tokenizer: " + file.path() + ": special token id " + std::to_string(id) +
                      " outside the vocabulary of " + std::to_string(n));
    }
  }

  pieces_.resize(n);
  scores_.resize(n);
  byte_value_.assign(n, -1);
  all_bytes_.resize(256);
  for (int b = 0; b < 256; ++b) all_bytes_[static_cast<size_t>(b)] = static_cast<char>(b);
  byte_token_.assign(256, -1);
  control_.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    pieces_[i] = normalise_piece(tokens.strings[i]);
    max_piece_bytes_ = std::max(max_piece_bytes_, pieces_[i].size());
    const double score = scores != nullptr ? scores->numbers[i] : 0.0;
    const double type_value = types != nullptr ? types->numbers[i] : 1.0;
    // Checked before narrowing: a finite double beyond float's range, or a token type that is no small integer
    // (NaN, 1e30, -3e9), has no defined conversion.
    if (std::isfinite(score) && std::fabs(score) > std::numeric_limits<float>::max()) {
      throw GgufError("tokenizer: " + file.path() + ": score of token " + std::to_string(i) + " is out of range");
    }
    if (!(type_value >= 0 && type_value <= 255)) {
      throw GgufError("tokenizer: " + file.path() + ": token " + std::to_string(i) + " has type " +
                      std::to_string(type_value) + ", not a token type");
    }
    scores_[i] = static_cast<float>(score);
    const int type = static_cast<int>(type_value);
    control_[i] = type == kTokenTypeControl || type == kTokenTypeUnknown;
    const int byte = parse_byte_piece(pieces_[i]);
    if (byte >= 0 && (types == nullptr || type == kTokenTypeByte)) {
      byte_value_[i] = byte;
      if (byte_token_[static_cast<size_t>(byte)] < 0) byte_token_[static_cast<size_t>(byte)] = static_cast<int>(i);
    }
    index_.emplace(pieces_[i], static_cast<int>(i));  // first occurrence wins
  }
}

int Tokenizer::lookup(const std::string& piece) const {
  auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::encode(const std::string& text, bool add_bos, bool add_eos) const {
  std::vector<int> tokens;
  if (add_bos) tokens.push_back(bos_);
  std::vector<int> work;
  if (!text.empty()) {
    const int space = lookup(" ");
    if (space >= 0) work.push_back(space);
  }
  // One token per UTF-8 code point (a lead byte and up to 3 continuation bytes), else byte fallback.
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    while (len < 4 && i + len < text.size() && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) ++len;
    const int id = lookup(text.substr(i, len));
    if (id >= 0) {
      work.push_back(id);
    } else {
      for (size_t j = i; j < i + len; ++j) {
        const int byte_id = byte_token_[static_cast<unsigned char>(text[j])];
        work.push_back(byte_id >= 0 ? byte_id : unk_);
      }
    }
    i += len;
  }
  merge(work);
  tokens.insert(tokens.end(), work.begin(), work.end());
  if (add_eos) tokens.push_back(eos_);
  return tokens;
}

// Merges the best-scoring adjacent pair (the leftmost of equal scores) until none merges, as run.c's loop that
// rescans the whole text for every merge, but in O(n log n): the candidate pairs wait in a heap, ordered by score
// and then position, and a candidate whose symbols changed since it was pushed is dropped when it comes up.
// (Positions are indices into `work`, whose order merging keeps.)
void Tokenizer::merge(std::vector<int>& work) const {
  const size_t n = work.size();
  if (n < 2) return;
  std::vector<size_t> next(n), prev(n);
  std::vector<uint32_t> version(n, 0);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1;  // n: none
    prev[i] = i == 0 ? n : i - 1;
  }
  struct Candidate {
    float score;
    size_t left;
    size_t right;
    uint32_t left_version;
    uint32_t right_version;
    int id;
  };
  auto after = [](const Candidate& a, const Candidate& b) {  // pops the highest score, then the leftmost
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(after)> heap(after);
  std::string merged;
  auto offer = [&](size_t left, size_t right) {
    if (left >= n || right >= n) return;
    const std::string& a = pieces_[static_cast<size_t>(work[left])];
    const std::string& b = pieces_[static_cast<size_t>(work[right])];
    if (a.size() + b.size() > max_piece_bytes_) return;  // no token is that long
    merged.assign(a);
    merged += b;
    const int id = lookup(merged);
    // run.c's scan starts from a best score of -1e30 and takes only a strictly greater one: NaN never merges.
    if (id >= 0 && scores_[static_cast<size_t>(id)] > -1e30f) {
      heap.push({scores_[static_cast<size_t>(id)], left, right, version[left], version[right], id});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) offer(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || version[c.left] != c.left_version ||
        version[c.right] != c.right_version) {
      continue;  // a symbol of this pair merged with another since
    }
    work[c.left] = c.id;
    ++version[c.left];
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.right] < n) prev[next[c.right]] = c.left;
    offer(prev[c.left], c.left);
    offer(c.left, next[c.left]);
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) work[kept++] = work[i];
  }
  work.resize(kept);
}

std::string_view Tokenizer::decode(int prev, int token) const {
  if (token < 0 || token >= vocab_size()) return {};
  const size_t t = static_cast<size_t>(token);
  if (control_[t]) return {};
  if (byte_value_[t] >= 0) {
    const unsigned char byte = static_cast<unsigned char>(byte_value_[t]);
    // Like run.c's safe_printf: a lone byte that is neither printable nor whitespace is dropped.
    if (byte < 0x80 && !std::isprint(byte) && !std::isspace(byte)) return {};
    return std::string_view(all_bytes_).substr(byte, 1);
  }
  std::string_view piece = pieces_[t];
  if (prev == bos_ && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
  return piece;
}

}  // namespace tp_inference
