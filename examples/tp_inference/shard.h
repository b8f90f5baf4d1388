// Which part of the model a rank holds: a tensor-parallel rank holds every layer cut to its share of the heads and
// FFN units, a pipeline rank a contiguous range of whole layers (both drawn in model.h). Plain data and free
// functions: the split is decided once, before loading.
#pragma once

#include <string>
#include <vector>

namespace tp_inference {

struct LlamaConfig;  // model.h

/// Which part of the model this rank holds.
struct ShardSpec {
  int tp_rank = 0;
  int tp_size = 1;
  // Tensor parallel: this rank's kv heads [kv_head_begin, kv_head_end), the query heads that read them
  // (kv heads times the group size) and FFN units [ffn_begin, ffn_end). A share may be empty.
  int kv_head_begin = 0, kv_head_end = 0;
  int head_begin = 0, head_end = 0;
  int ffn_begin = 0, ffn_end = 0;
  int layer_begin = 0;
  int layer_end = 0;  // exclusive
  bool has_embedding = true;
  bool has_head = true;
};

/// Heads (in whole kv-head groups: a query head stays with the kv head it reads) and FFN units split over `size`
/// ranks in proportion to `weights` (empty: all equal), any counts: TP=3 on 8 heads gives 3/3/2. Rank r's share
/// begins at floor(n * (w_0 + ... + w_{r-1}) / sum(w)). Throws GgufError when weights has the wrong length or a
/// weight is not positive.
ShardSpec tensor_parallel_shard(const LlamaConfig& config, int rank, int size, const std::vector<double>& weights = {});
/// Layers split into `size` contiguous ranges (the first ranks take one more when they do not divide).
ShardSpec pipeline_shard(const LlamaConfig& config, int rank, int size);

/// "2,1" -> {2, 1}: positive numbers separated by commas; throws std::invalid_argument naming the bad item.
std::vector<double> parse_weights(const std::string& text);

}  // namespace tp_inference
