// The sampler on its own: argmax and sampling with NaN and infinite logits, temperature scaling, and top-p when
// rounding leaves no token above the nucleus cutoff.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "sampler.h"

namespace tp_inference {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// NaN never wins, wherever it sits: a vocabulary shard starting with NaN must not hide its real best token.
TEST(Sampler, ArgmaxSkipsNaN) {
  const std::vector<std::vector<float>> cases = {
      {kNaN, 1, 3, 2}, {1, kNaN, 3, 2}, {1, 2, 3, kNaN}, {kNaN, kNaN, 0, -1}};
  const int want[] = {2, 2, 2, 2};
  for (size_t c = 0; c < cases.size(); ++c) {
    EXPECT_EQ(Sampler::argmax(cases[c].data(), static_cast<int>(cases[c].size())), want[c]) << "case " << c;
  }
  const float all_nan[] = {kNaN, kNaN};
  EXPECT_EQ(Sampler::argmax(all_nan, 2), 0);
  const float ties[] = {1, 5, 5, 0};
  EXPECT_EQ(Sampler::argmax(ties, 4), 1) << "first of equal values";
}

TEST(Sampler, NonFiniteLogitsGiveAValidToken) {
  for (float top_p : {0.9f, 1.0f}) {
    for (uint64_t seed : {1u, 7u, 8u, 9u}) {
      Sampler sampler(4, 1.0f, top_p, seed);
      std::vector<float> with_nan = {1, kNaN, 2, 0};
      const int token = sampler.sample(with_nan.data());
      EXPECT_TRUE(token == 0 || token == 2 || token == 3) << "picked the NaN or out of range: " << token;
      std::vector<float> with_inf = {1, kInf, 2, 0};
      EXPECT_EQ(sampler.sample(with_inf.data()), 1) << "the +inf logit is certain";
      std::vector<float> all_nan = {kNaN, kNaN, kNaN, kNaN};
      EXPECT_EQ(sampler.sample(all_nan.data()), 0);
    }
  }
}

// Scaled logits {100, 99.9, 99.8, 0}: token 3 has probability e^-100. With the unscaled first logit as the softmax
// maximum every exp underflowed and the least likely token won every draw.
TEST(Sampler, TemperatureScalesBeforeTheMaximum) {
  Sampler sampler(4, 10.0f, 1.0f, 3);
  int last = 0;
  for (int draw = 0; draw < 1000; ++draw) {
    std::vector<float> logits = {1000, 999, 998, 0};
    last += sampler.sample(logits.data()) == 3;
  }
  EXPECT_EQ(last, 0);
}

// A temperature so small that logits / T overflow is greedy decoding. The sampler used to take the first +inf by
// index (token 0 here: 4 / 1e-38 overflows as 5 / 1e-38 does) instead of the largest logit (token 1).
TEST(Sampler, TinyTemperatureIsGreedy) {
  Sampler sampler(4, 1e-38f, 1.0f, 5);
  for (int draw = 0; draw < 100; ++draw) {
    std::vector<float> logits = {4.0f, 5.0f, 1.0f, 3.5f};
    EXPECT_EQ(sampler.sample(logits.data()), 1);
  }
}

// A flat distribution with p below 1/n: no probability reaches the cutoff through rounding, and the sampler used to
// index before its candidates; the most likely token is always in the nucleus.
TEST(Sampler, TopPWithNoCandidateAboveTheCutoffPicksTheBest) {
  const int n = 512;
  Sampler sampler(n, 1e30f, 0.001f, 5);
  for (int draw = 0; draw < 20; ++draw) {
    std::vector<float> logits(n, 1.0f);
    const int token = sampler.sample(logits.data());
    EXPECT_GE(token, 0);
    EXPECT_LT(token, n);
  }
}

}  // namespace
}  // namespace tp_inference
