// CPU cost of the ibverbs transport's own work per message, on the fake verbs provider: a message posted by one
// endpoint and received by the other, both driven by this thread, so the time is all CPU. The fake's own calls
// (delivery is a copy under a mutex, which real hardware does not charge to the CPU) are timed by the fake and left
// out: transport_ns is the rest per message (both ends: framing, copies in and out, credits, completions, the
// requests), transport_ps_per_B the same per payload byte. Targets: 8 B under 300 ns; at 16 MiB a per-byte cost
// one core can keep up with at 9.4 GB/s plus the reduction. BM_IbverbsRails: the same over two fake devices (two
// cables), large messages striped across them; its counters show the payload bytes each rail carried per message.
//
// The file builds against the transport of a17584a too (with its fake given provider_ns and clear_provider_time,
// and tests/fake_verbs/endpoint_pair.h copied beside it), which is how the before/after comparisons in docs/rdma.md
// were made.
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "common/time.h"
#include "fake_verbs/endpoint_pair.h"
#include "fake_verbs/fake_verbs.h"
#include "tbcoll/transport.hpp"
#include "transports/ibverbs/device.h"
#include "transports/ibverbs/endpoint.h"

namespace tbcoll::ibverbs {
namespace {

using Pair = fake::EndpointPair;

std::unique_ptr<Pair> connect_pair(std::map<std::string, std::string> knobs = {}, fake::Options options = {}) {
  fake::reset(options);
  return fake::connect_endpoint_pair(knobs);
}

double thread_cpu_ns() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e9 + static_cast<double>(now.tv_nsec);
}

// registered: the sender's buffer is registered (Context::register_memory), so large sends go zero-copy.
void exchange(benchmark::State& state, Pair& pair, size_t bytes, bool registered = false) {
  std::vector<uint8_t> out(bytes, 7), in(bytes);
  std::unique_ptr<transport::Registration> registration;
  if (registered) {
    registration = pair.contexts[0]->register_memory(out.data(), bytes);
    if (!registration) state.SkipWithError("the fake did not register the send buffer");
  }
  uint64_t tag = 0;
  fake::clear_provider_time();
  const double cpu_start = thread_cpu_ns();
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ++tag;
    auto recv = pair.endpoints[1]->irecv(in.data(), bytes, {tag, 1});
    auto send = pair.endpoints[0]->isend(out.data(), bytes, {tag, 1});
    for (bool sent = false, received = false; !(sent && received);) {  // both sides progress: credits flow
      sent = sent || send->test();
      received = received || recv->test();
    }
  }
  const double wall_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  const double cpu_ns = thread_cpu_ns() - cpu_start;
  // The fake times its calls by the clock; on a shared machine the thread is also off its CPU now and then, so the
  // fake's share of the wall time is taken from the thread's CPU time.
  const double provider_share = std::min(1.0, fake::provider_ns() / wall_ns);
  const double iterations = static_cast<double>(state.iterations());
  const double transport_ns = cpu_ns * (1 - provider_share) / iterations;
  state.counters["transport_ns"] = transport_ns;
  state.counters["provider_ns"] = cpu_ns * provider_share / iterations;
  if (bytes >= 4096) state.counters["transport_ps_per_B"] = 1000 * transport_ns / static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_IbverbsMessage(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto pair = connect_pair();
  exchange(state, *pair, bytes);
}
BENCHMARK(BM_IbverbsMessage)->Arg(8)->Arg(1024)->Arg(4032)->Arg(65536)->Arg(1 << 20)->Arg(16 << 20);

// The same with the sender's buffer registered and zero-copy on: large messages leave in zero-copy slots, so the
// sender copies nothing (the receiver still copies out of its slots). On UC (Apple's rules, as here) each slot's note
// carries its sum, a pass over the slot on each side; on RC (a permissive device, as in ...RegisteredRc) none.
void BM_IbverbsMessageRegistered(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto pair = connect_pair({{"TBCOLL_IB_ZERO_COPY", "1"}});
  exchange(state, *pair, bytes, /*registered=*/true);
}
BENCHMARK(BM_IbverbsMessageRegistered)->Arg(65536)->Arg(1 << 20)->Arg(16 << 20);

void BM_IbverbsMessageRegisteredRc(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  fake::Options permissive;
  permissive.apple_strict = false;
  auto pair = connect_pair({}, permissive);
  exchange(state, *pair, bytes, /*registered=*/true);
}
BENCHMARK(BM_IbverbsMessageRegisteredRc)->Arg(1 << 20)->Arg(16 << 20);

// Copied, on the same RC device (the baseline of ...RegisteredRc).
void BM_IbverbsMessageRc(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  fake::Options permissive;
  permissive.apple_strict = false;
  auto pair = connect_pair({}, permissive);
  exchange(state, *pair, bytes);
}
BENCHMARK(BM_IbverbsMessageRc)->Arg(1 << 20)->Arg(16 << 20);

// The same with every work request posted alone (TBCOLL_IB_POST_BATCH=1: a doorbell each): what batching saves.
void BM_IbverbsMessageUnbatched(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto pair = connect_pair({{"TBCOLL_IB_POST_BATCH", "1"}});
  exchange(state, *pair, bytes);
}
BENCHMARK(BM_IbverbsMessageUnbatched)->Arg(8)->Arg(65536)->Arg(1 << 20);

// The floor under the transport's CPU per byte: the two copies it cannot avoid (Apple's stack sends only from and
// receives only into registered memory, one SGE, so the sender copies the message into slots and the receiver out
// of them), here of the same message through two 512 KiB slots, with nothing else. transport_ps_per_B of
// BM_IbverbsMessage at the same size, over this, is what the transport costs beyond the copies.
void BM_TwoCopiesFloor(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  constexpr size_t kSlot = 512 * 1024;
  std::vector<uint8_t> out(bytes, 7), in(bytes), slots(2 * kSlot, 0);
  const double cpu_start = thread_cpu_ns();
  for (auto _ : state) {
    for (size_t at = 0, k = 0; at < bytes; at += kSlot, ++k) {
      uint8_t* slot = slots.data() + (k % 2) * kSlot;
      const size_t n = std::min(kSlot, bytes - at);
      std::memcpy(slot, out.data() + at, n);
      std::memcpy(in.data() + at, slot, n);
    }
    benchmark::DoNotOptimize(in.data());
  }
  const double per_message = (thread_cpu_ns() - cpu_start) / static_cast<double>(state.iterations());
  state.counters["copies_ps_per_B"] = 1000 * per_message / static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_TwoCopiesFloor)->Arg(1 << 20)->Arg(16 << 20);

void BM_IbverbsRails(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  fake::Options two_devices;
  two_devices.devices = 2;
  auto pair = connect_pair({{"TBCOLL_IB_RAILS", "2"}}, two_devices);
  auto& endpoint = dynamic_cast<Endpoint&>(*pair->endpoints[0]);
  exchange(state, *pair, bytes);
  for (int rail = 0; rail < endpoint.rails(); ++rail) {
    state.counters["rail" + std::to_string(rail) + "_B/msg"] =
        static_cast<double>(endpoint.rail(rail).payload_sent()) / static_cast<double>(state.iterations());
  }
}
BENCHMARK(BM_IbverbsRails)->Arg(8)->Arg(65536)->Arg(1 << 20);

// How the endpoints' waits pass the time (TBCOLL_IB_SPIN_US): an 8 B round trip in which the peer works
// state.range(1) us before it answers, so the waiter waits that long. Polling always (-1, Apple's default) answers
// at once; napping after 200 us of quiet (the default elsewhere) wakes up to a nap (50 us) late. waited_us is the
// round trip less the peer's work.
void wait_until_done(transport::Request& request) {
  while (!request.test()) request.block(std::chrono::microseconds(1000));
}

void BM_IbverbsPace(benchmark::State& state) {
  const std::string spin = std::to_string(state.range(0));
  const auto work = std::chrono::microseconds(state.range(1));
  auto pair = connect_pair({{"TBCOLL_IB_SPIN_US", spin}});
  uint64_t ping = 0, pong = 0;
  std::thread peer([&] {  // rank 1: takes a ping, works, answers
    for (uint64_t tag = 1;; ++tag) {
      uint64_t got = 0;
      auto recv = pair->endpoints[1]->irecv(&got, sizeof(got), {tag, 1});
      wait_until_done(*recv);
      if (got == ~uint64_t{0}) return;
      const auto until = std::chrono::steady_clock::now() + work;
      while (std::chrono::steady_clock::now() < until) {
      }
      auto send = pair->endpoints[1]->isend(&got, sizeof(got), {tag, 2});
      wait_until_done(*send);
    }
  });
  uint64_t tag = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ++tag;
    ping = tag;
    auto recv = pair->endpoints[0]->irecv(&pong, sizeof(pong), {tag, 2});
    auto send = pair->endpoints[0]->isend(&ping, sizeof(ping), {tag, 1});
    wait_until_done(*send);
    wait_until_done(*recv);
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  ping = ~uint64_t{0};
  auto last = pair->endpoints[0]->isend(&ping, sizeof(ping), {tag + 1, 1});
  wait_until_done(*last);
  peer.join();
  state.counters["waited_us"] = us / static_cast<double>(state.iterations()) - static_cast<double>(work.count());
}
BENCHMARK(BM_IbverbsPace)->Args({-1, 300})->Args({200, 300})->Args({-1, 0})->Args({200, 0})->UseRealTime();

}  // namespace
}  // namespace tbcoll::ibverbs
