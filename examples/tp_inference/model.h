// Llama forward pass with a KV cache, sharded for tensor or pipeline parallelism.
//
// Tensor parallel (Megatron style), per layer, on each of P ranks:
//
//   x ──rmsnorm──► Q,K,V = W{q,k,v}[my heads] · x      column parallel: H/P query heads, KVH/P kv heads per rank
//                  attention over my heads (own KV cache)
//                  partial = Wo[:, my heads] · attn     row parallel
//                  all_reduce(partial, sum)  ─────────► x += partial          (1 all_reduce of dim floats)
//   x ──rmsnorm──► gate, up = W{1,3}[my units] · x     column parallel: FFN/P units per rank
//                  partial = W2[:, my units] · (silu(gate) * up)
//                  all_reduce(partial, sum)  ─────────► x += partial          (1 all_reduce of dim floats)
//
// so a token costs 2 * n_layers all-reduces of dim floats; embedding, norms and the output head are replicated.
// Pipeline parallel: each rank holds a contiguous range of whole layers; the first holds the embedding, the last
// the output head, and the caller moves activations between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf.h"
#include "tbcoll/tbcoll.hpp"

namespace tp_inference {

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

/// Which part of the model this rank holds.
struct ShardSpec {
  int tp_rank = 0;
  int tp_size = 1;
  int layer_begin = 0;
  int layer_end = 0;  // exclusive
  bool has_embedding = true;
  bool has_head = true;
};

/// Heads, kv heads and FFN units split evenly over `size` ranks; throws GgufError naming what does not divide.
ShardSpec tensor_parallel_shard(const LlamaConfig& config, int rank, int size);
/// Layers split into `size` contiguous ranges (the first ranks take one more when they do not divide).
ShardSpec pipeline_shard(const LlamaConfig& config, int rank, int size);

/// Times and counts the communication the engine does (the only place that calls the communicator).
class CommCounter {
 public:
  explicit CommCounter(tbcoll::Communicator* comm) : comm_(comm) {}

  void all_reduce_sum(float* data, size_t count);
  void send(const float* data, size_t count, int peer);
  void recv(float* data, size_t count, int peer);
  void broadcast(int32_t* value, int root);

  uint64_t all_reduce_calls = 0;
  uint64_t all_reduce_bytes = 0;
  uint64_t p2p_bytes = 0;
  double seconds = 0.0;

 private:
  tbcoll::Communicator* comm_;
};

class LlamaModel {
 public:
  /// Loads this rank's shard (copying only its rows/columns out of the mapping, converted to float) and allocates
  /// a KV cache for `max_positions` positions.
  LlamaModel(const GgufFile& file, const LlamaConfig& config, const ShardSpec& shard, int max_positions);

  const LlamaConfig& config() const { return config_; }
  const ShardSpec& shard() const { return shard_; }
  int max_positions() const { return max_positions_; }

  /// x = embedding row of token (needs has_embedding).
  void embed(int token, float* x) const;
  /// Runs this rank's layers on x (dim floats) in place at position pos. With tp_size > 1 every rank must call it
  /// together: it all-reduces through comm twice per layer. No allocation.
  void forward_layers(float* x, int pos, CommCounter* comm);
  /// Final norm and output head (needs has_head); returns vocab_size logits owned by the model.
  float* logits(const float* x);

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;
    std::vector<float> wq, wk, wv, wo;  // wq/wk/wv: my rows; wo: all rows, my columns
    std::vector<float> w_gate, w_up, w_down;
    std::vector<float> key_cache;    // [local kv heads][head_dim][max_positions] (transposed)
    std::vector<float> value_cache;  // [local kv heads][max_positions][head_dim]
  };

  /// attn_out_ for local query heads [first, first + kHeads) from their softmaxed scores over n positions.
  template <int kHeads>
  void weigh_values(const Layer& layer, int first, int n);

  LlamaConfig config_;
  ShardSpec shard_;
  int max_positions_;
  int local_heads_;
  int local_kv_heads_;
  int local_hidden_;
  std::vector<Layer> layers_;
  std::vector<float> embedding_, output_norm_, output_;
  // Scratch, sized once.
  std::vector<float> xb_, q_, k_, v_, attn_out_, partial_, hb_, hb2_, scores_ /* [local heads][max_positions] */, rope_cos_, rope_sin_, logits_;
};

}  // namespace tp_inference
