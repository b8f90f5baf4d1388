// The tune file's format (src/tune_file.h): what format_tune_file writes parses back to the same decisions, and
// save_decision adds a decision or replaces the one of the same shape, collective and octave.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tbcoll/error.hpp"
#include "tune_file.h"

namespace tbcoll {
namespace {

SavedDecision decision(OpKind kind, int ranks, size_t low, const std::string& algorithm) {
  return {kind, {ranks, ranks, 1, "tcp", "latency_us=500,gbps=0.6"}, low, 2 * low - 1, algorithm,
          algorithm + "=10.5,ring=20", 0};
}

TEST(TuneFileFormat, WhatIsWrittenParsesBack) {
  const std::vector<SavedDecision> saved = {decision(OpKind::kAllReduce, 8, 65536, "tree"),
                                            decision(OpKind::kAllGather, 4, 1024, "direct")};
  const std::string text = format_tune_file(saved);
  const std::vector<SavedDecision> back = parse_tune_file(text, "x");
  ASSERT_EQ(back.size(), 2u) << text;
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].kind, saved[i].kind);
    EXPECT_EQ(back[i].shape.text(), saved[i].shape.text());
    EXPECT_EQ(back[i].min_bytes, saved[i].min_bytes);
    EXPECT_EQ(back[i].max_bytes, saved[i].max_bytes);
    EXPECT_EQ(back[i].algorithm, saved[i].algorithm);
    EXPECT_EQ(back[i].measured, saved[i].measured);
    EXPECT_GT(back[i].line, 0);
  }
  EXPECT_NE(text.find("decision all_reduce 8 8 1 tcp latency_us=500,gbps=0.6 65536 131071 tree tree=10.5,ring=20\n"),
            std::string::npos) << text;
  EXPECT_THROW(parse_tune_file(text + text.substr(text.find("decision all_reduce")), "x"), InvalidArgument)
      << "two decisions for one shape and octave";
}

TEST(TuneFileFormat, SavingAddsOrReplaces) {
  const std::string path = fmt::format("{}/tbcoll-tune-save-{}.txt", ::testing::TempDir(), getpid());
  std::remove(path.c_str());
  save_decision(path, decision(OpKind::kAllReduce, 8, 65536, "tree"));
  save_decision(path, decision(OpKind::kAllReduce, 8, 1024, "direct"));
  save_decision(path, decision(OpKind::kAllReduce, 8, 65536, "ring"));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<SavedDecision> back = parse_tune_file(text.str(), path);
  ASSERT_EQ(back.size(), 2u) << text.str();
  EXPECT_EQ(back[0].algorithm, "ring") << "replaced in place";
  EXPECT_EQ(back[1].algorithm, "direct");
  EXPECT_THROW(save_decision("/nonexistent-dir/tune.txt", back[0]), IoError);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tbcoll
