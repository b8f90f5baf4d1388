// The tokenizer's merge against run.c's loop, which rescans the whole text for the best pair before every merge.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gguf.h"
#include "tokenizer.h"

#ifndef TBCOLL_SHARED_DIR
#define TBCOLL_SHARED_DIR "/work/main/../shared"
#endif

namespace tp_inference {
namespace {

std::string stories_path() {
  const char* dir = std::getenv("TBCOLL_SHARED_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : TBCOLL_SHARED_DIR) + "/models/stories260K.gguf";
}

// run.c's encode for texts whose characters are all tokens: a space token, one token per character, then the
// best-scoring adjacent pair (the first of equal scores) merged until none merges.
std::vector<int> rescanning_encode(const Tokenizer& t, const std::string& text) {
  std::vector<int> work{t.lookup(" ")};
  for (char c : text) work.push_back(t.lookup(std::string(1, c)));
  while (work.size() > 1) {
    float best_score = -1e30f;
    int best_id = -1;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < work.size(); ++i) {
      const int id = t.lookup(t.piece(work[i]) + t.piece(work[i + 1]));
      if (id >= 0 && t.score(id) > best_score) {
        best_score = t.score(id);
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    work[best_at] = best_id;
    work.erase(work.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  return work;
}

TEST(Tokenizer, MergesAsRunCsRescanningLoop) {
  if (::access(stories_path().c_str(), R_OK) != 0) GTEST_SKIP() << "model not found at " << stories_path();
  GgufFile file(stories_path());
  Tokenizer tokenizer(file);
  std::string alphabet;
  for (char c : std::string(" abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,!?'\"")) {
    if (tokenizer.lookup(std::string(1, c)) >= 0) alphabet += c;
  }
  ASSERT_GT(alphabet.size(), 40u);
  const std::vector<std::string> words = {"Once upon a time", " there was", " a little girl", " named Lily", ".",
                                          " She", " loved", " to play", " outside", " the", " ball", " and"};
  std::mt19937 random(7);
  for (int round = 0; round < 400; ++round) {
    std::string text;
    const int parts = 1 + static_cast<int>(random() % 12);
    for (int p = 0; p < parts; ++p) {
      if (random() % 3 == 0) {
        for (int n = static_cast<int>(random() % 6); n >= 0; --n) text += alphabet[random() % alphabet.size()];
      } else {
        text += words[random() % words.size()];
      }
    }
    ASSERT_EQ(tokenizer.encode(text, false, false), rescanning_encode(tokenizer, text)) << "text: " << text;
  }
}

}  // namespace
}  // namespace tp_inference
