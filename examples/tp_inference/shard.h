// Which part of the model a rank holds: a tensor-parallel rank holds every layer cut to its share of the heads and
// FFN units, a pipeline rank a contiguous range of whole layers (both drawn in model.h). Plain data and free
// functions: the split is decided once, before loading.
#pragma once

namespace tp_inference {

struct LlamaConfig;  // model.h

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

}  // namespace tp_inference
