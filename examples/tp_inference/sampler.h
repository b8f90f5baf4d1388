// Next-token sampling as in llama2.c run.c: greedy (temperature 0), plain temperature sampling, or nucleus
// (top-p) sampling, driven by a seeded xorshift generator so every rank that samples the same logits with the same
// seed picks the same token.
#pragma once

#include <cstdint>
#include <vector>

namespace tp_inference {

class Sampler {
 public:
  /// temperature 0 = greedy; top_p outside (0, 1) = sample from the whole distribution.
  Sampler(int vocab_size, float temperature, float top_p, uint64_t seed);

  /// Picks a token; may overwrite logits (scaled into probabilities). No allocation.
  int sample(float* logits);

  /// Index of the largest value (the first one on ties); NaN never counts as largest (0 if all are NaN).
  static int argmax(const float* values, int n);

 private:
  uint32_t random_u32();
  float random_f32();
  int sample_top_p(const float* probs, float coin);

  struct ProbIndex {
    float prob;
    int index;
  };

  int vocab_size_;
  float temperature_;
  float top_p_;
  uint64_t state_;
  std::vector<ProbIndex> candidates_;
};

}  // namespace tp_inference
