// tbcoll-rdma-check's checks (tools/rdma_check), the raw verbs floors (tools/rdma_diag/raw_link.h, what
// tbcoll-perf --pingpong prints for ibverbs) and the error hints (transports/ibverbs/hints.h), on the fake verbs
// provider: ranks are threads meeting through an in-memory store, the device is Apple-strict unless a test says
// otherwise, and faults are injected where the checks must fail. ("fakeverbs" is registered by
// fake_transport_test.cc, in this binary.)
#include <errno.h>

#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "fake_verbs/fake_verbs.h"
#include "tools/rdma_check/check.h"
#include "transports/ibverbs/hints.h"
#include "tools/rdma_diag/preflight.h"
#include "tools/rdma_diag/raw_link.h"
#include "tools/rdma_diag/zero_copy.h"

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
std::vector<Outcome> two_ranks(const Options& options, bool on_hosts = false, const VerbsApi* verbs = fake::verbs()) {
  auto store = make_in_memory_store();
  std::vector<Outcome> outcomes(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      if (on_hosts) fake::set_thread_host(rank);
      Site site;
      site.verbs = verbs;
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

// ---- zero-copy sends (tools/rdma_diag/zero_copy.h) ---------------------------------------------------------------

// The fake's table, recording the registrations and the SENDs over 4 KiB (to see where each came from), and with
// apple_rules the two rules of Apple's that the strict fake is being given: a receive's byte_len rounded up to whole
// 4 KiB frames, a SEND from an address off a 4 KiB boundary refused (as Apple refuses a post: -EINVAL).
struct Recorded {
  struct Registration {
    uint64_t addr = 0, bytes = 0;
    int access = 0;
    uint32_t lkey = 0;
  };
  struct Send {
    uint64_t addr = 0;
    uint32_t bytes = 0, lkey = 0;
  };
  std::vector<Registration> registrations;
  std::vector<Send> sends;
  int rounded = 0;  ///< receives whose byte_len was rounded up
};
std::mutex recorded_mutex;
Recorded recorded;  // read once the ranks' threads have ended
bool apple_rules = false;

int rules_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  std::unique_lock<std::mutex> lock(recorded_mutex);
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    if (apple_rules && w->num_sge > 0 && w->sg_list[0].addr % 4096 != 0) {
      *bad = w;
      errno = 0;
      return -EINVAL;
    }
    if (w->num_sge > 0 && w->sg_list[0].length > 4096) {
      recorded.sends.push_back({w->sg_list[0].addr, w->sg_list[0].length, w->sg_list[0].lkey});
    }
  }
  lock.unlock();
  return fake::verbs()->post_send(qp, wr, bad);
}

int rules_poll_cq(ibv_cq* cq, int entries, ibv_wc* wc) {
  const int polled = fake::verbs()->poll_cq(cq, entries, wc);
  for (int i = 0; i < polled; ++i) {
    if (!apple_rules || wc[i].status != IBV_WC_SUCCESS || (wc[i].opcode & IBV_WC_RECV) == 0) continue;
    const uint32_t whole = std::max<uint32_t>(1, (wc[i].byte_len + 4095) / 4096) * 4096;
    std::lock_guard<std::mutex> lock(recorded_mutex);
    if (whole != wc[i].byte_len) ++recorded.rounded;
    wc[i].byte_len = whole;
  }
  return polled;
}

ibv_mr* recording_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  ibv_mr* mr = fake::verbs()->reg_mr(pd, addr, length, access);
  std::lock_guard<std::mutex> lock(recorded_mutex);
  if (mr != nullptr) recorded.registrations.push_back({reinterpret_cast<uintptr_t>(addr), length, access, mr->lkey});
  return mr;
}

// The table; the record starts afresh.
const VerbsApi* recorded_verbs(bool with_apple_rules) {
  static const VerbsApi table = [] {
    VerbsApi rules = *fake::verbs();
    rules.post_send = rules_post_send;
    rules.poll_cq = rules_poll_cq;
    rules.reg_mr = recording_reg_mr;
    return rules;
  }();
  std::lock_guard<std::mutex> lock(recorded_mutex);
  recorded = Recorded{};
  apple_rules = with_apple_rules;
  return &table;
}

// Where the SENDs from a caller's buffer (a registration of 4 slots + 16 KiB, 16 KiB-aligned, with `access`)
// started in it; each is a slot long.
std::multiset<size_t> caller_send_offsets(const Recorded& record, size_t slot, int access) {
  std::multiset<size_t> offsets;
  for (const Recorded::Send& send : record.sends) {
    for (const Recorded::Registration& registration : record.registrations) {
      if (registration.lkey != send.lkey || registration.bytes != kZeroCopySends * slot + 16384) continue;
      EXPECT_EQ(registration.access, access);
      EXPECT_EQ(registration.addr % 16384, 0u);
      EXPECT_EQ(send.bytes, slot);
      offsets.insert(send.addr - registration.addr);
    }
  }
  return offsets;
}

const std::string kZeroCopyLine = "zero-copy sends (from registered memory at 16 KiB-aligned offsets): ";

// Apple-strict, with the byte_len and alignment rules: the case passes, and so does every other check (their
// byte_len is an upper bound too, their credits leave from 4 KiB frames); the line names the knob. Its SENDs left
// from the caller's buffer, registered apart with Apple's access, at 0, S, 16 KiB and 16 KiB + 2 S.
TEST(RdmaCheck, ZeroCopySendsPassOnAppleStrictAndNameTheKnob) {
  fake::ScopedFabric fabric;
  Options options = quick();
  options.limits = Options::Limits::kOff;
  const std::vector<Outcome> outcomes = two_ranks(options, false, recorded_verbs(true));
  const std::string& report = outcomes[0].report;
  const std::string verified = "PASS " + kZeroCopyLine + "verified, 4 sends of 512 KiB arrived as sent; ";
  EXPECT_TRUE(has(report, verified + "turn them on with TBCOLL_IB_ZERO_COPY=1 on every rank\n")) << report;
  EXPECT_EQ(outcomes[0].failed, 0) << report;
  EXPECT_EQ(outcomes[1].failed, 0);
  EXPECT_GT(recorded.rounded, 0) << "the rule was in force (the latency's 8 B arrive as 4096)";
  const size_t s = 512 << 10, k16 = 16 << 10;
  EXPECT_EQ(caller_send_offsets(recorded, s, kAccessFlags),
            (std::multiset<size_t>{0, 0, s, s, k16, k16, k16 + 2 * s, k16 + 2 * s}));
  EXPECT_EQ(fake::counters().length_errors, 0u);
}

// A RoCE-like device, in UC and RC: the case passes; there the transport's default (auto) already sends from
// registered memory, and the caller's buffer is registered with no access, as the transport registers it there.
TEST(RdmaCheck, ZeroCopySendsPassOnAPermissiveDevice) {
  fake::Options roce;
  roce.apple_strict = false;
  for (Mode mode : {Mode::kUc, Mode::kRc}) {
    fake::ScopedFabric fabric(roce);
    Options options = quick();
    options.limits = Options::Limits::kOff;
    options.mode = mode;
    const std::vector<Outcome> outcomes = two_ranks(options, false, recorded_verbs(false));
    const std::string& report = outcomes[0].report;
    const std::string advice = mode == Mode::kRc
                                   ? "TBCOLL_IB_ZERO_COPY=auto (the default) already uses them on this RC link\n"
                                   : "turn them on with TBCOLL_IB_ZERO_COPY=1 on every rank";
    EXPECT_TRUE(has(report, "PASS " + kZeroCopyLine + "verified, 4 sends of 512 KiB arrived as sent; " + advice))
        << report;
    EXPECT_EQ(outcomes[0].failed, 0) << report;
    EXPECT_EQ(caller_send_offsets(recorded, 512 << 10, 0).size(), 8u);
  }
}

// A byte corrupted on the way: the line names the send, the byte and says to leave the knob unset; both ranks fail
// (exit 1); the floors before it were measured and the transport's all_reduce (another link) still runs.
TEST(RdmaCheck, ZeroCopyFailureTellsToLeaveTheKnobUnset) {
  fake::ScopedFabric fabric;
  Options options = quick();
  options.limits = Options::Limits::kOff;
  options.before_phase = [](const std::string& phase) {
    if (phase == "zero-copy") fake::corrupt_next_sends(1);
  };
  const std::vector<Outcome> outcomes = two_ranks(options, false, recorded_verbs(true));
  const std::string& report = outcomes[0].report;
  EXPECT_TRUE(has(report, "FAIL " + kZeroCopyLine + "zero-copy sends of 512 KiB failed: rank ")) << report;
  EXPECT_TRUE(has(report, ": the 512 KiB send from offset 0 of rank ")) << "the first send: " << report;
  EXPECT_TRUE(has(report, "'s registered buffer: byte 262144 is ")) << "the fake flips the middle byte: " << report;
  EXPECT_TRUE(has(report,
                  "(1 of 524288 bytes differ): the data was corrupted on the way; leave TBCOLL_IB_ZERO_COPY "
                  "unset (off on Apple's stack)\n"))
      << report;
  EXPECT_TRUE(has(report, "PASS bandwidth:")) << report;
  EXPECT_TRUE(has(report, "PASS all_reduce over fakeverbs")) << report;
  EXPECT_EQ(outcomes[0].failed, 1) << report;
  EXPECT_EQ(outcomes[1].failed, 1) << "rank 1 exits non-zero too";
  EXPECT_TRUE(has(report, "RESULT: FAIL")) << report;
}

// The case alone, between two ranks (threads) on `verbs`; before() runs on rank 0 just before it.
std::vector<ZeroCopyResult> zero_copy_case(const VerbsApi* verbs, const std::function<void()>& before = {}) {
  auto store = make_in_memory_store();
  std::vector<ZeroCopyResult> results(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      RawLinkOptions options;
      options.rank = rank;
      options.message_timeout_s = 0.5;
      options.max_message_bytes = 64 << 10;  // the link's own buffers: the case takes the ports' largest SEND
      try {
        RawLink link(verbs, "", options, store_exchange(store, "zero-copy", rank, 1 - rank, 30));
        if (rank == 0 && before) before();
        results[rank] = link.zero_copy_sends();
      } catch (const std::exception& error) {
        results[rank].failure = std::string("set-up: ") + error.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(format_zero_copy(results[0]), format_zero_copy(results[1])) << "both ranks judge alike";
  return results;
}

// Each way the case can fail is named: a lost send, an error completion, a registration refused.
TEST(RdmaZeroCopy, FailuresAreNamedOnBothRanks) {
  fake::ScopedFabric fabric;
  std::string line = format_zero_copy(zero_copy_case(recorded_verbs(true), [] { fake::drop_next_sends(1); })[0]);
  EXPECT_TRUE(has(line, "3 of the 4 sends of 512 KiB from rank ")) << line;
  EXPECT_TRUE(has(line,
                  "arrived within 0.5 s: lost (UC drops a message without any error); leave "
                  "TBCOLL_IB_ZERO_COPY unset"))
      << line;

  fake::reset();
  line = format_zero_copy(
      zero_copy_case(recorded_verbs(true), [] { fake::fail_next_send_completion(IBV_WC_LOC_PROT_ERR); })[0]);
  EXPECT_TRUE(has(line, "FAIL " + kZeroCopyLine + "zero-copy sends of 512 KiB failed: rank ")) << line;
  EXPECT_TRUE(has(line, "a send on rdma_en0 failed: IBV_WC_LOC_PROT_ERR")) << line;

  fake::Options one_mr;
  one_mr.max_mrs = 1;  // the link's own registration only
  fake::reset(one_mr);
  line = format_zero_copy(zero_copy_case(recorded_verbs(true))[0]);
  EXPECT_TRUE(has(line,
                  "zero-copy sends of 512 KiB failed: rank 0: registering the caller's buffer (2064 KiB): "
                  "ibv_reg_mr on rdma_en0 failed: errno 12"))
      << line;
  EXPECT_TRUE(has(line, "; leave TBCOLL_IB_ZERO_COPY unset")) << line;
}

// The slot follows the ports' largest SEND: 16 KiB below 512 KiB (said so, with the knob that sets such slots);
// below 16 KiB the transport has no slots, so nothing to verify.
TEST(RdmaZeroCopy, TheSlotFollowsThePortsLargestSend) {
  fake::Options below;
  below.max_message_bytes = 256 << 10;
  fake::ScopedFabric fabric(below);
  const ZeroCopyResult small = zero_copy_case(recorded_verbs(true))[0];
  EXPECT_TRUE(small.ok) << small.failure;
  EXPECT_EQ(small.slot_bytes, 16384u);
  EXPECT_EQ(format_zero_copy(small),
            "PASS " + kZeroCopyLine +
                "verified, 4 sends of 16 KiB arrived as sent (16 KiB, not 512 KiB: the link takes no SEND of "
                "512 KiB, its largest is 262144 B; slots of 16 KiB are TBCOLL_IB_SLOT_BYTES=16384); turn them on "
                "with TBCOLL_IB_ZERO_COPY=1 on every rank\n");
  EXPECT_EQ(caller_send_offsets(recorded, 16384, kAccessFlags),
            (std::multiset<size_t>{0, 0, 16384, 16384, 16384, 16384, 49152, 49152}));

  fake::Options frames_only;
  frames_only.max_message_bytes = 4096;
  fake::reset(frames_only);
  const ZeroCopyResult none = zero_copy_case(recorded_verbs(true))[0];
  EXPECT_TRUE(none.skipped) << none.failure;
  const std::string skipped = format_zero_copy(none);
  EXPECT_TRUE(has(skipped, "SKIP " + kZeroCopyLine + "the link takes no SEND of 16 KiB (its largest is 4096 B)"))
      << skipped;
  EXPECT_TRUE(recorded.sends.empty()) << "nothing over a frame was sent";
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
