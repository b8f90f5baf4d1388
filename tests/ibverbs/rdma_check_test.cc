// tbcoll-rdma-check's checks (tools/rdma_check), the raw verbs floors (tools/rdma_diag/raw_link.h, what
// tbcoll-perf --pingpong prints for ibverbs) and the error hints (transports/ibverbs/hints.h), on the fake verbs
// provider: ranks are threads meeting through an in-memory store, the device is Apple-strict unless a test says
// otherwise, and faults are injected where the checks must fail. ("fakeverbs" is registered by
// fake_transport_test.cc, in this binary.)
#include <errno.h>

#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "fake_verbs/fake_verbs.h"
#include "tools/rdma_check/check.h"
#include "transports/ibverbs/hints.h"
#include "tools/rdma_diag/preflight.h"
#include "tools/rdma_diag/raw_link.h"

namespace tbcoll::ibverbs {
namespace {

using rdma_check::Options;
using rdma_check::Outcome;
using rdma_check::Site;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Small runs: the fake copies under a mutex; what matters is that every check runs and decides.
Options quick() {
  Options options;
  options.transport = "fakeverbs";
  options.round_trips = 200;
  options.bandwidth_bytes = 64 << 10;
  options.messages = 64;
  options.message_timeout_s = 0.5;
  options.allreduce_iterations = 20;
  options.allreduce_bytes = 1 << 20;
  options.timeout_s = 20;
  return options;
}

Outcome one_rank(const Options& options, const VerbsApi* verbs = fake::verbs(), const std::string& why = "") {
  Site site;
  site.verbs = verbs;
  site.why_no_verbs = why;
  site.version = "test";
  return rdma_check::run(options, site);
}

// Both ranks' outcomes; rank 0's holds the report. on_hosts: rank r on host r of a cabled fabric.
std::vector<Outcome> two_ranks(const Options& options, bool on_hosts = false) {
  auto store = make_in_memory_store();
  std::vector<Outcome> outcomes(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      if (on_hosts) fake::set_thread_host(rank);
      Site site;
      site.verbs = fake::verbs();
      site.rank = rank;
      site.world_size = 2;
      site.store = store;
      site.version = "test";
      try {
        outcomes[rank] = rdma_check::run(options, site);
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
      fake::set_thread_host(-1);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  return outcomes;
}

// ---- preflight -------------------------------------------------------------------------------------------------

TEST(RdmaCheck, PreflightListsPortGidsMtuAndTheIpv4Address) {
  fake::Options two;
  two.devices = 2;
  fake::ScopedFabric fabric(two);
  Options options = quick();
  options.limits = Options::Limits::kOff;
  const Outcome outcome = one_rank(options);
  const std::string& report = outcome.report;
  EXPECT_TRUE(has(report, "verbs library: fake")) << report;
  EXPECT_TRUE(has(report, "devices: 2")) << report;
  EXPECT_TRUE(has(report, "rdma_en0 (network interface en0): port 1 ACTIVE")) << report;
  EXPECT_TRUE(has(report, "active MTU 1024, max MTU 4096, max message 16773120 B")) << report;
  EXPECT_TRUE(has(report, "GID[0] fe80::")) << report;
  EXPECT_TRUE(has(report, "GID[1] ::ffff:10.9.0.")) << report;
  EXPECT_TRUE(has(report, "IPv4-mapped: 10.9.0.")) << report;
  EXPECT_TRUE(has(report, "PASS preflight rdma_en0: usable: port 1 ACTIVE, IPv4-mapped GID at index 1")) << report;
  EXPECT_TRUE(has(report, "PASS preflight rdma_en1")) << report;
  EXPECT_TRUE(has(report, "SKIP link, send sweep")) << "one rank cannot check a link: " << report;
  EXPECT_EQ(outcome.failed, 0) << report;
  EXPECT_TRUE(has(report, "RESULT: PASS")) << report;
}

TEST(RdmaCheck, PreflightFindsTheGidAtAnotherIndex) {
  fake::Options at2;
  at2.ipv4_gid_index = 2;
  fake::ScopedFabric fabric(at2);
  Options options = quick();
  options.limits = Options::Limits::kOff;
  const std::string report = one_rank(options).report;
  EXPECT_TRUE(has(report, "GID[2] ::ffff:10.9.0.")) << report;
  EXPECT_TRUE(has(report, "IPv4-mapped GID at index 2")) << report;
}

TEST(RdmaCheck, PreflightWithoutIpv4AddressFailsWithTheFix) {
  fake::Options no_gid;
  no_gid.ipv4_gid_index = -1;
  fake::ScopedFabric fabric(no_gid);
  const Outcome outcome = one_rank(quick());
  EXPECT_TRUE(has(outcome.report, "FAIL preflight rdma_en0: no IPv4-mapped GID")) << outcome.report;
  EXPECT_TRUE(has(outcome.report, "fix: give en0 an IPv4 address")) << outcome.report;
  EXPECT_TRUE(has(outcome.report, "SKIP limits: no usable device")) << outcome.report;
  EXPECT_EQ(outcome.failed, 1);
  EXPECT_TRUE(has(outcome.report, "RESULT: FAIL"));
}

TEST(RdmaCheck, PortDownIsNamed) {
  fake::Options down;
  down.ports_active = false;
  fake::ScopedFabric fabric(down);
  const Outcome outcome = one_rank(quick());
  const std::string& report = outcome.report;
  EXPECT_TRUE(has(report, "FAIL preflight rdma_en0: no port is ACTIVE (port 1 DOWN)")) << report;
  EXPECT_TRUE(has(report, "rdma_ctl enable")) << report;
  EXPECT_EQ(outcome.unavailable, 0) << "a device whose port is down is a failure, not an absence of RDMA";
  EXPECT_GT(outcome.failed, 0);
}

TEST(RdmaCheck, KernelWithoutRdmaIsNotAvailable) {
  fake::Options no_kernel;
  no_kernel.no_kernel_support = true;
  fake::ScopedFabric fabric(no_kernel);
  const Outcome outcome = one_rank(quick());
  const std::string& report = outcome.report;
  EXPECT_TRUE(has(report, "FAIL preflight: not available: ibv_get_device_list")) << report;
  EXPECT_TRUE(has(report, "this kernel has no RDMA support (ENOSYS)")) << report;
  EXPECT_EQ(outcome.unavailable, 1) << "tbcoll-rdma-check --skip-without-rdma exits 77 for this";
  EXPECT_EQ(outcome.failed, outcome.unavailable);
}

TEST(RdmaCheck, NoVerbsLibraryIsNotAvailable) {
  const std::string report = one_rank(quick(), nullptr, "libibverbs.so.1 not found (no such file)").report;
  EXPECT_TRUE(has(report, "FAIL preflight: not available: libibverbs.so.1 not found")) << report;
  EXPECT_TRUE(has(report, "ibverbs-providers")) << report;
}

// ---- limit probes ----------------------------------------------------------------------------------------------

// Caps above the device's limits (given, not derived), the looped-back pair asked for: each probe finds its limit.
TEST(RdmaCheck, LimitProbesFindTheDevicesLimitsAndFreeEverything) {
  fake::Options limits;
  limits.max_qps = 7;
  limits.max_mrs = 50;
  limits.max_outstanding_recvs = 20;
  fake::ScopedFabric fabric(limits);
  fake::clear_calls();
  LimitCaps above;
  above.queue_pairs = 64;
  above.registrations = 256;
  above.receives = 256;
  above.loopback = 1;
  const LimitReport report = probe_limits(*fake::verbs(), "", Mode::kUc, above);
  EXPECT_EQ(report.device, "rdma_en0");
  EXPECT_EQ(report.queue_pairs.accepted, 7);
  EXPECT_EQ(report.registrations.accepted, 50);
  EXPECT_EQ(report.receives.accepted, 20);
  EXPECT_TRUE(has(report.queue_pairs.stopped, "the 8th failed: ibv_create_qp on rdma_en0 failed: errno 16"))
      << report.queue_pairs.stopped;
  EXPECT_TRUE(has(report.queue_pairs.stopped, "device QP limit reached (about 10 on macOS"))
      << report.queue_pairs.stopped;
  EXPECT_TRUE(has(report.registrations.stopped, "the 51st failed: ibv_reg_mr on rdma_en0 failed: errno 12"));
  EXPECT_TRUE(has(report.registrations.stopped, "memory registration limit reached (about 100 per device on macOS)"));
  EXPECT_TRUE(has(report.receives.stopped, "the 21st failed: ibv_post_recv"));
  EXPECT_TRUE(has(report.receives.stopped, "more receives outstanding than the device accepts"));
  auto calls = fake::calls();
  EXPECT_EQ(calls["open_device"], calls["close_device"]) << "a thread on no host of the fake opens for itself";
  EXPECT_EQ(calls["alloc_pd"], calls["dealloc_pd"]);
  EXPECT_EQ(calls["create_cq"], calls["destroy_cq"]);
  EXPECT_EQ(calls["create_qp"] - 1, calls["destroy_qp"]) << "every queue pair made is destroyed (one create failed)";
  EXPECT_EQ(calls["reg_mr"] - 1, calls["dereg_mr"]) << "every registration is released (one failed)";
  // Too few receives for the transport's 32 per peer: the report says so.
  const std::string text = format_limits(report);
  EXPECT_TRUE(has(text, "FAIL limits rdma_en0: fewer than the 32 outstanding receives")) << text;
}

// By default (no --limits) Apple's Thunderbolt is not probed at all: nothing is created.
TEST(RdmaCheck, LimitProbesAreOptInOnApplesThunderbolt) {
  fake::ScopedFabric fabric;
  fake::clear_calls();
  const Outcome outcome = one_rank(quick());
  EXPECT_TRUE(has(outcome.report, "SKIP limits rdma_en0: opt-in on Apple's Thunderbolt (--limits)")) << outcome.report;
  EXPECT_FALSE(has(outcome.report, "queue pairs (uc)")) << outcome.report;
  EXPECT_EQ(fake::calls()["create_qp"], 0u);
  EXPECT_EQ(fake::calls()["reg_mr"], 0u);
  EXPECT_EQ(outcome.failed, 0) << outcome.report;
}

// --limits on Apple's: up to the transport's budget (10 queue pairs, its registrations: one per link and the
// callers' 64 of max_mr 100), no looped-back pair, so the device is never driven to a refusal.
TEST(RdmaCheck, LimitProbesOfAppleStopAtWhatTbcollTakes) {
  fake::ScopedFabric fabric;
  fake::clear_calls();
  Options options = quick();
  options.limits = Options::Limits::kOn;
  const Outcome outcome = one_rank(options);
  EXPECT_TRUE(has(outcome.report, "queue pairs (uc): 10 accepted (the probe's cap, what tbcoll takes here"))
      << outcome.report;
  EXPECT_TRUE(has(outcome.report, "memory registrations (4 KiB each): 74 accepted (the probe's cap")) << outcome.report;
  EXPECT_TRUE(has(outcome.report, "outstanding receives (4 KiB each, one queue pair): not probed")) << outcome.report;
  EXPECT_TRUE(has(outcome.report, "PASS limits rdma_en0: room for tbcoll (up to 5 peers on this device)"))
      << outcome.report;
  EXPECT_FALSE(has(outcome.report, "failed:")) << outcome.report;
  EXPECT_EQ(fake::calls()["create_qp"], 10u) << "no looped-back pair";
  EXPECT_EQ(fake::calls()["modify_qp"], 0u);
  EXPECT_EQ(fake::calls()["reg_mr"], 74u);
  EXPECT_EQ(outcome.failed, 0) << outcome.report;
}

// Off Apple the probes run by default, up to the device's max_qp (at most 64) and the transport's registrations,
// with the looped-back pair for the receives (up to the 32 a link posts).
TEST(RdmaCheck, LimitProbesOffAppleRunByDefaultUpToTheTransportsBudget) {
  fake::Options roce = fake::Options{};
  roce.apple_strict = false;
  roce.max_qps = 20;
  roce.max_mrs = 60;
  fake::ScopedFabric fabric(roce);
  fake::clear_calls();
  const Outcome outcome = one_rank(quick());
  EXPECT_TRUE(has(outcome.report, "queue pairs (uc): 20 accepted (the probe's cap")) << outcome.report;
  EXPECT_TRUE(has(outcome.report, "memory registrations (4 KiB each): 44 accepted (the probe's cap")) << outcome.report;
  EXPECT_TRUE(has(outcome.report, "outstanding receives (4 KiB each, one queue pair): 32 accepted (the probe's cap"))
      << outcome.report;
  EXPECT_TRUE(has(outcome.report, "PASS limits roce0")) << outcome.report;
  EXPECT_EQ(outcome.failed, 0) << outcome.report;
}

// One process (a host of the fake) opens its device once, for the preflight, the limit probes, the link and the
// all_reduce over the transport alike, and keeps it open.
TEST(RdmaCheck, EveryCheckUsesTheProcesssOneOpenedDevice) {
  fake::Options cabled;
  cabled.cables = {{0, 0, 1, 0}};
  fake::ScopedFabric fabric(cabled);
  fake::clear_calls();
  Options options = quick();
  options.limits = Options::Limits::kOn;
  const std::vector<Outcome> outcomes = two_ranks(options, /*on_hosts=*/true);
  EXPECT_EQ(outcomes[0].failed, 0) << outcomes[0].report;
  EXPECT_TRUE(has(outcomes[0].report, "PASS all_reduce over fakeverbs")) << outcomes[0].report;
  EXPECT_EQ(fake::calls()["open_device"], 2u) << "one per host";
  EXPECT_EQ(fake::calls()["close_device"], 0u);
  EXPECT_EQ(fake::calls()["alloc_pd"], 2u) << "one protection domain per opened device";
}

TEST(RdmaCheck, RcLimitProbeOnAppleSaysUcOnly) {
  fake::ScopedFabric fabric;
  const LimitReport report = probe_limits(*fake::verbs(), "", Mode::kRc);
  EXPECT_EQ(report.queue_pairs.accepted, 0);
  EXPECT_TRUE(has(report.queue_pairs.stopped, "this device supports UC only")) << report.queue_pairs.stopped;
}

// ---- two ranks ---------------------------------------------------------------------------------------------------

TEST(RdmaCheck, TwoRanksPassOnAppleStrictUsingOnlyApplesSubset) {
  fake::ScopedFabric fabric;
  fake::clear_calls();
  const std::vector<Outcome> outcomes = two_ranks(quick());
  const std::string& report = outcomes[0].report;
  EXPECT_TRUE(has(report, "== rank 0 (host")) << report;
  EXPECT_TRUE(has(report, "== rank 1 (host")) << report;
  EXPECT_TRUE(has(report, "PASS link: rank 0 rdma_en0 <-> rank 1 rdma_en0, uc queue pairs, path MTU 1024")) << report;
  EXPECT_TRUE(has(report, "PASS send sweep 4 KiB..16 MiB - 4 KiB: 14 sizes")) << report;
  EXPECT_TRUE(has(report, "16773120 B  ok")) << "Apple's largest message: " << report;
  EXPECT_TRUE(has(report, "4097 B  ok")) << report;
  EXPECT_TRUE(has(report, "PASS latency: UC SEND one way, 8 B:")) << report;
  EXPECT_TRUE(has(report, "PASS bandwidth: one UC queue pair, 64 messages x 64 KiB:")) << report;
  EXPECT_TRUE(has(report, "    cost model: set TBCOLL_IB_LATENCY_US=")) << report;
  EXPECT_TRUE(has(report, " alike on every rank of jobs over this link")) << report;
  EXPECT_TRUE(has(report, "PASS all_reduce over fakeverbs (uc)")) << report;
  EXPECT_TRUE(has(report, "x the raw one-way latency (goal on Thunderbolt 5 Macs: at most 2 x)")) << report;
  EXPECT_TRUE(has(report, "% of one queue pair's one-way bandwidth (goal: at least 80 %)")) << report;
  EXPECT_EQ(outcomes[0].failed, 0) << report;
  EXPECT_TRUE(has(report, "RESULT: PASS")) << report;
  EXPECT_TRUE(has(outcomes[1].report, "the report is printed by rank 0 (")) << outcomes[1].report;
  EXPECT_EQ(outcomes[1].failed, 0);
  const std::set<std::string> apple_subset = {"get_device_list", "free_device_list", "get_device_name", "open_device",
                                              "close_device",    "query_port",       "query_gid",       "alloc_pd",
                                              "dealloc_pd",      "reg_mr",           "dereg_mr",        "create_cq",
                                              "destroy_cq",      "create_qp",        "modify_qp",       "destroy_qp",
                                              "post_send",       "post_recv",        "poll_cq",         "query_device",
                                              "ipv4_prefix"};
  for (const auto& [name, count] : fake::calls()) EXPECT_TRUE(apple_subset.count(name)) << name << " x" << count;
  const fake::Counters counters = fake::counters();
  EXPECT_EQ(counters.length_errors, 0u) << "every send met a receive of the same frame count";
  EXPECT_GT(counters.delivered, 400u);
}

// Two Macs whose cable joins host 0's rdma_en1 to host 1's rdma_en0 (host 0's rdma_en0 goes to a third Mac): the
// link is found by subnet, or named per rank; the same name for both ranks is refused by the fabric, named.
TEST(RdmaCheck, TheLinkIsTheCableBothRanksShareASubnetOn) {
  fake::Options cabled;
  cabled.devices = 2;
  cabled.cables = {{0, 0, 2, 0}, {0, 1, 1, 0}};
  fake::ScopedFabric fabric(cabled);
  Options options = quick();
  options.limits = Options::Limits::kOff;
  std::vector<Outcome> outcomes = two_ranks(options, true);
  EXPECT_TRUE(has(outcomes[0].report, "PASS link: rank 0 rdma_en1 <-> rank 1 rdma_en0")) << outcomes[0].report;
  EXPECT_TRUE(has(outcomes[0].report, "PASS all_reduce over fakeverbs")) << outcomes[0].report;
  EXPECT_EQ(outcomes[0].failed, 0) << outcomes[0].report;

  fake::reset(cabled);
  options.device = "rdma_en1,rdma_en0";
  outcomes = two_ranks(options, true);
  EXPECT_TRUE(has(outcomes[0].report, "PASS link: rank 0 rdma_en1 <-> rank 1 rdma_en0")) << outcomes[0].report;
  EXPECT_EQ(outcomes[0].failed, 0) << outcomes[0].report;

  fake::reset(cabled);
  options.device = "rdma_en0";  // host 0's rdma_en0 is cabled to another Mac
  outcomes = two_ranks(options, true);
  EXPECT_TRUE(has(outcomes[0].report, "FAIL link (uc queue pairs)")) << outcomes[0].report;
  EXPECT_TRUE(has(outcomes[0].report, "the peer's GID is unreachable")) << outcomes[0].report;
}

TEST(RdmaCheck, TwoRanksInRcModeOnARoceLikeDevice) {
  fake::Options roce;
  roce.apple_strict = false;
  fake::ScopedFabric fabric(roce);
  Options options = quick();
  options.mode = Mode::kRc;
  options.limits = Options::Limits::kOff;
  const std::vector<Outcome> outcomes = two_ranks(options);
  EXPECT_TRUE(has(outcomes[0].report, "PASS send sweep 4 KiB..16 MiB - 4 KiB")) << outcomes[0].report;
  EXPECT_TRUE(has(outcomes[0].report, "PASS latency: RC SEND one way")) << outcomes[0].report;
  EXPECT_TRUE(has(outcomes[0].report, "PASS all_reduce over fakeverbs (rc)")) << outcomes[0].report;
  EXPECT_EQ(outcomes[0].failed, 0) << outcomes[0].report;
}

TEST(RdmaCheck, DroppedMessageFailsTheSweepNamingIt) {
  fake::ScopedFabric fabric;
  Options options = quick();
  options.limits = Options::Limits::kOff;
  options.before_phase = [](const std::string& phase) {
    if (phase == "sweep") fake::drop_next_sends(1);
  };
  const std::vector<Outcome> outcomes = two_ranks(options);
  const std::string& report = outcomes[0].report;
  EXPECT_TRUE(has(report, "FAIL send sweep at 4 KiB:")) << report;
  EXPECT_TRUE(has(report, "did not arrive within 0.5 s: lost")) << report;
  EXPECT_TRUE(has(report, "FAIL latency: latency not run: the link failed before (send sweep at 4 KiB failed"))
      << report;
  EXPECT_TRUE(has(report, "RESULT: FAIL")) << report;
  EXPECT_GE(outcomes[0].failed, 3);
  EXPECT_GE(outcomes[1].failed, 3) << "rank 1 exits non-zero too";
}

TEST(RdmaCheck, CorruptedMessageFailsTheSweepNamingTheByte) {
  fake::ScopedFabric fabric;
  Options options = quick();
  options.limits = Options::Limits::kOff;
  options.sweep_min = 65536;
  options.before_phase = [](const std::string& phase) {
    if (phase == "sweep") fake::corrupt_next_sends(1);
  };
  const std::string report = two_ranks(options)[0].report;
  EXPECT_TRUE(has(report, "FAIL send sweep at 64 KiB:")) << report;
  EXPECT_TRUE(has(report, "byte 32768 is")) << "the fake flips the middle byte: " << report;
  EXPECT_TRUE(has(report, "(1 of 65536 bytes differ): the data was corrupted on the way")) << report;
}

TEST(RdmaCheck, ErrorCompletionFailsTheSweepWithWhatItMeans) {
  fake::ScopedFabric fabric;
  Options options = quick();
  options.limits = Options::Limits::kOff;
  options.before_phase = [](const std::string& phase) {
    if (phase == "sweep") fake::fail_next_send_completion(IBV_WC_LOC_LEN_ERR);
  };
  const std::string report = two_ranks(options)[0].report;
  EXPECT_TRUE(has(report, "FAIL send sweep at 4 KiB:")) << report;
  EXPECT_TRUE(has(report, "IBV_WC_LOC_LEN_ERR: the send and its receive cover a different number of 4 KiB frames"))
      << report;
}

TEST(RdmaCheck, QueuePairLimitAtSetUpFailsTheLinkWithItsFix) {
  fake::ScopedFabric fabric;
  Options options = quick();
  options.limits = Options::Limits::kOff;
  options.before_phase = nullptr;
  fake::fail_next_create_qp(EBUSY);
  const std::string report = two_ranks(options)[0].report;
  EXPECT_TRUE(has(report, "FAIL link (uc queue pairs): connection set-up failed: rank ")) << report;
  EXPECT_TRUE(has(report, "device QP limit reached (about 10 on macOS")) << report;
  EXPECT_TRUE(has(report, "SKIP send sweep, latency, bandwidth: no link")) << report;
}

TEST(RdmaCheck, RcOnAppleFailsWithUcOnly) {
  fake::ScopedFabric fabric;
  Options options = quick();
  options.limits = Options::Limits::kOff;
  options.mode = Mode::kRc;
  options.timeout_s = 1;  // the all_reduce's set-up fails too, at its deadline
  const std::string report = two_ranks(options)[0].report;
  EXPECT_TRUE(has(report, "FAIL link (rc queue pairs)")) << report;
  EXPECT_TRUE(has(report, "this device supports UC only: set TBCOLL_IB_MODE=uc")) << report;
}

TEST(RdmaCheck, OneRankWithoutRdmaSkipsTheLinkChecks) {
  fake::ScopedFabric fabric;
  auto store = make_in_memory_store();
  std::vector<Outcome> outcomes(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      Site site;
      site.verbs = rank == 1 ? nullptr : fake::verbs();
      site.why_no_verbs = "librdma.dylib not found";
      site.rank = rank;
      site.world_size = 2;
      site.store = store;
      outcomes[rank] = rdma_check::run(quick(), site);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(has(outcomes[0].report, "FAIL preflight: not available: librdma.dylib not found")) << outcomes[0].report;
  EXPECT_TRUE(has(outcomes[0].report,
                  "SKIP link, send sweep, latency, bandwidth, all_reduce: RDMA is not available "
                  "on rank 1"))
      << outcomes[0].report;
  for (const Outcome& outcome : outcomes) {  // both ranks judge alike: both exit 77 under --skip-without-rdma
    EXPECT_EQ(outcome.unavailable, 1);
    EXPECT_EQ(outcome.failed, 1);
  }
}

// ---- the floors (tbcoll-perf --pingpong over ibverbs) -----------------------------------------------------------

std::vector<Floors> floors_of(const std::vector<const VerbsApi*>& verbs, FloorOptions options) {
  auto store = make_in_memory_store();
  std::vector<Floors> out(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      FloorOptions mine = options;
      mine.rank = rank;
      out[rank] = measure_floors(verbs[rank], "no verbs library here", mine,
                                 store_exchange(store, "floors", rank, 1 - rank, 30));
    });
  }
  for (auto& thread : threads) thread.join();
  return out;
}

TEST(RdmaFloors, MeasuredBetweenTwoRanksAlike) {
  fake::ScopedFabric fabric;
  FloorOptions options;
  options.round_trips = 300;
  options.bandwidth_bytes = 256 << 10;
  options.messages = 40;
  options.message_timeout_s = 2;
  const std::vector<Floors> floors = floors_of({fake::verbs(), fake::verbs()}, options);
  for (const Floors& f : floors) {
    EXPECT_TRUE(f.measured) << f.why_not;
    EXPECT_GT(f.one_way_us, 0);
    EXPECT_GT(f.one_qp_gbps, 0);
    EXPECT_GT(f.both_ways_gbps, 0);
    EXPECT_EQ(f.mode, "uc");
    EXPECT_EQ(f.mtu, 1024);
  }
  EXPECT_EQ(floors[0].one_way_us, floors[1].one_way_us) << "rank 0's figures on both ranks";
  EXPECT_EQ(floors[0].one_qp_gbps, floors[1].one_qp_gbps);
  EXPECT_EQ(floors[0].both_ways_gbps, floors[1].both_ways_gbps);
  std::printf("fake provider floors: UC SEND one way %.2f us (8 B), one QP %.3f GB/s (256 KiB), both ways %.3f GB/s\n",
              floors[0].one_way_us, floors[0].one_qp_gbps, floors[0].both_ways_gbps);
  EXPECT_EQ(fake::counters().length_errors, 0u);
  EXPECT_EQ(fake::counters().dropped_no_receive, 0u) << "credits: no send ever found no receive";
}

TEST(RdmaFloors, ALostMessageIsAFailureNotAFigure) {
  fake::ScopedFabric fabric;
  FloorOptions options;
  options.round_trips = 50;
  options.messages = 8;
  options.message_timeout_s = 0.5;
  fake::drop_next_sends(1);  // the first latency ping (set-up sends nothing)
  const std::vector<Floors> floors = floors_of({fake::verbs(), fake::verbs()}, options);
  for (const Floors& f : floors) {
    EXPECT_FALSE(f.measured);
    EXPECT_TRUE(has(f.why_not, "latency failed")) << f.why_not;
    EXPECT_TRUE(has(f.why_not, "did not arrive within 0.5 s: lost")) << f.why_not;
  }
}

TEST(RdmaFloors, ARankWithoutVerbsMakesBothSayWhy) {
  fake::ScopedFabric fabric;
  const std::vector<Floors> floors = floors_of({fake::verbs(), nullptr}, FloorOptions{});
  for (const Floors& f : floors) {
    EXPECT_FALSE(f.measured);
    EXPECT_TRUE(has(f.why_not, "rank 1: not available: no verbs library here")) << f.why_not;
  }
}

// ---- hints: one place, the same text from the transport and the check ------------------------------------------

TEST(RdmaHints, NameTheFixForEachKnownErrno) {
  using hints::Verb;
  EXPECT_TRUE(has(hints::describe(Verb::kModifyQpRtr, EINVAL, {"rdma_en3"}),
                  "ibv_modify_qp (to RTR) on rdma_en3 failed: errno 22 (Invalid argument): no IPv4-mapped GID on "
                  "rdma_en3 (or the Thunderbolt Bridge still holds its interface): give en3 an IPv4 address"));
  EXPECT_TRUE(has(hints::describe(Verb::kModifyQpRtr, EINVAL, {"rdma_en3"}), "a /30 per cable"));
  EXPECT_TRUE(has(hints::describe(Verb::kCreateQp, EBUSY, {"rdma_en3"}), "device QP limit reached (about 10 on macOS"));
  EXPECT_TRUE(has(hints::describe(Verb::kCreateQp, 102, {"rdma_en3", true}), "this device supports UC only"));
  EXPECT_TRUE(has(hints::describe(Verb::kCreateQp, EOPNOTSUPP, {"rdma_en3", true}), "this device supports UC only"));
  EXPECT_TRUE(has(hints::describe(Verb::kModifyQpRtr, EOPNOTSUPP, {"rdma_en3", true}), "supports UC only"));
  EXPECT_TRUE(has(hints::describe(Verb::kRegMr, ENOMEM, {"rdma_en3"}), "about 100 per device on macOS"));
  EXPECT_TRUE(has(hints::describe(Verb::kGetDeviceList, ENOSYS, {}), "this kernel has no RDMA support (ENOSYS)"));
  EXPECT_TRUE(has(hints::describe(Verb::kPostRecv, ENOMEM, {"rdma_en3"}), "about 32 on some macOS versions"));
  EXPECT_TRUE(has(hints::describe(Verb::kPostRecv, EINVAL, {"rdma_en3"}), "only once the queue pair is in RTS"));
  EXPECT_EQ(hints::describe(Verb::kOpenDevice, EIO, {"x"}), "ibv_open_device on x failed: errno 5 (Input/output error)")
      << "no fix invented where none is known";
}

// Through the fake's faults: the errno a real stack gives, decoded by the same function.
TEST(RdmaHints, FromTheFakeProvidersFaults) {
  fake::ScopedFabric fabric;
  const VerbsApi& v = *fake::verbs();
  int count = 0;
  ibv_device** list = v.get_device_list(&count);
  ibv_context* context = v.open_device(list[0]);
  v.free_device_list(list);
  ibv_pd* pd = v.alloc_pd(context);
  ibv_cq* cq = v.create_cq(context, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_UC;
  init.cap = {4, 4, 1, 1, 0};
  // The 11th queue pair: EBUSY.
  fake::fail_next_create_qp(EBUSY);
  errno = 0;
  EXPECT_EQ(v.create_qp(pd, &init), nullptr);
  EXPECT_TRUE(has(hints::describe(hints::Verb::kCreateQp, errno, {"rdma_en0"}), "device QP limit reached")) << errno;
  // RC on Apple: refused.
  init.qp_type = IBV_QPT_RC;
  errno = 0;
  EXPECT_EQ(v.create_qp(pd, &init), nullptr);
  EXPECT_TRUE(has(hints::describe(hints::Verb::kCreateQp, errno, {"rdma_en0", true}), "this device supports UC only"))
      << errno;
  // RTR with a GID index that is not the IPv4-mapped one: EINVAL, the missing-IPv4 hint.
  init.qp_type = IBV_QPT_UC;
  ibv_qp* qp = v.create_qp(pd, &init);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(qp_to_init(v, qp, 1), 0);
  QpPeer self;
  self.qp_num = qp->qp_num;
  v.query_gid(context, 1, 1, &self.gid);
  const int error = qp_to_rtr(v, qp, Mode::kUc, IBV_MTU_1024, 1, /*gid_index=*/0, self);
  EXPECT_EQ(error, EINVAL);
  EXPECT_TRUE(has(hints::describe(hints::Verb::kModifyQpRtr, error, {"rdma_en0"}),
                  "no IPv4-mapped GID on rdma_en0 (or the Thunderbolt Bridge still holds its interface): give en0 "
                  "an IPv4 address"));
  EXPECT_EQ(qp_to_rtr(v, qp, Mode::kUc, IBV_MTU_1024, 1, 1, self), 0) << "the IPv4-mapped index works";
  v.destroy_qp(qp);
  v.destroy_cq(cq);
  v.dealloc_pd(pd);
  v.close_device(context);
}

}  // namespace
}  // namespace tbcoll::ibverbs
