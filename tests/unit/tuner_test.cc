// The tuner: default choices per collective and size, the transport's fast paths in the table, TBCOLL_ALGO
// (bare and per collective), and the errors for what cannot run.
#include <gtest/gtest.h>

#include "algorithms/registry.h"
#include "common/env.h"
#include "tbcoll/error.hpp"
#include "tuner.h"

namespace tbcoll {
namespace {

algo::CallShape call(OpKind kind, size_t bytes, int world_size = 4, DataType dtype = DataType::kFloat32) {
  return {kind, bytes, world_size, dtype};
}

// What the shm fast path offers with its default sizes (transports/shm/fast_path.cc), and that it is shm's.
std::vector<transport::FastPathAlgorithm> shm_like() {
  std::vector<transport::FastPathAlgorithm> out(4);
  out[0] = {"oneshot", OpKind::kAllReduce, "", 64 << 10, 0, 2049};
  out[1] = {"cma", OpKind::kAllReduce, "", SIZE_MAX, 4 << 20, 32 << 20};
  out[2] = {"twoshot", OpKind::kAllReduce, "", SIZE_MAX, 32769, SIZE_MAX};
  out[3] = {"oneshot", OpKind::kAllGather, "", 4 * (64 << 10), 0, 2049};
  return out;
}

std::vector<KnownFastPath> known() {
  std::vector<KnownFastPath> out;
  for (const auto& algorithm : shm_like()) out.push_back({"shm", algorithm});
  return out;
}

// The point-to-point rows of all_reduce that can run on one host (the hierarchical ones need several), as the
// table lists them: what a refusal names after the fast paths.
std::string one_host_all_reduce_rows() {
  std::string names;
  for (const algo::Algorithm& row : algo::algorithms_for(OpKind::kAllReduce)) {
    if (row.cannot_run != nullptr && !row.cannot_run({OpKind::kAllReduce, 8, 4, DataType::kFloat32, 1}).empty()) {
      continue;
    }
    names += (names.empty() ? "" : ", ") + std::string(row.name);
  }
  return names;
}

Tuner tuner(const std::string& forced, const std::vector<transport::FastPathAlgorithm>& fast_path = {},
            int world_size = 4) {
  return Tuner(TunerConfig{}, world_size, parse_forced(forced, known()), fast_path, known());
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

TEST(Tuner, DefaultsPerCollectiveAndSize) {
  const Tuner t = tuner("");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8)).name, "direct");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 32768)).name, "direct") << "TBCOLL_DIRECT_MAX_BYTES is inclusive";
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 32769)).name, "ring");
  EXPECT_EQ(t.choose(call(OpKind::kAllGather, 1 << 20)).name, "ring");
  EXPECT_EQ(t.choose(call(OpKind::kReduceScatter, 1 << 20)).name, "direct");
  EXPECT_EQ(t.choose(call(OpKind::kReduce, 8)).name, "direct");
  EXPECT_EQ(t.choose(call(OpKind::kBroadcast, 8)).name, "binomial");
  EXPECT_EQ(t.choose(call(OpKind::kBroadcast, 1 << 20)).name, "chain");
  EXPECT_EQ(tuner("", {}, 2).choose(call(OpKind::kBroadcast, 1 << 20, 2)).name, "binomial") << "one message either way";
  EXPECT_EQ(t.choose(call(OpKind::kBarrier, 0)).name, "dissemination");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8)).schedule, 1u);
  EXPECT_EQ(t.schedule_name(OpKind::kAllReduce, t.choose(call(OpKind::kAllReduce, 1 << 20)).schedule), "ring");
  EXPECT_EQ(t.schedule_name(OpKind::kAllReduce, 0), "none");
}

TEST(Tuner, FastPathsComeFirstWithinTheirSizes) {
  const Tuner t = tuner("", shm_like());
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8)).name, "oneshot");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 2048)).name, "oneshot");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 4096)).name, "direct");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 1 << 20)).name, "twoshot");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 4 << 20)).name, "cma");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 64 << 20)).name, "twoshot");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8)).fast_path_index, 0);
  EXPECT_EQ(t.choose(call(OpKind::kAllGather, 4096)).name, "direct");
  EXPECT_EQ(t.choose(call(OpKind::kBroadcast, 4 << 20)).name, "chain") << "no fast path offered for broadcast";
}

TEST(Tuner, FastPathDtypesAreHonoured) {
  auto fast = shm_like();
  fast[0].dtypes = 1u << static_cast<int>(DataType::kFloat32);
  const Tuner t = tuner("", fast);
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8, 4, DataType::kFloat32)).name, "oneshot");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8, 4, DataType::kInt8)).name, "direct");
  const Tuner forced = tuner("oneshot", fast);
  EXPECT_NE(error_of([&] { forced.choose(call(OpKind::kAllReduce, 8, 4, DataType::kInt8)); }).find("does not take i8"),
            std::string::npos);
}

TEST(Tuner, BareNameForcesEveryCollectiveThatHasIt) {
  const Tuner t = tuner("ring");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8)).name, "ring");
  EXPECT_EQ(t.choose(call(OpKind::kAllGather, 8)).name, "ring");
  EXPECT_EQ(t.choose(call(OpKind::kBroadcast, 8)).name, "binomial") << "broadcast has no ring: the tuner's";
}

TEST(Tuner, PerCollectiveNames) {
  const Tuner t = tuner("allreduce:ring,broadcast:chain,all_gather:direct");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8)).name, "ring");
  EXPECT_EQ(t.choose(call(OpKind::kBroadcast, 8)).name, "chain");
  EXPECT_EQ(t.choose(call(OpKind::kAllGather, 1 << 20)).name, "direct");
  EXPECT_EQ(t.choose(call(OpKind::kReduceScatter, 8)).name, "direct");
  // A collective named on its own keeps its name whatever a bare name says, before or after it.
  EXPECT_EQ(tuner("allreduce:direct,ring").choose(call(OpKind::kAllReduce, 1 << 20)).name, "direct");
  EXPECT_EQ(tuner("ring,allreduce:direct").choose(call(OpKind::kAllReduce, 1 << 20)).name, "direct");
  EXPECT_EQ(tuner("ring,allreduce:direct").choose(call(OpKind::kAllGather, 8)).name, "ring");
}

TEST(Tuner, BadNamesAreRefusedNamingWhatThereIs) {
  std::string message = error_of([] { parse_forced("nonsense", known()); });
  EXPECT_NE(message.find("unknown algorithm \"nonsense\""), std::string::npos) << message;
  EXPECT_NE(message.find("broadcast: binomial, chain"), std::string::npos) << message;
  message = error_of([] { parse_forced("allreduce:chain", known()); });
  EXPECT_NE(message.find("all_reduce has no algorithm \"chain\""), std::string::npos) << message;
  EXPECT_NE(message.find("oneshot (shm fast path)"), std::string::npos) << message;
  EXPECT_NE(error_of([] { parse_forced("allscatter:ring", known()); }).find("unknown collective \"allscatter\""),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_forced("gather:ring", known()); }).find("gather has no algorithm \"ring\" "
                                                                         "(TBCOLL_ALGO; it has binomial, direct)"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_forced("allreduce:ring,all_reduce:direct", known()); }).find("twice"),
            std::string::npos);
  EXPECT_EQ(error_of([] { parse_forced("", known()); }), "");
  EXPECT_EQ(error_of([] { parse_forced("broadcast:binomial", known()); }), "");
  EXPECT_NE(error_of([] { parse_forced("broadcast:tree", known()); }), "") << "tree is no broadcast name any more";
}

TEST(Tuner, ForcedAlgorithmThatCannotRunIsRefusedNotReplaced) {
  std::string message = error_of([] { tuner("oneshot").choose(call(OpKind::kAllReduce, 8)); });
  EXPECT_NE(message.find("fast path of the shm transport"), std::string::npos) << message;
  EXPECT_NE(message.find("algorithms that can: " + one_host_all_reduce_rows()), std::string::npos)
      << message << " (hierarchical needs several hosts)";
  const Tuner t = tuner("oneshot", shm_like());
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 64 << 10)).name, "oneshot");
  message = error_of([&] { t.choose(call(OpKind::kAllReduce, (64 << 10) + 4)); });
  EXPECT_NE(message.find("at most 65536 B"), std::string::npos) << message;
  EXPECT_NE(message.find("algorithms that can: cma, twoshot, " + one_host_all_reduce_rows()), std::string::npos)
      << message;
}

TEST(Tuner, KnobsComeFromTheCommunicatorFirst) {
  using Knobs = std::map<std::string, std::string>;
  const TunerConfig config =
      TunerConfig::from_env(env::Settings(Knobs{{"TBCOLL_DIRECT_MAX_BYTES", "100"}, {"TBCOLL_CHUNK_BYTES", "8192"}}));
  EXPECT_EQ(config.direct_max_bytes, 100u);
  EXPECT_EQ(config.chunk_bytes, 8192u);
  const Tuner t(config, 4, {}, {}, {});
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 100)).name, "direct");
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 101)).name, "ring");
  EXPECT_THROW(TunerConfig::from_env(env::Settings(Knobs{{"TBCOLL_CHUNK_BYTES", "12"}})), InvalidArgument);
  EXPECT_THROW(env::Settings(Knobs{{"TBCOLL_NOT_A_KNOB", "1"}}), InvalidArgument);
  EXPECT_THROW(env::Settings(Knobs{{"TBCOLL_RANK", "1"}}), InvalidArgument) << "Config::rank is the way";
}

TEST(Registry, EveryCollectiveEndsWithARowForEverySize) {
  const TunerConfig config;
  for (OpKind kind : algo::collectives()) {
    const std::vector<algo::Algorithm> rows = algo::algorithms_for(kind);
    ASSERT_FALSE(rows.empty()) << op_kind_name(kind);
    for (const auto& row : rows) {
      EXPECT_NE(row.run, nullptr) << row.name;
      EXPECT_NE(row.cost, nullptr) << row.name << ": every row is priced";
      EXPECT_GT(std::string(row.description).size(), 20u) << row.name;
    }
    EXPECT_EQ(rows.front().kind, kind);
    for (int n : {2, 3, 8}) {
      const auto& last = rows.back();
      const algo::ByteRange range = last.auto_range ? last.auto_range(config, n) : algo::kAllSizes;
      EXPECT_TRUE(range.holds(0) && range.holds(SIZE_MAX - 1)) << op_kind_name(kind) << " " << last.name;
    }
  }
  OpKind kind{};
  EXPECT_TRUE(algo::parse_collective("bcast", &kind));
  EXPECT_EQ(kind, OpKind::kBroadcast);
  EXPECT_TRUE(algo::parse_collective("alltoallv", &kind));
  EXPECT_EQ(kind, OpKind::kAllToAllv);
  EXPECT_FALSE(algo::parse_collective("allscatter", &kind));
}

}  // namespace
}  // namespace tbcoll
