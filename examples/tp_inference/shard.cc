// How the model is split over ranks (see shard.h).
#include "shard.h"

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "gguf.h"
#include "model.h"

namespace tp_inference {
namespace {

// Where rank r's share of n units begins when shares follow the weights' running sum.
int share_begin(int n, const std::vector<double>& weights, int rank) {
  double total = 0, before = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    total += weights[i];
    if (static_cast<int>(i) < rank) before += weights[i];
  }
  if (rank >= static_cast<int>(weights.size())) return n;
  return static_cast<int>(std::floor(static_cast<double>(n) * before / total + 1e-9));
}

}  // namespace

ShardSpec tensor_parallel_shard(const LlamaConfig& config, int rank, int size, const std::vector<double>& weights) {
  std::vector<double> w = weights.empty() ? std::vector<double>(static_cast<size_t>(size), 1.0) : weights;
  if (static_cast<int>(w.size()) != size) {
    throw GgufError("tensor parallel: " + std::to_string(w.size()) + " weights (--tp-weights) for " +
                    std::to_string(size) + " ranks");
  }
  for (double x : w) {
    if (!(x > 0 && std::isfinite(x))) throw GgufError("tensor parallel: weight " + std::to_string(x) + " is not > 0");
  }
  const int group = config.n_heads / config.n_kv_heads;
  ShardSpec s;
  s.tp_rank = rank;
  s.tp_size = size;
  s.kv_head_begin = share_begin(config.n_kv_heads, w, rank);
  s.kv_head_end = share_begin(config.n_kv_heads, w, rank + 1);
  s.head_begin = s.kv_head_begin * group;
  s.head_end = s.kv_head_end * group;
  s.ffn_begin = share_begin(config.hidden_dim, w, rank);
  s.ffn_end = share_begin(config.hidden_dim, w, rank + 1);
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
  s.kv_head_end = config.n_kv_heads;
  s.head_end = config.n_heads;
  s.ffn_end = config.hidden_dim;
  s.has_embedding = rank == 0;
  s.has_head = rank == size - 1;
  return s;
}

std::vector<double> parse_weights(const std::string& text) {
  std::vector<double> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const double value = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(value > 0) || !std::isfinite(value) || value > 1e6) {
      throw std::invalid_argument("'" + item + "' is not a positive number (in '" + text + "')");
    }
    out.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace tp_inference
