// tp_make_synthetic: writes a Llama GGUF file with random weights at a realistic shape, so the engine's speed can
// be measured on models larger than stories260K through the same loader. The output text of such a model is
// meaningless; general.name says "synthetic" and the engine labels it so.
//
//   tp_make_synthetic --shape cache|110m|1b --out FILE [--type f32|f16] [--seed N]
//
//   shape   dim  layers heads kv  FFN   vocab  params  default type  size
//   cache   256     4     8    8   640    512   3.2 M   F32           ~13 MB  (fits a last-level cache)
//   110m    768    12    12   12  2048  32000   110 M   F32          ~440 MB  (llama2.c's stories110M shape)
//   1b     2048    16    32    8  5632  32000   0.85 B  F16          ~1.7 GB  (TinyLlama-like, own output head)
//
// Weights are uniform in +-1/sqrt(fan_in) (norm weights 1), from a fixed-seed generator per tensor, so the
// residual stream stays O(1) and every run of the tool writes the same bytes. The vocabulary is <unk> <s> </s>,
// the 256 byte tokens <0x00>..<0xFF>, then filler pieces (single characters, then letter pairs and triples, with
// and without the U+2581 space marker), so any text encodes. Tensors are streamed to the file one at a time:
// memory use stays at one tensor whatever the model size.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF"
constexpr uint32_t kGgufVersion = 3;
constexpr uint64_t kAlignment = 32;
constexpr uint32_t kTypeF32 = 0, kTypeF16 = 1;
constexpr uint32_t kValueUint32 = 4, kValueInt32 = 5, kValueFloat32 = 6, kValueString = 8, kValueArray = 9;

struct Shape {
  const char* name;
  int dim, n_layers, n_heads, n_kv_heads, hidden_dim, vocab_size, context_length;
  bool tied_output;
  uint32_t default_type;
};

const Shape kShapes[] = {
    {"cache", 256, 4, 8, 8, 640, 512, 2048, true, kTypeF32},
    {"110m", 768, 12, 12, 12, 2048, 32000, 1024, true, kTypeF32},
    {"1b", 2048, 16, 32, 8, 5632, 32000, 2048, false, kTypeF16},
};

struct TensorSpec {
  std::string name;
  uint64_t cols = 0, rows = 1;  // GGUF dims innermost first: [cols, rows]; rows == 0 means a 1-D tensor
  uint32_t type = kTypeF32;
  float scale = 0.0f;  // uniform in +-scale; 0 = all ones (norm weights)
  uint64_t offset = 0;
  uint64_t bytes() const { return cols * (rows == 0 ? 1 : rows) * (type == kTypeF16 ? 2 : 4); }
};

// Little-endian serialisation of GGUF header items.
class Buffer {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof v);
    std::memcpy(&bytes_[at], &v, sizeof v);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_ += s;
  }
  void key(const std::string& k, uint32_t type) {
    put_string(k);
    put<uint32_t>(type);
    ++n_kv_;
  }
  void kv_string(const std::string& k, const std::string& v) {
    key(k, kValueString);
    put_string(v);
  }
  void kv_u32(const std::string& k, uint32_t v) {
    key(k, kValueUint32);
    put<uint32_t>(v);
  }
  void kv_f32(const std::string& k, float v) {
    key(k, kValueFloat32);
    put<float>(v);
  }
  std::string& bytes() { return bytes_; }
  uint64_t n_kv() const { return n_kv_; }

 private:
  std::string bytes_;
  uint64_t n_kv_ = 0;
};

// splitmix64: a fixed, fast generator; one stream per tensor so tensors do not depend on each other's sizes.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float symmetric() { return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }

 private:
  uint64_t state_;
};

// float -> IEEE half, round to nearest even; the weights here are far from the half range limits but subnormals
// and overflow are still handled.
uint16_t f32_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000;
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffff;
  if (((bits >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // may carry into the exponent: still correct
  return static_cast<uint16_t>(sign | half);
}

// <unk> <s> </s>, 256 byte tokens, then unique filler pieces until `vocab` tokens.
void build_vocabulary(int vocab, std::vector<std::string>* pieces, std::vector<float>* scores,
                      std::vector<int32_t>* types) {
  const std::string kSpace = "\xE2\x96\x81";
  pieces->assign({"<unk>", "<s>", "</s>"});
  types->assign({2, 3, 3});
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces->push_back(buf);
    types->push_back(6);
  }
  std::set<std::string> seen(pieces->begin(), pieces->end());
  std::vector<std::string> fillers = {kSpace};
  for (char c = 33; c < 127; ++c) fillers.emplace_back(1, c);
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (char a : letters) fillers.push_back(kSpace + a);
  for (char a : letters) {
    for (char b : letters) {
      fillers.push_back(std::string(1, a) + b);
      fillers.push_back(kSpace + a + b);
    }
  }
  for (char a : letters) {
    for (char b : letters) {
      for (char c : letters) {
        fillers.push_back(std::string(1, a) + b + c);
        fillers.push_back(kSpace + a + b + c);
      }
    }
  }
  for (size_t i = 0; i < fillers.size() && static_cast<int>(pieces->size()) < vocab; ++i) {
    if (!seen.insert(fillers[i]).second) continue;
    pieces->push_back(fillers[i]);
    types->push_back(1);
  }
  if (static_cast<int>(pieces->size()) < vocab) throw std::runtime_error("vocabulary too large for the fillers");
  pieces->resize(static_cast<size_t>(vocab));
  types->resize(static_cast<size_t>(vocab));
  scores->assign(static_cast<size_t>(vocab), 0.0f);
  // Shorter, earlier pieces score higher, like a trained SentencePiece model's log-probabilities.
  for (size_t i = 259; i < pieces->size(); ++i) (*scores)[i] = -static_cast<float>(i - 259);
}

std::vector<TensorSpec> tensor_list(const Shape& s, uint32_t type) {
  const uint64_t dim = static_cast<uint64_t>(s.dim), hidden = static_cast<uint64_t>(s.hidden_dim);
  const uint64_t kv_dim = dim / static_cast<uint64_t>(s.n_heads) * static_cast<uint64_t>(s.n_kv_heads);
  const float in_dim = 1.0f / std::sqrt(static_cast<float>(dim));
  const float in_hidden = 1.0f / std::sqrt(static_cast<float>(hidden));
  std::vector<TensorSpec> t;
  t.push_back({"token_embd.weight", dim, static_cast<uint64_t>(s.vocab_size), type, 1.0f});
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.push_back({p + "attn_norm.weight", dim, 0, kTypeF32, 0.0f});
    t.push_back({p + "attn_q.weight", dim, dim, type, in_dim});
    t.push_back({p + "attn_k.weight", dim, kv_dim, type, in_dim});
    t.push_back({p + "attn_v.weight", dim, kv_dim, type, in_dim});
    t.push_back({p + "attn_output.weight", dim, dim, type, in_dim});
    t.push_back({p + "ffn_norm.weight", dim, 0, kTypeF32, 0.0f});
    t.push_back({p + "ffn_gate.weight", dim, hidden, type, in_dim});
    t.push_back({p + "ffn_up.weight", dim, hidden, type, in_dim});
    t.push_back({p + "ffn_down.weight", hidden, dim, type, in_hidden});
  }
  t.push_back({"output_norm.weight", dim, 0, kTypeF32, 0.0f});
  if (!s.tied_output) t.push_back({"output.weight", dim, static_cast<uint64_t>(s.vocab_size), type, in_dim});
  return t;
}

void write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n != 0 && std::fwrite(data, 1, n, f) != n) throw std::runtime_error("cannot write " + path);
}

void write_model(const Shape& s, uint32_t type, uint64_t seed, const std::string& path) {
  Buffer h;
  const std::string type_name = type == kTypeF16 ? "F16" : "F32";
  h.kv_string("general.architecture", "llama");
  h.kv_string("general.name", std::string("synthetic-") + s.name + " (random weights, " + type_name + ")");
  h.kv_string("general.description", "random weights written by tp_make_synthetic for speed measurements; "
                                     "generated text is meaningless");
  h.kv_u32("general.alignment", static_cast<uint32_t>(kAlignment));
  h.kv_u32("llama.context_length", static_cast<uint32_t>(s.context_length));
  h.kv_u32("llama.embedding_length", static_cast<uint32_t>(s.dim));
  h.kv_u32("llama.feed_forward_length", static_cast<uint32_t>(s.hidden_dim));
  h.kv_u32("llama.block_count", static_cast<uint32_t>(s.n_layers));
  h.kv_u32("llama.attention.head_count", static_cast<uint32_t>(s.n_heads));
  h.kv_u32("llama.attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  h.kv_u32("llama.rope.dimension_count", static_cast<uint32_t>(s.dim / s.n_heads));
  h.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  h.kv_f32("llama.rope.freq_base", 10000.0f);
  h.kv_string("tokenizer.ggml.model", "llama");
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
  build_vocabulary(s.vocab_size, &pieces, &scores, &types);
  h.key("tokenizer.ggml.tokens", kValueArray);
  h.put<uint32_t>(kValueString);
  h.put<uint64_t>(pieces.size());
  for (const std::string& p : pieces) h.put_string(p);
  h.key("tokenizer.ggml.scores", kValueArray);
  h.put<uint32_t>(kValueFloat32);
  h.put<uint64_t>(scores.size());
  for (float v : scores) h.put<float>(v);
  h.key("tokenizer.ggml.token_type", kValueArray);
  h.put<uint32_t>(kValueInt32);
  h.put<uint64_t>(types.size());
  for (int32_t v : types) h.put<int32_t>(v);
  h.kv_u32("tokenizer.ggml.bos_token_id", 1);
  h.kv_u32("tokenizer.ggml.eos_token_id", 2);
  h.kv_u32("tokenizer.ggml.unknown_token_id", 0);

  std::vector<TensorSpec> tensors = tensor_list(s, type);
  uint64_t data_bytes = 0, params = 0;
  for (TensorSpec& t : tensors) {
    t.offset = data_bytes;
    data_bytes += (t.bytes() + kAlignment - 1) / kAlignment * kAlignment;
    params += t.cols * (t.rows == 0 ? 1 : t.rows);
  }
  for (const TensorSpec& t : tensors) {
    h.put_string(t.name);
    h.put<uint32_t>(t.rows == 0 ? 1 : 2);
    h.put<uint64_t>(t.cols);
    if (t.rows != 0) h.put<uint64_t>(t.rows);
    h.put<uint32_t>(t.type);
    h.put<uint64_t>(t.offset);
  }

  Buffer head;  // magic, version and counts go before the kv pairs
  head.put<uint32_t>(kGgufMagic);
  head.put<uint32_t>(kGgufVersion);
  head.put<uint64_t>(tensors.size());
  head.put<uint64_t>(h.n_kv());
  std::string header = head.bytes() + h.bytes();
  header.resize((header.size() + kAlignment - 1) / kAlignment * kAlignment, '\0');

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot create " + tmp);
  std::fprintf(stderr, "tp_make_synthetic: %s: %.1f M params, %s, %.1f MB\n", s.name, params / 1e6,
               type_name.c_str(), (header.size() + data_bytes) / 1e6);
  try {
    write_all(f, header.data(), header.size(), tmp);
    std::vector<float> values;
    std::vector<uint16_t> halves;
    uint64_t written = 0;
    int last_percent = -1;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorSpec& t = tensors[i];
      const size_t n = static_cast<size_t>(t.cols * (t.rows == 0 ? 1 : t.rows));
      Random rng(seed * 0x100000001B3ull + i);
      values.resize(n);
      for (size_t j = 0; j < n; ++j) values[j] = t.scale == 0.0f ? 1.0f : t.scale * rng.symmetric();
      if (t.type == kTypeF16) {
        halves.resize(n);
        for (size_t j = 0; j < n; ++j) halves[j] = f32_to_f16(values[j]);
        write_all(f, halves.data(), n * 2, tmp);
      } else {
        write_all(f, values.data(), n * 4, tmp);
      }
      const uint64_t padded = (t.bytes() + kAlignment - 1) / kAlignment * kAlignment;
      const std::string zeros(static_cast<size_t>(padded - t.bytes()), '\0');
      write_all(f, zeros.data(), zeros.size(), tmp);
      written += padded;
      const int percent = static_cast<int>(100 * written / data_bytes);
      if (data_bytes > (64u << 20) && percent / 10 != last_percent / 10) {
        std::fprintf(stderr, "\rtp_make_synthetic: writing %3d%%", percent);
        last_percent = percent;
      }
    }
    if (last_percent >= 0) std::fputs("\n", stderr);
    if (std::fclose(f) != 0) throw std::runtime_error("cannot write " + tmp);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

const char kUsage[] =
    "usage: tp_make_synthetic --shape cache|110m|1b --out FILE [--type f32|f16] [--seed N]\n"
    "  cache: dim 256, 4 layers, 8 heads, FFN 640, vocab 512 (~13 MB F32)\n"
    "  110m:  dim 768, 12 layers, 12 heads, FFN 2048, vocab 32000 (~440 MB F32)\n"
    "  1b:    dim 2048, 16 layers, 32 heads / 8 kv heads, FFN 5632, vocab 32000 (~1.7 GB F16)\n";

}  // namespace

int main(int argc, char** argv) {
  std::string shape_name, out, type_name;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "tp_make_synthetic: %s needs a value\n%s", flag.c_str(), kUsage);
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--shape") {
      shape_name = value;
    } else if (flag == "--out") {
      out = value;
    } else if (flag == "--type") {
      type_name = value;
    } else if (flag == "--seed") {
      seed = std::strtoull(value.c_str(), nullptr, 10);
    } else {
      std::fprintf(stderr, "tp_make_synthetic: unknown flag %s\n%s", flag.c_str(), kUsage);
      return 2;
    }
  }
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes) {
    if (shape_name == s.name) shape = &s;
  }
  if (shape == nullptr || out.empty() || (!type_name.empty() && type_name != "f32" && type_name != "f16")) {
    std::fprintf(stderr, "tp_make_synthetic: need --shape cache|110m|1b, --out FILE, --type f32|f16\n%s", kUsage);
    return 2;
  }
  const uint32_t type = type_name.empty() ? shape->default_type : (type_name == "f16" ? kTypeF16 : kTypeF32);
  try {
    write_model(*shape, type, seed, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_make_synthetic: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
