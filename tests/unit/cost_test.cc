// The alpha-beta cost model (algorithms/cost.h), the tuner's choices by it, and the link emulation's settings.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "algorithms/topology.h"
#include "common/env.h"
#include "tbcoll/error.hpp"
#include "transports/delay/emulation.h"
#include "tuner.h"

namespace tbcoll {
namespace {

using algo::CallShape;
using algo::CostParams;

// Links of alpha_us one-way latency and gbytes_per_s per link, a transport that moves 3 GB/s per rank.
CostParams links(double alpha_us, double gbytes_per_s) {
  CostParams params;
  params.intra = {alpha_us * 1e-6, gbytes_per_s > 0 ? 1e-9 / gbytes_per_s : 0, 1e-9 / 3};
  params.inter = params.intra;
  return params;
}

Tuner model_tuner(int world_size, const CostParams& params, const std::string& forced = "") {
  TunerConfig config;
  config.use_model = true;
  return Tuner(config, world_size, parse_forced(forced, {}), {}, {}, params);
}

CallShape call(OpKind kind, size_t bytes, int world_size) { return {kind, bytes, world_size, DataType::kFloat32}; }

TEST(CostModel, HighLatencyPicksFewStepsForSmallAndBandwidthOptimalForLarge) {
  const Tuner t = model_tuner(8, links(300, 2.5));
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 8, 8)).name, "direct");
  // Large: the ring, bandwidth-optimal and pipelined (its reduction hides behind the wire). The tree's busiest
  // link carries only S, but each of its ranks pushes 2S through the transport against the ring's 1.75 S.
  EXPECT_EQ(t.choose(call(OpKind::kAllReduce, 64 << 20, 8)).name, "ring");
  // Links that are not the bottleneck: Rabenseifner moves the ring's bytes in 6 steps instead of 14 at a power of
  // two; 6 ranks would pay its fold (2 S more), and keep the ring.
  EXPECT_EQ(model_tuner(8, links(300, 0)).choose(call(OpKind::kAllReduce, 4 << 20, 8)).name, "halving_doubling");
  EXPECT_EQ(model_tuner(6, links(300, 0)).choose(call(OpKind::kAllReduce, 64 << 20, 6)).name, "ring");
  EXPECT_EQ(t.choose(call(OpKind::kAllGather, 1024, 8)).name, "direct");
  EXPECT_EQ(t.choose(call(OpKind::kBroadcast, 1024, 8)).name, "binomial");
  EXPECT_EQ(t.choose(call(OpKind::kBroadcast, 64 << 20, 8)).name, "chain");
}

TEST(CostModel, TheCrossoverMovesWithAlpha) {
  // The size where a many-step schedule overtakes direct grows with the latency its extra steps pay.
  auto crossover = [](double alpha_us) {
    const Tuner t = model_tuner(4, links(alpha_us, 0));
    for (size_t bytes = 8; bytes < (size_t{1} << 32); bytes *= 2) {
      if (t.choose(call(OpKind::kAllReduce, bytes, 4)).name != "direct") return bytes;
    }
    return size_t{0};
  };
  const size_t fast = crossover(1), slow = crossover(300);
  EXPECT_GT(fast, 0u);
  EXPECT_GE(slow, 16 * fast) << fast << " " << slow;
}

TEST(CostModel, ForcedAlgorithmsAndFastPathsStillWin) {
  const Tuner forced = model_tuner(8, links(300, 2.5), "allreduce:ring");
  EXPECT_EQ(forced.choose(call(OpKind::kAllReduce, 8, 8)).name, "ring");
  EXPECT_TRUE(forced.forced(OpKind::kAllReduce));
  EXPECT_FALSE(forced.forced(OpKind::kBroadcast));
  TunerConfig config;
  config.use_model = true;
  std::vector<transport::FastPathAlgorithm> fast(1);
  fast[0] = {"oneshot", OpKind::kAllReduce, "", 64 << 10, 0, 2049};
  const Tuner with_fast(config, 4, {}, fast, {{"shm", fast[0]}}, links(300, 2.5));
  EXPECT_EQ(with_fast.choose(call(OpKind::kAllReduce, 2048, 4)).name, "oneshot") << "within its own range";
  EXPECT_EQ(with_fast.choose(call(OpKind::kAllReduce, 4096, 4)).name, "direct");
}

TEST(CostModel, RangesWhenTheModelIsOff) {
  using Knobs = std::map<std::string, std::string>;
  EXPECT_TRUE(TunerConfig::from_env(env::Settings(Knobs{})).use_model) << "the model by default";
  EXPECT_FALSE(TunerConfig::from_env(env::Settings(Knobs{{"TBCOLL_DIRECT_MAX_BYTES", "100"}})).use_model);
  EXPECT_TRUE(TunerConfig::from_env(env::Settings(Knobs{{"TBCOLL_TUNER", "model"}, {"TBCOLL_DIRECT_MAX_BYTES", "100"}}))
                  .use_model);
  EXPECT_THROW(TunerConfig::from_env(env::Settings(Knobs{{"TBCOLL_TUNER", "fastest"}})), InvalidArgument);
  // With ranges, 1 MiB at 300 us latency is ring (beyond TBCOLL_DIRECT_MAX_BYTES); the model says one step: the
  // one-shot exchange, chunked (mesh) beyond direct's sizes.
  TunerConfig ranges;
  const Tuner by_ranges(ranges, 4, {}, {}, {}, links(300, 0));
  EXPECT_EQ(by_ranges.choose(call(OpKind::kAllReduce, 1 << 20, 4)).name, "ring");
  EXPECT_EQ(model_tuner(4, links(3000, 0)).choose(call(OpKind::kAllReduce, 1 << 20, 4)).name, "mesh");
  EXPECT_EQ(model_tuner(4, links(3000, 0)).choose(call(OpKind::kAllReduce, 16 << 10, 4)).name, "direct");
}

TEST(CostModel, EstimatesListEveryAlgorithm) {
  const Tuner t = model_tuner(4, links(5, 0));
  const std::vector<Estimate> all = t.estimates(call(OpKind::kAllReduce, 1024, 4));
  // Every row of the table, in its order (hierarchical refused: one host).
  const std::vector<algo::Algorithm> rows = algo::algorithms_for(OpKind::kAllReduce);
  ASSERT_EQ(all.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(all[i].name, rows[i].name);
  ASSERT_EQ(all.front().name, "direct");
  ASSERT_EQ(all.back().name, "ring");
  EXPECT_GT(all.back().seconds, all.front().seconds) << "ring's 6 steps against direct's 1";
  EXPECT_NEAR(all.back().seconds, 6 * 5e-6 + 1.5 * 1024 / 3e9 + 0.75 * 1024 * 1e-10, 1e-9);
  for (const Estimate& e : all) {
    if (e.name == "hierarchical") {
      EXPECT_NE(e.refusal.find("one host"), std::string::npos) << e.refusal;
    } else {
      EXPECT_GT(e.seconds, 0) << e.name;
      EXPECT_EQ(e.refusal, "") << e.name;
    }
  }
}

// The textbook costs of the other branch's algorithms, as the tuner would weigh them: at 8 ranks and high
// latency, recursive doubling (3 steps) and the tree (6) beat the ring (14) for small messages; ring and
// Rabenseifner beat recursive doubling (3 whole buffers) for large ones.
TEST(CostModel, TextbookCostsOfTheTreeAndDoublingFamilies) {
  const CostParams slow = links(2000, 2.5);
  const CallShape small = call(OpKind::kAllReduce, 1024, 8), large = call(OpKind::kAllReduce, 64 << 20, 8);
  const double ring_small = algo::cost_all_reduce_ring(small, slow);
  EXPECT_LT(algo::cost_all_reduce_recursive_doubling(small, slow) * 4, ring_small);
  EXPECT_LT(algo::cost_all_reduce_tree(small, slow) * 2, ring_small);
  EXPECT_LT(algo::cost_all_reduce_halving_doubling(small, slow), ring_small);
  EXPECT_LT(algo::cost_all_reduce_ring(large, slow), algo::cost_all_reduce_recursive_doubling(large, slow));
  EXPECT_LT(algo::cost_all_reduce_halving_doubling(large, slow), algo::cost_all_reduce_recursive_doubling(large, slow));
  EXPECT_DOUBLE_EQ(algo::cost_all_reduce_mesh(small, slow), algo::cost_all_reduce_direct(small, slow))
      << "one chunk: the same exchange";
  // Many chunks: mesh's transfer and reduction overlap (without per-message costs here).
  EXPECT_LT(algo::cost_all_reduce_mesh(large, slow), algo::cost_all_reduce_direct(large, slow));
  // Non-powers of two pay the fold in and out.
  EXPECT_GT(algo::cost_all_reduce_recursive_doubling(call(OpKind::kAllReduce, 1024, 7), slow),
            algo::cost_all_reduce_recursive_doubling(call(OpKind::kAllReduce, 1024, 4), slow));
  EXPECT_LT(algo::cost_all_gather_recursive_doubling(call(OpKind::kAllGather, 8192, 8), slow),
            algo::cost_all_gather_ring(call(OpKind::kAllGather, 8192, 8), slow));
}

// The tree's cost counts halves sent in closed form (4(n-1) in all, min(n, 4) at the busiest rank): what the
// double binary tree's ranks actually send, up to their parent and down to their children.
TEST(CostModel, TreeSendsAsCountedOnItsTrees) {
  for (int n = 2; n <= 256; ++n) {
    int busiest = 0, total = 0;
    for (int r = 0; r < n; ++r) {
      int sent = 0;
      for (int which = 0; which < 2; ++which) {
        const algo::TreeLinks links = algo::double_tree(n, r, which);
        sent += (links.parent >= 0) + (links.child[0] >= 0) + (links.child[1] >= 0);
      }
      busiest = std::max(busiest, sent);
      total += sent;
    }
    EXPECT_EQ(busiest, std::min(n, 4)) << n << " ranks";
    EXPECT_EQ(total, 4 * (n - 1)) << n << " ranks";
  }
}

// LogP's o: messages cost CPU time apart from the latency they wait. Many of them (direct among 8 ranks: 14
// per rank) lose to fewer steps with fewer messages (recursive doubling: 6) once o is large (an oversubscribed
// machine), and a chunked one-shot (mesh) pays per chunk where direct sends one message per peer.
TEST(CostModel, PerMessageOverheadCountsMessages) {
  CostParams cheap = links(30, 0);
  cheap.intra.rank_beta = cheap.inter.rank_beta = cheap.gamma = 0;  // messages alone
  CostParams dear = cheap;
  dear.intra.overhead = dear.inter.overhead = 10e-6;
  const CallShape small = call(OpKind::kAllReduce, 64, 8);
  EXPECT_EQ(model_tuner(8, cheap).choose(small).name, "direct");
  EXPECT_EQ(model_tuner(8, dear).choose(small).name, "recursive_doubling");
  EXPECT_NEAR(algo::cost_all_reduce_direct(small, dear) - algo::cost_all_reduce_direct(small, cheap), 14 * 10e-6, 1e-12);
  const CallShape large = call(OpKind::kAllReduce, 4 << 20, 8);  // 16 chunks of 256 KiB
  EXPECT_NEAR(algo::cost_all_reduce_mesh(large, dear) - algo::cost_all_reduce_mesh(large, cheap) -
                  (algo::cost_all_reduce_direct(large, dear) - algo::cost_all_reduce_direct(large, cheap)),
              (16 - 1) * 14 * 10e-6, 1e-9);
}

// Ranks that share CPUs share the work of their messages: among 3 ranks on 2 CPUs, recursive doubling's 4
// messages in all (fold in, exchange, fold out) beat direct's 6 although it takes 3 steps to direct's 1; with a
// CPU per rank, direct's one step wins. A ring with fewer elements than ranks sends only its non-empty blocks.
TEST(CostModel, CrowdedRanksShareTheirCpusWork) {
  CostParams own = links(6, 0);
  own.intra.overhead = own.inter.overhead = 2.5e-6;
  CostParams crowded = own;
  crowded.intra.overhead = crowded.inter.overhead = 7.5e-6;
  crowded.intra.crowding = crowded.inter.crowding = 1.5;
  const CallShape small = call(OpKind::kAllReduce, 64, 3);
  EXPECT_EQ(model_tuner(3, own).choose(small).name, "direct");
  EXPECT_EQ(model_tuner(3, crowded).choose(small).name, "recursive_doubling");
  // direct: every rank alike, 4 messages and 2S sent, x1.5 ranks per CPU; recursive doubling: the busiest rank's
  // 4 messages and 3S (the average rank's 8/3 messages and 4S/3, x1.5, are no more).
  EXPECT_NEAR(algo::cost_all_reduce_direct(small, crowded) - algo::cost_all_reduce_direct(small, links(6, 0)),
              6 * 7.5e-6 + (1.5 - 1) * 2 * 64 / 3e9, 1e-12);
  EXPECT_NEAR(algo::cost_all_reduce_recursive_doubling(small, crowded) -
                  algo::cost_all_reduce_recursive_doubling(small, links(6, 0)),
              4 * 7.5e-6, 1e-12);
  const CallShape one = call(OpKind::kAllReduce, 4, 8), eight = call(OpKind::kAllReduce, 32, 8);
  EXPECT_LT(algo::cost_all_reduce_ring(one, own) + 20 * 2.5e-6, algo::cost_all_reduce_ring(eight, own))
      << "1 element: 4 messages at the busiest rank, not 28";
}

// A schedule that does not pipeline stages whole messages: past the cache, its CPU work goes through memory twice
// (2 ranks over tcp, 64 MiB: halving-doubling 45-57 ms, the ring and the tree 25-33 ms). Below the cache it
// still wins on fewer messages; a pipelined schedule is never charged so.
TEST(CostModel, StagedBuffersPastTheCacheCostTwice) {
  CostParams tcp = links(6, 0);
  tcp.intra.overhead = tcp.inter.overhead = 2.5e-6;
  CostParams huge_cache = tcp;
  huge_cache.cache_bytes = 1e12;
  const CallShape small = call(OpKind::kAllReduce, 1 << 20, 2), large = call(OpKind::kAllReduce, 64 << 20, 2);
  EXPECT_EQ(model_tuner(2, tcp).choose(small).name, "halving_doubling");
  EXPECT_EQ(model_tuner(2, huge_cache).choose(large).name, "halving_doubling");
  EXPECT_EQ(model_tuner(2, tcp).choose(large).name, "ring");
  const double s = 64.0 * (1 << 20);
  // halving-doubling at 2 ranks: S sent, S/2 reduced, each once more.
  EXPECT_NEAR(algo::cost_all_reduce_halving_doubling(large, tcp) -
                  algo::cost_all_reduce_halving_doubling(large, huge_cache),
              s / 3e9 + s / 2 * tcp.gamma, 1e-9);
  for (auto cost : {algo::cost_all_reduce_ring, algo::cost_all_reduce_tree, algo::cost_all_reduce_mesh}) {
    EXPECT_DOUBLE_EQ(cost(large, tcp), cost(large, huge_cache));
  }
}

// The tuner picks the algorithms beyond direct and ring (halving_doubling, recursive_doubling) by the model, and
// only by it: TBCOLL_TUNER=ranges keeps direct and ring.
TEST(CostModel, TheModelPicksAmongEveryAlgorithm) {
  CostParams tcp = links(31, 0);  // tcp, its messages and bytes made dear by 4 ranks per CPU
  tcp.intra.overhead = tcp.inter.overhead = 2.5e-6 * 4;
  tcp.intra.rank_beta = tcp.inter.rank_beta = 4e-9 / 3;
  const CallShape mid = call(OpKind::kAllReduce, 256 << 10, 8);
  EXPECT_EQ(model_tuner(8, tcp).choose(mid).name, "halving_doubling");
  TunerConfig ranges;
  EXPECT_EQ(Tuner(ranges, 8, {}, {}, {}, tcp).choose(mid).name, "ring");
  EXPECT_EQ(Tuner(ranges, 8, {}, {}, {}, tcp).choose(call(OpKind::kAllReduce, 64, 8)).name, "direct");
  EXPECT_EQ(model_tuner(8, tcp).choose(call(OpKind::kAllGather, 64 << 10, 8)).name, "recursive_doubling");
}

// A pipelined schedule's window: L link bytes through w bytes in flight, in slots of c, take no less than
// (L / w - 1) round trips of 2 alpha + c beta, plus the window's own bytes; a window that covers the round trip's
// bandwidth-delay product costs nothing beyond the bandwidth.
TEST(CostModel, AShortWindowCostsRoundTrips) {
  const algo::LinkCost link = links(300, 2.5).intra;  // a round trip moves 2 x 300 us x 2.5 GB/s = 1.5 MB
  algo::Traffic traffic;
  traffic.link_bytes = 16 << 20;
  EXPECT_DOUBLE_EQ(traffic.link_seconds(link), (16 << 20) * link.beta) << "no window";
  traffic.window = 2 << 20;
  traffic.window_slot = 256 << 10;
  EXPECT_DOUBLE_EQ(traffic.link_seconds(link), (16 << 20) * link.beta) << "2 MiB covers 1.5 MB";
  traffic.window = 512 << 10;
  EXPECT_DOUBLE_EQ(traffic.link_seconds(link),
                   (32 - 1) * (2 * link.alpha + (256 << 10) * link.beta) + (512 << 10) * link.beta);
  traffic.link_bytes = 512 << 10;
  EXPECT_DOUBLE_EQ(traffic.link_seconds(link), (512 << 10) * link.beta) << "all of it in one window";
  const algo::LinkCost unlimited = links(300, 0).intra;
  traffic.link_bytes = 4 << 20;
  EXPECT_DOUBLE_EQ(traffic.link_seconds(unlimited), (8 - 1) * 2 * unlimited.alpha)
      << "without a bandwidth limit a window still waits its round trips";
}

// Mesh posts kMeshWindowBytes of receives per peer: on the presets' links its window covers the round trip and
// it is priced as before (as direct, plus its chunks' overlap); where a link's round trip holds more (3 ms at
// 2.5 GB/s: 15 MB), it pays the round trips, and the model leaves it.
TEST(CostModel, MeshPaysForItsWindowWhereTheLinkHoldsMore) {
  EXPECT_EQ(algo::mesh_depth(256 << 10), 8u);
  EXPECT_EQ(algo::mesh_depth(1 << 20), 2u);
  EXPECT_EQ(algo::mesh_depth(4 << 20), 2u) << "at least 2";
  EXPECT_EQ(algo::mesh_depth(3 << 10), 683u) << "2 MiB in 3 KiB chunks, rounded up";
  const CostParams tb5_tcp = links(300, 2.5);
  const CallShape mid = call(OpKind::kAllReduce, 4 << 20, 2);
  EXPECT_LE(algo::cost_all_reduce_mesh(mid, tb5_tcp), algo::cost_all_reduce_direct(mid, tb5_tcp));
  const CostParams far = links(3000, 2.5);
  const CallShape large = call(OpKind::kAllReduce, 16 << 20, 2);
  const double alpha = far.intra.alpha, beta = far.intra.beta, chunk = 256 << 10, window = 8 * chunk;
  EXPECT_GE(algo::cost_all_reduce_mesh(large, far),
            alpha + ((16 << 20) / window - 1) * (2 * alpha + chunk * beta) + window * beta);
  EXPECT_NE(model_tuner(2, far).choose(large).name, "mesh") << "a whole-buffer exchange waits no round trips";
  EXPECT_EQ(model_tuner(2, tb5_tcp).choose(mid).name, "mesh");
}

// The ring keeps kRingSlots reduce-scatter receives posted: a segment of more chunks than that streams through
// them (2 ranks, 4 MiB in 32 KiB chunks: 64 per segment through 8), one of fewer waits only for its steps.
TEST(CostModel, TheRingStreamsThroughItsSlots) {
  CostParams dilated = links(30000, 0.025);  // tb5-tcp dilated 100x
  const CallShape mid = call(OpKind::kAllReduce, 4 << 20, 2);
  const double at_default = algo::cost_all_reduce_ring(mid, dilated);
  EXPECT_NEAR(at_default, 2 * dilated.intra.alpha + (4 << 20) * dilated.intra.beta, 1e-3) << "8 chunks, 8 slots";
  dilated.chunk_bytes = 32 << 10;
  const double alpha = dilated.intra.alpha, beta = dilated.intra.beta, slot = 32 << 10;
  EXPECT_GE(algo::cost_all_reduce_ring(mid, dilated),
            2 * alpha + ((4 << 20) / (8 * slot) - 1) * (2 * alpha + slot * beta) + 8 * slot * beta);
}

// The double tree's phases run in lock-step: each lasts while a chunk's wave crosses the trees' depth. At 2
// ranks over tb5-tcp dilated 100x, 1 MiB (16 chunks of 32 KiB per half): 17 hops of a latency and a chunk.
// Where latency dominates that is the tree's time; and on uncrowded 10 GbE at 8 ranks, 4 MiB, it leaves the
// tree to the ring.
TEST(CostModel, TheTreesPhasesRunInLockStep) {
  const CostParams dilated = links(30000, 0.025);
  const double alpha = dilated.intra.alpha, beta = dilated.intra.beta;
  EXPECT_NEAR(algo::cost_all_reduce_tree(call(OpKind::kAllReduce, 1 << 20, 2), dilated),
              17 * (alpha + (32 << 10) * beta), 1e-9);
  // 8 ranks (depth 3, lag 8), 4 MiB: 16 chunks of 128 KiB per half, 16 x 3 + 8 x 2 + 1 hops.
  EXPECT_NEAR(algo::cost_all_reduce_tree(call(OpKind::kAllReduce, 4 << 20, 8), dilated),
              65 * (alpha + (128 << 10) * beta), 1e-9);
  // Small messages: one chunk per half, 3 + 2 + 1 hops, no more than the pipelined terms' 2 depth steps.
  EXPECT_LT(algo::cost_all_reduce_tree(call(OpKind::kAllReduce, 1024, 8), dilated), 6.1 * alpha);
  const CostParams ten_gbe = links(26, 1.25);
  EXPECT_EQ(model_tuner(8, ten_gbe).choose(call(OpKind::kAllReduce, 4 << 20, 8)).name, "ring");
}

TEST(CostModel, HierarchicalWinsWhenTheHostsAreFarApart) {
  CostParams params = links(0.3, 8);
  params.inter = {300e-6, 1e-9 / 1.25, 1e-9 / 3};
  params.hosts = 2;
  params.ranks_per_host = 4;
  const CallShape big = call(OpKind::kAllReduce, 1 << 20, 8);
  EXPECT_LT(algo::cost_all_reduce_hierarchical(big, params), algo::cost_all_reduce_ring(big, params));
  EXPECT_LT(algo::cost_all_gather_hierarchical(call(OpKind::kAllGather, 1 << 20, 8), params),
            algo::cost_all_gather_ring(call(OpKind::kAllGather, 1 << 20, 8), params));
  EXPECT_EQ(algo::ceil_log2(1), 0);
  EXPECT_EQ(algo::ceil_log2(5), 3);
  EXPECT_EQ(algo::floor_log2(7), 2);
  EXPECT_EQ(algo::floor_log2(8), 3);
}

TEST(LinkEmulationSettings, PresetsCustomAndErrors) {
  using transport::parse_link_emulation;
  EXPECT_FALSE(parse_link_emulation("", 0).on());
  EXPECT_EQ(parse_link_emulation("", 0).describe(), "off");
  const auto rdma = parse_link_emulation("tb5-rdma", 0);
  EXPECT_EQ(rdma.latency_us, 5);
  EXPECT_EQ(rdma.gbit_per_s, 60);
  EXPECT_DOUBLE_EQ(rdma.seconds_per_byte(), 8 / 60e9);
  EXPECT_FALSE(rdma.assumes.empty());
  const auto custom = parse_link_emulation("latency_us=5,gbps=60", 0);
  EXPECT_EQ(custom.name, "custom");
  EXPECT_EQ(custom.describe(), "custom: +5 us one way, 60 Gbit/s (7.50 GB/s) per direction per peer");
  const auto changed = parse_link_emulation("tb5-tcp,gbps=10", 0);
  EXPECT_EQ(changed.name, "tb5-tcp+changes");
  EXPECT_EQ(changed.latency_us, 300);
  EXPECT_EQ(changed.gbit_per_s, 10);
  EXPECT_EQ(parse_link_emulation("", 300).latency_us, 300) << "TBCOLL_LINK_DELAY_US is latency only";
  EXPECT_EQ(parse_link_emulation("", 300).gbit_per_s, 0);
  EXPECT_EQ(parse_link_emulation("tb5-tcp", 300).gbit_per_s, 20) << "the same latency both ways is fine";
  for (const char* bad : {"tb6", "latency_us=-1", "gbps=fast", "speed=3", "gbps=1,tb5-rdma", "latency_us="}) {
    EXPECT_THROW(parse_link_emulation(bad, 0), InvalidArgument) << bad;
  }
  EXPECT_THROW(parse_link_emulation("tb5-rdma", 300), InvalidArgument) << "two different latencies";
  for (const auto& preset : transport::link_presets()) EXPECT_TRUE(preset.on()) << preset.name;
}

// dilate=k: latency x k and bandwidth / k, in the figures the emulation and the cost model read and in the
// description every output shows; the link's own figures are kept, the preset's name too.
// peers= limits the emulation to the links from those ranks: one slow pair of a job.
TEST(LinkEmulationSettings, PeersLimitTheLinksEmulated) {
  using transport::parse_link_emulation;
  const auto pair = parse_link_emulation("latency_us=3000,peers=1+3", 0);
  EXPECT_TRUE(pair.applies_to(1));
  EXPECT_TRUE(pair.applies_to(3));
  EXPECT_FALSE(pair.applies_to(0));
  EXPECT_EQ(pair.describe(), "custom: +3000 us one way, no bandwidth cap (only from peers 1, 3)");
  EXPECT_TRUE(parse_link_emulation("tb5-tcp", 0).applies_to(7)) << "no peers: every link";
  for (const char* bad : {"latency_us=5,peers=", "latency_us=5,peers=a", "latency_us=5,peers=1+", "latency_us=5,peers=-2"}) {
    try {
      parse_link_emulation(bad, 0);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("peers="), std::string::npos) << error.what();
    }
  }
}

TEST(LinkEmulationSettings, DilationScalesLatencyAndBandwidthAlike) {
  using transport::parse_link_emulation;
  const auto plain = parse_link_emulation("tb5-rdma", 0);
  EXPECT_DOUBLE_EQ(plain.one_way_seconds(), 5e-6);
  const auto dilated = parse_link_emulation("tb5-rdma,dilate=100", 0);
  EXPECT_EQ(dilated.name, "tb5-rdma");
  EXPECT_EQ(dilated.latency_us, 5);
  EXPECT_EQ(dilated.gbit_per_s, 60);
  EXPECT_DOUBLE_EQ(dilated.one_way_seconds(), 500e-6);
  EXPECT_DOUBLE_EQ(dilated.seconds_per_byte(), 100 * plain.seconds_per_byte());
  EXPECT_EQ(dilated.describe(), "tb5-rdma dilated 100x: +500 us one way, 0.6 Gbit/s (0.0750 GB/s) per direction "
                                "per peer (5 us, 60 Gbit/s undilated)");
  EXPECT_DOUBLE_EQ(parse_link_emulation("dilate=4,latency_us=10", 0).one_way_seconds(), 40e-6);
  EXPECT_DOUBLE_EQ(parse_link_emulation("dilate=3", 100).one_way_seconds(), 300e-6) << "TBCOLL_LINK_DELAY_US too";
  EXPECT_EQ(parse_link_emulation("10gbe,dilate=1", 0).describe(), parse_link_emulation("10gbe", 0).describe());
}

// Out-of-range figures are refused, naming the key: latency_us=1e300 and gbps=0, if taken, would apply no
// delay (a duration that overflows; a cap of 0 read as none).
TEST(LinkEmulationSettings, OutOfRangeFiguresAreRefused) {
  using transport::parse_link_emulation;
  const std::pair<const char*, const char*> refused[] = {
      {"latency_us=1e300", "latency_us=1e300 is out of range"},
      {"latency_us=2e6", "latency_us=2e6 is out of range"},
      {"gbps=0", "gbps=0 is out of range (0.001 to 1000000 Gbit/s; leave gbps out for no cap)"},
      {"gbps=1e-9", "gbps=1e-9 is out of range"},
      {"gbps=1e300", "gbps=1e300 is out of range"},
      {"latency_us=inf", "latency_us=\"inf\" is not a number"},
      {"tb5-rdma,dilate=0", "dilate=0 is out of range (1 to 10000"},
      {"tb5-rdma,dilate=0.5", "dilate=0.5 is out of range"},
      {"tb5-rdma,dilate=1e5", "dilate=1e5 is out of range"},
      {"tb5-tcp,dilate=10000", "300 us x dilate=10000 is 3e+06 us one way, beyond the 1e+06 us"},
      {"latency_us=1,gbps=0.01,dilate=100", "0.01 Gbit/s / dilate=100 is 0.0001 Gbit/s, below the 0.001 Gbit/s"},
      {"dilate=10", "dilate=10 with no link to dilate"},
      {"dilate=10,tb5-rdma", "a preset, which must come first"},
  };
  for (const auto& [text, message] : refused) {
    try {
      parse_link_emulation(text, 0);
      ADD_FAILURE() << text << " was taken";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << text << ": " << error.what();
    }
  }
  for (long long delay_us : {-5LL, 2000000LL}) {
    try {
      parse_link_emulation("", delay_us);
      ADD_FAILURE() << "TBCOLL_LINK_DELAY_US=" << delay_us << " was taken";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("TBCOLL_LINK_DELAY_US=" + std::to_string(delay_us) +
                                               " is out of range"), std::string::npos) << error.what();
    }
  }
  EXPECT_DOUBLE_EQ(parse_link_emulation("latency_us=1e6,gbps=1e6", 0).one_way_seconds(), 1.0) << "the bounds";
}

}  // namespace
}  // namespace tbcoll
