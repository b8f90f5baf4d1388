#include "sampler.h"

#include <algorithm>
#include <cmath>

namespace tp_inference {

Sampler::Sampler(int vocab_size, float temperature, float top_p, uint64_t seed)
    : vocab_size_(vocab_size),
      temperature_(temperature),
      top_p_(top_p),
      state_(seed == 0 ? 0x9E3779B97F4A7C15ull : seed),  // xorshift must not start at 0
      candidates_(static_cast<size_t>(vocab_size)) {}

uint32_t Sampler::random_u32() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return static_cast<uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
}

float Sampler::random_f32() { return static_cast<float>(random_u32() >> 8) / 16777216.0f; }

int Sampler::argmax(const float* values, int n) {
  int best = 0;
  while (best < n && std::isnan(values[best])) ++best;  // NaN is never the largest, wherever it sits
  if (best == n) return 0;
  for (int i = best + 1; i < n; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return best;
}

int Sampler::sample(float* logits) {
  if (temperature_ <= 0.0f) return argmax(logits, vocab_size_);
  // With no finite largest scaled logit below, the choice is the unscaled argmax: a temperature so small that
  // logits / T overflow (1e-38, say) is greedy decoding, and the first +inf by index would be any token.
  const int raw_best = argmax(logits, vocab_size_);
  // Scale first, then take the largest scaled logit (exp of the rest stays in range), as run.c. NaN counts as -inf.
  float max_val = -INFINITY;
  for (int i = 0; i < vocab_size_; ++i) {
    logits[i] = std::isnan(logits[i]) ? -INFINITY : logits[i] / temperature_;
    max_val = std::max(max_val, logits[i]);
  }
  if (!std::isfinite(max_val)) return raw_best;
  float sum = 0.0f;
  for (int i = 0; i < vocab_size_; ++i) {
    logits[i] = std::exp(logits[i] - max_val);
    sum += logits[i];
  }
  for (int i = 0; i < vocab_size_; ++i) logits[i] /= sum;
  const float coin = random_f32();
  if (top_p_ > 0.0f && top_p_ < 1.0f) return sample_top_p(logits, coin);
  float cdf = 0.0f;
  for (int i = 0; i < vocab_size_; ++i) {
    cdf += logits[i];
    if (coin < cdf) return i;
  }
  return vocab_size_ - 1;  // rounding
}

int Sampler::sample_top_p(const float* probs, float coin) {
  // Tokens below (1 - p) / (n - 1) cannot be in the nucleus: drop them before sorting.
  const float cutoff = (1.0f - top_p_) / static_cast<float>(vocab_size_ - 1);
  size_t n = 0;
  for (int i = 0; i < vocab_size_; ++i) {
    if (probs[i] >= cutoff) candidates_[n++] = {probs[i], i};
  }
  // The most likely token is always in the nucleus; rounding can put even it under the cutoff (a flat
  // distribution and p < 1/n).
  if (n == 0) return argmax(probs, vocab_size_);
  std::sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n),
            [](const ProbIndex& a, const ProbIndex& b) { return a.prob > b.prob || (a.prob == b.prob && a.index < b.index); });
  float cumulative = 0.0f;
  size_t last = n - 1;
  for (size_t i = 0; i < n; ++i) {
    cumulative += candidates_[i].prob;
    if (cumulative > top_p_) {
      last = i;
      break;
    }
  }
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; ++i) {
    cdf += candidates_[i].prob;
    if (r < cdf) return candidates_[i].index;
  }
  return candidates_[last].index;
}

}  // namespace tp_inference
