// Llama forward pass with a KV cache, sharded for tensor or pipeline parallelism.
//
// Tensor parallel (Megatron style), per layer, on each of P ranks:
//
//   x ──rmsnorm──► Q,K,V = W{q,k,v}[my heads] · x      column parallel: my share of query and kv heads
//                  attention over my heads (own KV cache)
//                  partial = Wo[:, my heads] · attn     row parallel
//                  all_reduce(partial, sum)  ─────────► x += partial          (1 all_reduce of dim floats)
//   x ──rmsnorm──► gate, up = W{1,3}[my units] · x     column parallel: my share of FFN units
//                  partial = W2[:, my units] · (silu(gate) * up)
//                  all_reduce(partial, sum)  ─────────► x += partial          (1 all_reduce of dim floats)
//
// so a token costs 2 * n_layers all-reduces of dim floats (a batched prompt: of n_tokens * dim floats); embedding
// and norms are replicated. Shares follow shard.h: even by default (any count: TP=3 on 8 heads is 3/3/2 in whole
// kv-head groups), or weighted (--tp-weights 2,1) for ranks of different speed. The output head is vocabulary parallel: rank r scores vocab rows [r*V/P, (r+1)*V/P),
// then greedy decoding all-gathers one (max logit, index) pair per rank, sampling all-gathers the logit shards.
// Pipeline parallel: each rank holds a contiguous range of whole layers; the first holds the embedding, the last
// the output head, and the caller moves activations between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "gguf.h"
#include "shard.h"
#include "tbcoll/tbcoll.hpp"

namespace tp_inference {

/// Allocates on 64-byte (cache-line) boundaries. Every rank's weights, caches and scratch start on a line, so
/// the same loop costs the same on every rank: with malloc's 16-byte alignment, where each buffer landed
/// depended on the rank's allocation history, and a rank whose rows straddled lines more often was ~0.1-0.2 us
/// slower per layer, which the other rank then waited for at the next all-reduce.
template <typename T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  LineAligned() = default;
  template <typename U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <typename U>
  bool operator==(const LineAligned<U>&) const { return true; }
  template <typename U>
  bool operator!=(const LineAligned<U>&) const { return false; }
};
using Floats = std::vector<float, LineAligned<float>>;

/// Hyper-parameters read from the GGUF metadata.
struct LlamaConfig {
  int dim = 0;
  int hidden_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int context_length = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;

  /// Throws GgufError for a missing key, a non-llama architecture or inconsistent sizes.
  static LlamaConfig from_gguf(const GgufFile& file);
};

/// Times and counts the communication the engine does (the only place that calls the communicator).
class CommCounter {
 public:
  explicit CommCounter(tbcoll::Communicator* comm);

  void all_reduce_sum(float* data, size_t count);
  /// recv gets every rank's `count` floats, in rank order.
  void all_gather(const float* send, float* recv, size_t count);
  void send(const float* data, size_t count, int peer);
  void recv(float* data, size_t count, int peer);
  void broadcast(int32_t* value, int root);

  uint64_t all_reduce_calls = 0;
  uint64_t all_reduce_bytes = 0;
  uint64_t all_gather_calls = 0;
  uint64_t all_gather_bytes = 0;  // gathered (received) bytes
  uint64_t p2p_bytes = 0;
  /// Time spent inside the calls so far.
  double seconds() const;

 private:
  // Calls are timed with a cheap counter (the x86 time-stamp counter; steady_clock nanoseconds elsewhere):
  // two clock_gettime calls per collective cost 1-2% of a small model's decode step. The counter's rate is
  // measured against steady_clock between construction and each seconds() call.
  static uint64_t ticks_now();
  uint64_t ticks_ = 0;
  uint64_t start_ticks_;
  double start_seconds_;
  tbcoll::Communicator* comm_;
};

class LlamaModel {
 public:
  /// Prompt tokens processed together by forward_batch (longer prompts go in chunks of this many).
  static constexpr int kMaxBatch = 128;

  /// Loads this rank's shard (copying only its rows/columns out of the mapping, converted to float) and allocates
  /// a KV cache for `max_positions` positions. show_progress: print a loading percentage on stderr for big files.
  LlamaModel(const GgufFile& file, const LlamaConfig& config, const ShardSpec& shard, int max_positions,
             bool show_progress = false);

  const LlamaConfig& config() const { return config_; }
  const ShardSpec& shard() const { return shard_; }
  int max_positions() const { return max_positions_; }

  /// x = embedding row of token (needs has_embedding).
  void embed(int token, float* x) const;
  /// Runs this rank's layers on x (dim floats) in place at position pos. With tp_size > 1 every rank must call it
  /// together: it all-reduces through comm twice per layer. No allocation.
  void forward_layers(float* x, int pos, CommCounter* comm);
  /// The same for n_tokens consecutive positions pos0.. (x is n_tokens rows of dim floats): every weight matrix is
  /// applied to the whole batch at once, attention is causal, and each all-reduce carries n_tokens * dim floats
  /// (one per row-parallel layer per kMaxBatch tokens). Bitwise the same results as n_tokens forward_layers calls.
  void forward_batch(float* x, int pos0, int n_tokens, CommCounter* comm);

  /// Final norm and output head (needs has_head) on the last hidden state x: the token with the largest logit
  /// (first on ties). Under TP each rank scores its vocabulary shard, then one all_gather of (max, index) pairs.
  int greedy_token(const float* x, CommCounter* comm);
  /// All vocab_size logits (owned by the model; the caller may overwrite them). Under TP each rank scores its
  /// shard and one all_gather assembles the rest.
  float* logits(const float* x, CommCounter* comm);

 private:
  struct Layer {
    Floats attn_norm, ffn_norm;
    Floats wq, wk, wv, wo;  // wq/wk/wv: my rows; wo: all rows, my columns
    Floats w_gate, w_up, w_down;
    Floats key_cache;    // [local kv heads][head_dim][max_positions] (transposed)
    Floats value_cache;  // [local kv heads][max_positions][head_dim]
  };

  void forward_chunk(float* x, int pos0, int n_tokens, CommCounter* comm);
  /// partial_ = this rank's share of Wo · attention(rmsnorm(x)), rows of n_tokens; fills the KV cache at pos0...
  void attention_block(Layer& layer, const float* x, int pos0, int n_tokens);
  /// partial_ = this rank's share of Wdown · (silu(gate) * up)(rmsnorm(x)).
  void mlp_block(const Layer& layer, const float* x, int n_tokens);
  /// This rank's vocabulary shard of logits in logits_.
  const float* head_logits(const float* x);
  bool vocab_parallel() const { return shard_.tp_size > 1; }
  /// out (one token's q_dim floats) for local query heads [first, first + kHeads) from their softmaxed scores
  /// over n positions.
  template <int kHeads>
  void weigh_values(const Layer& layer, int first, int n, float* out);

  LlamaConfig config_;
  ShardSpec shard_;
  int max_positions_;
  int max_batch_ = 1;
  int local_heads_;
  int local_kv_heads_;
  int local_hidden_;
  int vocab_begin_ = 0, vocab_end_ = 0, vocab_shard_ = 0;  // this rank's output rows; shard = rows per rank
  std::vector<Layer> layers_;
  Floats embedding_, output_norm_, output_;
  const float* head_ = nullptr;  // output head rows [vocab_begin_, vocab_end_): output_ or tied into embedding_
  // Scratch, sized once (activations for max_batch_ tokens).
  Floats xb_, q_, k_, v_, attn_out_, partial_, hb_, hb2_, scores_ /* [local heads][max_positions] */;
  Floats rope_cos_, rope_sin_;  // [max_positions][head_dim / 2]
  Floats logits_, all_logits_, candidates_;
};

}  // namespace tp_inference
