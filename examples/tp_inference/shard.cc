// How the model is split over ranks (see shard.h).
#include "shard.h"

#include <string>

#include "gguf.h"
#include "model.h"

namespace tp_inference {

ShardSpec tensor_parallel_shard(const LlamaConfig& config, int rank, int size) {
  auto check = [&](int n, const char* what) {
    if (n % size != 0) {
      throw GgufError("tensor parallel: " + std::string(what) + " (" + std::to_string(n) +
                      ") does not divide by the world size " + std::to_string(size));
    }
  };
  check(config.n_heads, "query heads");
  check(config.n_kv_heads, "kv heads");
  check(config.hidden_dim, "FFN hidden units");
  ShardSpec s;
  s.tp_rank = rank;
  s.tp_size = size;
  s.layer_begin = 0;
  s.layer_end = config.n_layers;
  return s;
}

ShardSpec pipeline_shard(const LlamaConfig& config, int rank, int size) {
  if (size > config.n_layers) {
    throw GgufError("pipeline: " + std::to_string(size) + " ranks but only " + std::to_string(config.n_layers) +
                    " layers");
  }
  const int base = config.n_layers / size;
  const int extra = config.n_layers % size;
  ShardSpec s;
  s.layer_begin = rank * base + (rank < extra ? rank : extra);
  s.layer_end = s.layer_begin + base + (rank < extra ? 1 : 0);
  s.has_embedding = rank == 0;
  s.has_head = rank == size - 1;
  return s;
}

}  // namespace tp_inference
