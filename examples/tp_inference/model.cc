// Llama layers as in llama2.c run.c (same operation order, so greedy output matches it), with the weight
// matrices of each layer cut to this rank's heads and FFN units at load time. The token loop allocates nothing.
// The matrix products, norms and softmax are in kernels.cc; the attention loops here are compiled per x86-64 level
// the same way (TP_MULTIVERSION, see kernels.h).
#include "model.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <cstdio>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "kernels.h"
#include "sampler.h"

namespace tp_inference {
namespace {

// Rows [row_begin, row_end) x columns [col_begin, col_end) of a 2-D tensor, as dense floats.
Floats load_block(const GgufTensor& t, uint64_t row_begin, uint64_t row_end, uint64_t col_begin,
                              uint64_t col_end) {
  const uint64_t cols = col_end - col_begin;
  Floats out(static_cast<size_t>((row_end - row_begin) * cols));
  if (cols == 0) return out;  // a rank whose share is empty (more ranks than kv heads)
  for (uint64_t r = row_begin; r < row_end; ++r) {
    GgufFile::read_row(t, r, col_begin, col_end, out.data() + (r - row_begin) * cols);
  }
  return out;
}

Floats load_vector(const GgufFile& file, const std::string& name, int n) {
  const GgufTensor& t = file.tensor(name, {static_cast<uint64_t>(n)});
  return load_block(t, 0, 1, 0, static_cast<uint64_t>(n));
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

LlamaConfig LlamaConfig::from_gguf(const GgufFile& file) {
  const std::string arch = file.get_string("general.architecture");
  if (arch != "llama") {
    throw GgufError("model: " + file.path() + ": architecture '" + arch + "' is not supported (need llama)");
  }
  LlamaConfig c;
  const int limit = 1 << 20;
  c.dim = file.get_int_in("llama.embedding_length", 1, limit);
  c.hidden_dim = file.get_int_in("llama.feed_forward_length", 1, limit);
  c.n_layers = file.get_int_in("llama.block_count", 1, 4096);
  c.n_heads = file.get_int_in("llama.attention.head_count", 1, limit);
  c.n_kv_heads = file.get_int_in("llama.attention.head_count_kv", c.n_heads, 1, limit);
  c.context_length = file.get_int_in("llama.context_length", 2048, 1, 1 << 24);
  const double eps = file.get_number("llama.attention.layer_norm_rms_epsilon", 1e-5);
  const double theta = file.get_number("llama.rope.freq_base", 10000.0);
  auto bad = [&](const std::string& what) { return GgufError("model: " + file.path() + ": " + what); };
  if (!(eps > 0 && eps < 1)) throw bad("layer_norm_rms_epsilon " + std::to_string(eps) + " is not in (0, 1)");
  if (!(theta > 0 && theta < 1e12)) throw bad("rope.freq_base " + std::to_string(theta) + " is not in (0, 1e12)");
  c.rms_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  // Checked again as floats: a double such as 1e-300 passes above but narrows to 0 (or a subnormal), and a zero
  // base makes every rotary angle infinite (all logits NaN).
  if (!std::isnormal(c.rms_eps)) throw bad("layer_norm_rms_epsilon " + std::to_string(eps) + " is below float's range");
  if (!std::isnormal(c.rope_theta)) throw bad("rope.freq_base " + std::to_string(theta) + " is below float's range");
  if (c.dim % c.n_heads != 0) throw bad("embedding_length is not a multiple of head_count");
  if (c.n_heads % c.n_kv_heads != 0) throw bad("head_count is not a multiple of head_count_kv");
  c.head_dim = c.dim / c.n_heads;
  if (c.head_dim % 2 != 0) throw bad("head dimension must be even for rotary embeddings");
  const int64_t rope_dims = file.get_int("llama.rope.dimension_count", c.head_dim);  // compared, not narrowed
  if (rope_dims != c.head_dim) throw bad("partial rotary embeddings are not supported");
  const GgufTensor* embedding = file.find_tensor("token_embd.weight");
  if (embedding == nullptr) throw bad("missing tensor 'token_embd.weight'");
  if (embedding->dims.size() != 2 || embedding->dims[0] != static_cast<uint64_t>(c.dim) ||
      embedding->dims[1] > static_cast<uint64_t>(limit)) {
    throw bad("token_embd.weight has the wrong shape");
  }
  c.vocab_size = static_cast<int>(embedding->dims[1]);
  return c;
}

CommCounter::CommCounter(tbcoll::Communicator* comm)
    : start_ticks_(ticks_now()), start_seconds_(now_seconds()), comm_(comm) {}

uint64_t CommCounter::ticks_now() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

double CommCounter::seconds() const {
  const double elapsed = now_seconds() - start_seconds_;
  const double ticks = static_cast<double>(ticks_now() - start_ticks_);
  return ticks > 0 && elapsed > 0 ? static_cast<double>(ticks_) * elapsed / ticks : 0.0;
}

void CommCounter::all_reduce_sum(float* data, size_t count) {
  const uint64_t start = ticks_now();
  comm_->all_reduce(data, data, count, tbcoll::DataType::kFloat32, tbcoll::ReduceOp::kSum);
  ticks_ += ticks_now() - start;
  ++all_reduce_calls;
  all_reduce_bytes += count * sizeof(float);
}

void CommCounter::all_gather(const float* send, float* recv, size_t count) {
  const uint64_t start = ticks_now();
  comm_->all_gather(send, recv, count, tbcoll::DataType::kFloat32);
  ticks_ += ticks_now() - start;
  ++all_gather_calls;
  all_gather_bytes += count * sizeof(float) * static_cast<size_t>(comm_->size());
}

void CommCounter::send(const float* data, size_t count, int peer) {
  const uint64_t start = ticks_now();
  comm_->send(data, count, tbcoll::DataType::kFloat32, peer);
  ticks_ += ticks_now() - start;
  p2p_bytes += count * sizeof(float);
}

void CommCounter::recv(float* data, size_t count, int peer) {
  const uint64_t start = ticks_now();
  comm_->recv(data, count, tbcoll::DataType::kFloat32, peer);
  ticks_ += ticks_now() - start;
  p2p_bytes += count * sizeof(float);
}

void CommCounter::broadcast(int32_t* value, int root) {
  const uint64_t start = ticks_now();
  comm_->broadcast(value, value, 1, tbcoll::DataType::kInt32, root);
  ticks_ += ticks_now() - start;
}

LlamaModel::LlamaModel(const GgufFile& file, const LlamaConfig& config, const ShardSpec& shard, int max_positions,
                       bool show_progress)
    : config_(config), shard_(shard), max_positions_(max_positions) {
  const LlamaConfig& c = config_;
  if (max_positions <= 0 || max_positions > c.context_length) {
    throw GgufError("model: " + std::to_string(max_positions) + " positions requested but the context is " +
                    std::to_string(c.context_length));
  }
  const int group = c.n_heads / c.n_kv_heads;
  if (shard.kv_head_begin < 0 || shard.kv_head_begin > shard.kv_head_end || shard.kv_head_end > c.n_kv_heads ||
      shard.head_begin != shard.kv_head_begin * group || shard.head_end != shard.kv_head_end * group ||
      shard.ffn_begin < 0 || shard.ffn_begin > shard.ffn_end || shard.ffn_end > c.hidden_dim) {
    throw GgufError("model: shard of rank " + std::to_string(shard.tp_rank) + " (kv heads [" +
                    std::to_string(shard.kv_head_begin) + ", " + std::to_string(shard.kv_head_end) + "), FFN units [" +
                    std::to_string(shard.ffn_begin) + ", " + std::to_string(shard.ffn_end) + ")) does not fit the model");
  }
  local_heads_ = shard.head_end - shard.head_begin;
  local_kv_heads_ = shard.kv_head_end - shard.kv_head_begin;
  local_hidden_ = shard.ffn_end - shard.ffn_begin;
  max_batch_ = max_positions < kMaxBatch ? max_positions : kMaxBatch;
  const uint64_t dim = static_cast<uint64_t>(c.dim);
  const uint64_t hidden = static_cast<uint64_t>(c.hidden_dim);
  const uint64_t hd = static_cast<uint64_t>(c.head_dim);
  const uint64_t q_rows = static_cast<uint64_t>(local_heads_) * hd;
  const uint64_t kv_rows = static_cast<uint64_t>(local_kv_heads_) * hd;
  const uint64_t f_rows = static_cast<uint64_t>(local_hidden_);
  // First row of this rank's query heads, kv heads and FFN units (shares may differ in size, see shard.h).
  const uint64_t q0 = static_cast<uint64_t>(shard.head_begin) * hd;
  const uint64_t kv0 = static_cast<uint64_t>(shard.kv_head_begin) * hd;
  const uint64_t f0 = static_cast<uint64_t>(shard.ffn_begin);
  const uint64_t kv_dim = static_cast<uint64_t>(c.n_kv_heads) * hd;

  // Progress for big models (only where asked, i.e. rank 0): a percentage per layer copied out of the mapping.
  const bool progress = show_progress && file.file_size() > (uint64_t{64} << 20);
  const int steps = shard.layer_end - shard.layer_begin + 1;
  int last_percent = -1;
  auto report = [&](int done) {
    if (!progress) return;
    const int percent = 100 * done / steps;
    if (percent == last_percent) return;
    last_percent = percent;
    std::fprintf(stderr, "\rtp_inference: loading %s %3d%%%s", file.path().c_str(), percent,
                 done == steps ? "\n" : "");
    std::fflush(stderr);
  };
  report(0);

  for (int l = shard.layer_begin; l < shard.layer_end; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer layer;
    layer.attn_norm = load_vector(file, p + "attn_norm.weight", c.dim);
    layer.ffn_norm = load_vector(file, p + "ffn_norm.weight", c.dim);
    layer.wq = load_block(file.tensor(p + "attn_q.weight", {dim, dim}), q0, q0 + q_rows, 0, dim);
    layer.wk = load_block(file.tensor(p + "attn_k.weight", {dim, kv_dim}), kv0, kv0 + kv_rows, 0, dim);
    layer.wv = load_block(file.tensor(p + "attn_v.weight", {dim, kv_dim}), kv0, kv0 + kv_rows, 0, dim);
    layer.wo = load_block(file.tensor(p + "attn_output.weight", {dim, dim}), 0, dim, q0, q0 + q_rows);
    layer.w_gate = load_block(file.tensor(p + "ffn_gate.weight", {dim, hidden}), f0, f0 + f_rows, 0, dim);
    layer.w_up = load_block(file.tensor(p + "ffn_up.weight", {dim, hidden}), f0, f0 + f_rows, 0, dim);
    layer.w_down = load_block(file.tensor(p + "ffn_down.weight", {hidden, dim}), 0, dim, f0, f0 + f_rows);
    layer.key_cache.assign(static_cast<size_t>(max_positions) * kv_rows, 0.0f);
    layer.value_cache.assign(static_cast<size_t>(max_positions) * kv_rows, 0.0f);
    layers_.push_back(std::move(layer));
    report(l - shard.layer_begin + 1);
  }
  const uint64_t vocab = static_cast<uint64_t>(c.vocab_size);
  if (shard.has_embedding) embedding_ = load_block(file.tensor("token_embd.weight", {dim, vocab}), 0, vocab, 0, dim);
  if (shard.has_head) {
    output_norm_ = load_vector(file, "output_norm.weight", c.dim);
    // Vocabulary-parallel head under TP: rank r scores rows [r * shard, (r + 1) * shard) of the vocabulary.
    const int tp = shard.tp_size;
    vocab_shard_ = (c.vocab_size + tp - 1) / tp;
    vocab_begin_ = std::min(c.vocab_size, shard.tp_rank * vocab_shard_);
    vocab_end_ = std::min(c.vocab_size, vocab_begin_ + vocab_shard_);
    // The output head is tied to the embedding unless the file stores its own; a tied head reads the embedding
    // rows this rank already holds instead of a second copy.
    const GgufTensor* out = file.find_tensor("output.weight");
    if (out == nullptr && shard.has_embedding) {
      head_ = embedding_.data() + static_cast<size_t>(vocab_begin_) * static_cast<size_t>(dim);
    } else {
      output_ = load_block(out != nullptr ? file.tensor("output.weight", {dim, vocab})
                                          : file.tensor("token_embd.weight", {dim, vocab}),
                           static_cast<uint64_t>(vocab_begin_), static_cast<uint64_t>(vocab_end_), 0, dim);
      head_ = output_.data();
    }
    logits_.assign(static_cast<size_t>(vocab_parallel() ? vocab_shard_ : c.vocab_size), 0.0f);
    if (vocab_parallel()) {
      all_logits_.assign(static_cast<size_t>(vocab_shard_) * static_cast<size_t>(tp), 0.0f);
      candidates_.assign(static_cast<size_t>(2 * tp), 0.0f);
    }
  }
  report(steps);

  const size_t batch = static_cast<size_t>(max_batch_);
  xb_.assign(batch * dim, 0.0f);
  q_.assign(batch * q_rows, 0.0f);
  k_.assign(batch * kv_rows, 0.0f);
  v_.assign(batch * kv_rows, 0.0f);
  attn_out_.assign(batch * q_rows, 0.0f);
  partial_.assign(batch * dim, 0.0f);
  hb_.assign(batch * f_rows, 0.0f);
  hb2_.assign(batch * f_rows, 0.0f);
  scores_.assign(static_cast<size_t>(local_heads_) * static_cast<size_t>(max_positions), 0.0f);
  // Rotation angles of every position, computed exactly as run.c does (per pair index within a head).
  rope_cos_.assign(static_cast<size_t>(max_positions) * (hd / 2), 0.0f);
  rope_sin_.assign(static_cast<size_t>(max_positions) * (hd / 2), 0.0f);
  for (int pos = 0; pos < max_positions; ++pos) {
    for (int i = 0; i < c.head_dim / 2; ++i) {
      const float freq = 1.0f / std::pow(c.rope_theta, static_cast<float>(2 * i) / static_cast<float>(c.head_dim));
      const float val = static_cast<float>(pos) * freq;
      const size_t at = static_cast<size_t>(pos) * (hd / 2) + static_cast<size_t>(i);
      rope_cos_[at] = std::cos(val);
      rope_sin_[at] = std::sin(val);
    }
  }
}

void LlamaModel::embed(int token, float* x) const {
  if (!shard_.has_embedding) throw GgufError("model: this rank holds no embedding");
  if (token < 0 || token >= config_.vocab_size) throw GgufError("model: token id out of range");
  std::memcpy(x, embedding_.data() + static_cast<size_t>(token) * static_cast<size_t>(config_.dim),
              static_cast<size_t>(config_.dim) * sizeof(float));
}

// Inlined into attention_block, so each of its versions (TP_MULTIVERSION) gets its own copy.
template <int kHeads>
__attribute__((always_inline)) inline void LlamaModel::weigh_values(const Layer& layer, int first, int n, float* out) {
  const int hd = config_.head_dim;
  const int group = config_.n_heads / config_.n_kv_heads;
  const size_t mp = static_cast<size_t>(max_positions_);
  const float* att[kHeads];
  const float* values[kHeads];
  for (int j = 0; j < kHeads; ++j) {
    att[j] = scores_.data() + static_cast<size_t>(first + j) * mp;
    values[j] = layer.value_cache.data() + static_cast<size_t>((first + j) / group) * mp * static_cast<size_t>(hd);
  }
  int i0 = 0;
  for (; i0 + 8 <= hd; i0 += 8) {  // eight lanes per head, kept in registers across all positions
    float acc[kHeads][8] = {};
    for (int t = 0; t < n; ++t) {
      for (int j = 0; j < kHeads; ++j) {
        const float a = att[j][t];
        const float* v = values[j] + static_cast<size_t>(t) * static_cast<size_t>(hd) + i0;
        for (int u = 0; u < 8; ++u) acc[j][u] += a * v[u];
      }
    }
    for (int j = 0; j < kHeads; ++j) {
      for (int u = 0; u < 8; ++u) out[(first + j) * hd + i0 + u] = acc[j][u];
    }
  }
  for (; i0 < hd; ++i0) {  // head dims that are not a multiple of 8
    for (int j = 0; j < kHeads; ++j) {
      float acc = 0.0f;
      for (int t = 0; t < n; ++t) acc += att[j][t] * values[j][static_cast<size_t>(t) * static_cast<size_t>(hd) + i0];
      out[(first + j) * hd + i0] = acc;
    }
  }
}

void LlamaModel::forward_layers(float* x, int pos, CommCounter* comm) { forward_batch(x, pos, 1, comm); }

void LlamaModel::forward_batch(float* x, int pos0, int n_tokens, CommCounter* comm) {
  if (n_tokens <= 0) return;
  if (pos0 < 0 || n_tokens > max_positions_ - pos0) throw GgufError("model: position beyond the KV cache");
  // Prompts longer than the scratch space go through in chunks: the same sums, one all-reduce per chunk and layer.
  for (int done = 0; done < n_tokens;) {
    const int n = n_tokens - done < max_batch_ ? n_tokens - done : max_batch_;
    forward_chunk(x + static_cast<size_t>(done) * static_cast<size_t>(config_.dim), pos0 + done, n, comm);
    done += n;
  }
}

// A layer's two halves, each ending in this rank's partial sum in partial_; forward_chunk all-reduces them. The
// collectives stay out of these multiversioned functions: with GCC 12, an exception leaving a target_clones function
// calls std::terminate (a peer's failure crashed the example instead of being reported).
TP_MULTIVERSION void LlamaModel::attention_block(Layer& layer, const float* x, int pos0, int n_tokens) {
  const LlamaConfig& c = config_;
  const int hd = c.head_dim;
  const int q_dim = local_heads_ * hd;
  const int kv_dim = local_kv_heads_ * hd;
  const int group = c.n_heads / c.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t dim = static_cast<size_t>(c.dim);
  const size_t mp = static_cast<size_t>(max_positions_);

  // RoPE on adjacent pairs (i, i+1) of every head, with the angles of position pos (table built as run.c does).
  auto rotate = [&](float* vec, int n, int pos) {
    const float* cos_pos = rope_cos_.data() + static_cast<size_t>(pos) * static_cast<size_t>(hd / 2);
    const float* sin_pos = rope_sin_.data() + static_cast<size_t>(pos) * static_cast<size_t>(hd / 2);
    for (int i = 0; i < n; i += 2) {
      const float fcr = cos_pos[(i % hd) / 2];
      const float fci = sin_pos[(i % hd) / 2];
      const float v0 = vec[i], v1 = vec[i + 1];
      vec[i] = v0 * fcr - v1 * fci;
      vec[i + 1] = v0 * fci + v1 * fcr;
    }
  };

  for (int t = 0; t < n_tokens; ++t) {
    rmsnorm(xb_.data() + t * dim, x + t * dim, layer.attn_norm.data(), c.dim, c.rms_eps);
  }
  matmul(q_.data(), layer.wq.data(), xb_.data(), q_dim, c.dim, n_tokens);
  matmul(k_.data(), layer.wk.data(), xb_.data(), kv_dim, c.dim, n_tokens);
  matmul(v_.data(), layer.wv.data(), xb_.data(), kv_dim, c.dim, n_tokens);

  // Keys are stored transposed per head ([kv head][i][position]) so the scores of all positions are one
  // vectorisable axpy per i; values are [kv head][position][i]. Each sum still runs in run.c's order. The whole
  // chunk's keys and values go in first; token t then attends to positions 0..pos0+t only (causal).
  for (int t = 0; t < n_tokens; ++t) {
    const size_t pos = static_cast<size_t>(pos0 + t);
    float* q = q_.data() + static_cast<size_t>(t) * static_cast<size_t>(q_dim);
    float* k = k_.data() + static_cast<size_t>(t) * static_cast<size_t>(kv_dim);
    const float* v = v_.data() + static_cast<size_t>(t) * static_cast<size_t>(kv_dim);
    rotate(q, q_dim, pos0 + t);
    rotate(k, kv_dim, pos0 + t);
    for (int h = 0; h < local_kv_heads_; ++h) {
      float* keys_t = layer.key_cache.data() + static_cast<size_t>(h) * static_cast<size_t>(hd) * mp;
      for (int i = 0; i < hd; ++i) keys_t[static_cast<size_t>(i) * mp + pos] = k[h * hd + i];
      std::memcpy(layer.value_cache.data() + (static_cast<size_t>(h) * mp + pos) * static_cast<size_t>(hd),
                  v + h * hd, static_cast<size_t>(hd) * sizeof(float));
    }
  }

  // Attention over this rank's heads; local query head h reads local kv head h / group.
  for (int t = 0; t < n_tokens; ++t) {
    const int n = pos0 + t + 1;
    const float* q_t = q_.data() + static_cast<size_t>(t) * static_cast<size_t>(q_dim);
    for (int h = 0; h < local_heads_; ++h) {
      const float* q = q_t + h * hd;
      const size_t head_base = static_cast<size_t>(h / group) * static_cast<size_t>(hd) * mp;
      const float* keys_t = layer.key_cache.data() + head_base;
      float* __restrict att = scores_.data() + static_cast<size_t>(h) * mp;
      // Eight positions per block, one register of sums, each summed over i in run.c's order.
      const int n_body = n / 8 * 8;
      for (int p = 0; p < n_body; p += 8) {
        float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = 0; i < hd; ++i) {
          const float qi = q[i];
          const float* key_row = keys_t + static_cast<size_t>(i) * mp + static_cast<size_t>(p);
          for (int u = 0; u < 8; ++u) sums[u] += qi * key_row[u];
        }
        for (int u = 0; u < 8; ++u) att[p + u] = sums[u] * scale;
      }
      for (int p = n_body; p < n; ++p) {
        float sum = 0.0f;
        for (int i = 0; i < hd; ++i) sum += q[i] * keys_t[static_cast<size_t>(i) * mp + static_cast<size_t>(p)];
        att[p] = sum * scale;
      }
      softmax(att, n);
    }
    // out_h = sum_p att_h[p] * v[p], several heads at once: each lane is one sequential chain over p (run.c's
    // order), and independent heads keep several chains in flight.
    float* out = attn_out_.data() + static_cast<size_t>(t) * static_cast<size_t>(q_dim);
    int h = 0;
    for (; h + 4 <= local_heads_; h += 4) weigh_values<4>(layer, h, n, out);
    for (; h + 2 <= local_heads_; h += 2) weigh_values<2>(layer, h, n, out);
    for (; h < local_heads_; ++h) weigh_values<1>(layer, h, n, out);
  }

  matmul(partial_.data(), layer.wo.data(), attn_out_.data(), c.dim, q_dim, n_tokens);
}

TP_MULTIVERSION void LlamaModel::mlp_block(const Layer& layer, const float* x, int n_tokens) {
  const LlamaConfig& c = config_;
  const size_t dim = static_cast<size_t>(c.dim);

  for (int t = 0; t < n_tokens; ++t) {
    rmsnorm(xb_.data() + t * dim, x + t * dim, layer.ffn_norm.data(), c.dim, c.rms_eps);
  }
  matmul(hb_.data(), layer.w_gate.data(), xb_.data(), local_hidden_, c.dim, n_tokens);
  matmul(hb2_.data(), layer.w_up.data(), xb_.data(), local_hidden_, c.dim, n_tokens);
  const size_t hidden = static_cast<size_t>(n_tokens) * static_cast<size_t>(local_hidden_);
  for (size_t i = 0; i < hidden; ++i) {
    float val = hb_[i];
    val *= 1.0f / (1.0f + std::exp(-val));
    hb_[i] = val * hb2_[i];
  }
  matmul(partial_.data(), layer.w_down.data(), hb_.data(), c.dim, local_hidden_, n_tokens);
}

void LlamaModel::forward_chunk(float* x, int pos0, int n_tokens, CommCounter* comm) {
  const size_t rows = static_cast<size_t>(n_tokens) * static_cast<size_t>(config_.dim);
  for (Layer& layer : layers_) {
    attention_block(layer, x, pos0, n_tokens);
    if (shard_.tp_size > 1) comm->all_reduce_sum(partial_.data(), rows);
    for (size_t i = 0; i < rows; ++i) x[i] += partial_[i];
    mlp_block(layer, x, n_tokens);
    if (shard_.tp_size > 1) comm->all_reduce_sum(partial_.data(), rows);
    for (size_t i = 0; i < rows; ++i) x[i] += partial_[i];
  }
}

const float* LlamaModel::head_logits(const float* x) {
  if (!shard_.has_head) throw GgufError("model: this rank holds no output head");
  rmsnorm(xb_.data(), x, output_norm_.data(), config_.dim, config_.rms_eps);
  matvec(logits_.data(), head_, xb_.data(), vocab_end_ - vocab_begin_, config_.dim);
  return logits_.data();
}

int LlamaModel::greedy_token(const float* x, CommCounter* comm) {
  const float* local = head_logits(x);
  const int n = vocab_end_ - vocab_begin_;
  const int best = n > 0 ? Sampler::argmax(local, n) : 0;
  if (!vocab_parallel()) return best;
  // (value, global index) of every rank's best, in vocabulary order: the first strictly larger value wins, which
  // is exactly the whole-vocabulary argmax's first-on-ties rule. Indices are exact as floats (vocab < 2^24).
  // A shard without a number (empty, or NaNs only) offers NaN, which loses to every value, -inf included:
  // argmax skips NaN, and so does the choice among the shards.
  const float value = n > 0 ? local[best] : NAN;
  const float mine[2] = {value, static_cast<float>(vocab_begin_ + best)};
  comm->all_gather(mine, candidates_.data(), 2);
  int winner = 0;
  for (int r = 1; r < shard_.tp_size; ++r) {
    const float theirs = candidates_[static_cast<size_t>(2 * r)];
    const float leading = candidates_[static_cast<size_t>(2 * winner)];
    if (!std::isnan(theirs) && (std::isnan(leading) || theirs > leading)) winner = r;
  }
  return static_cast<int>(candidates_[static_cast<size_t>(2 * winner + 1)]);
}

float* LlamaModel::logits(const float* x, CommCounter* comm) {
  head_logits(x);
  if (!vocab_parallel()) return logits_.data();
  // Shards are vocab_shard_ rows each (the last padded), so the gathered blocks line up as the full vocabulary.
  comm->all_gather(logits_.data(), all_logits_.data(), static_cast<size_t>(vocab_shard_));
  return all_logits_.data();
}

}  // namespace tp_inference
