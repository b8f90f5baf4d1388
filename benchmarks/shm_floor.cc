// Raw shared-memory floors between ranks 0 and 1 (see pingpong.h): no tbcoll code on the measured path.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "benchmarks/pingpong.h"
#include "common/copy.h"
#include "platform/platform.h"

namespace tbcoll::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Line {
  std::atomic<uint64_t> value;
};

// A mapping shared by ranks 0 and 1 (nullptr on other ranks): rank 0 creates it, rank 1 opens it, then it is
// unlinked. Collective over comm.
class SharedMapping {
 public:
  SharedMapping(Communicator& comm, size_t bytes) : bytes_(bytes) {
    const int rank = comm.rank();
    int32_t pid = rank == 0 ? static_cast<int32_t>(getpid()) : 0;
    comm.broadcast(&pid, &pid, 1, DataType::kInt32, 0);
    // Named like the transport's segments (platform::shm_name: the owner's pid in it), so the sweep of segments
    // whose owner died (transports/shm/stale_segments.h: tbcoll-run, the next set-up) removes it if we are killed.
    const std::string name = platform::shm_name(static_cast<int>(pid), 0xf100f);
    try {
      for (int turn = 0; turn < 2; ++turn) {
        if (rank == turn) {
          int fd = turn == 0 ? platform::shm_create(name) : platform::shm_open_existing(name);
          if (fd < 0 || (turn == 0 && platform::shm_reserve(fd, bytes) != 0)) {
            throw IoError("shm floor: cannot create " + name + ": " + strerror(errno));
          }
          void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          close(fd);
          if (at == MAP_FAILED) throw IoError("shm floor: cannot map " + name + ": " + strerror(errno));
          base_ = static_cast<uint8_t*>(at);
        }
        comm.barrier();
      }
    } catch (...) {
      if (rank == 0) platform::shm_remove(name);
      if (base_ != nullptr) munmap(base_, bytes_);
      throw;
    }
    if (rank == 0) platform::shm_remove(name);
  }
  ~SharedMapping() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  uint8_t* base() const { return base_; }

 private:
  uint8_t* base_ = nullptr;
  size_t bytes_;
};

// Whether every 64-bit word of a 64 KiB slot is `want`, reading with loads only: one AVX-512 load per cache line
// when the CPU has it, so the out-of-order window holds many lines in flight (with 8-byte loads the cross-core
// stream measured 8.4 GB/s here, with 64-byte loads 11.6).
#if defined(__x86_64__)
__attribute__((target("avx512f"))) bool slot_is_avx512(const uint64_t* words, size_t n, uint64_t want) {
  const __m512i w = _mm512_set1_epi64(static_cast<long long>(want));
  __m512i a = _mm512_setzero_si512(), b = a;
  for (size_t i = 0; i < n; i += 16) {
    a = _mm512_or_si512(a, _mm512_xor_si512(_mm512_loadu_si512(words + i), w));
    b = _mm512_or_si512(b, _mm512_xor_si512(_mm512_loadu_si512(words + i + 8), w));
  }
  return _mm512_test_epi64_mask(_mm512_or_si512(a, b), _mm512_or_si512(a, b)) == 0;
}
#endif

bool slot_is(const uint64_t* words, size_t n, uint64_t want) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return slot_is_avx512(words, n, want);
#endif
  uint64_t differs[8] = {};
  for (size_t i = 0; i < n; i += 8) {
    for (size_t u = 0; u < 8; ++u) differs[u] |= words[i + u] ^ want;
  }
  uint64_t any = 0;
  for (uint64_t d : differs) any |= d;
  return any == 0;
}

void wait_at_least(const std::atomic<uint64_t>& value, uint64_t target, PhaseDeadline& deadline) {
  while (value.load(std::memory_order_acquire) < target) deadline.check("the other rank's flag");
}

}  // namespace

double raw_shm_floor_us(Communicator& comm) {
  SharedMapping shared(comm, 4096);
  double one_way_us = 0;
  if (shared.base() != nullptr) {
    auto* lines = reinterpret_cast<Line*>(shared.base());
    const uint64_t trips = 200000;
    std::atomic<uint64_t>& ping = lines[0].value;
    std::atomic<uint64_t>& pong = lines[1].value;
    PhaseDeadline deadline;
    auto start = Clock::now();
    for (uint64_t i = 1; i <= trips; ++i) {
      if (comm.rank() == 0) {
        ping.store(i, std::memory_order_release);
        wait_at_least(pong, i, deadline);
      } else {
        wait_at_least(ping, i, deadline);
        pong.store(i, std::memory_order_release);
      }
    }
    one_way_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / trips / 2;
  }
  comm.barrier();
  return one_way_us;
}

double raw_shm_all_reduce_us(Communicator& comm, int iterations) {
  SharedMapping shared(comm, 4096);
  // Per rank two lines, used in turn (call k's in line k & 1): a rank rewrites a line two calls later, after it
  // saw the peer's input of the call in between, which the peer publishes only once it read this rank's.
  struct alignas(64) Slot {
    std::atomic<uint64_t> call;
    float value[2];
  };
  auto* slots = reinterpret_cast<Slot*>(shared.base());
  const int me = comm.rank(), peer = 1 - me;
  const float input[2] = {static_cast<float>(me + 1), 0.5f};
  uint64_t k = 0;
  // One pass of `iterations` calls, the flag stored with `order`, and with `take_next` the next call's line taken
  // exclusive (prefetchw) as a call ends: the median of the slower rank's times.
  auto pass = [&](std::memory_order order, bool take_next) {
    std::vector<double> times(static_cast<size_t>(iterations), 0.0);
    if (shared.base() != nullptr) {
      float result[2] = {};
      PhaseDeadline deadline;
      for (int i = 0; i < iterations; ++i) {
        ++k;
        auto start = Clock::now();
        Slot& mine = slots[2 * me + (k & 1)];
        Slot& theirs = slots[2 * peer + (k & 1)];
        std::memcpy(mine.value, input, sizeof(input));
        mine.call.store(k, order);
        wait_at_least(theirs.call, k, deadline);
        for (int e = 0; e < 2; ++e) result[e] = input[e] + theirs.value[e];
        if (take_next) take_exclusive(&slots[2 * me + ((k + 1) & 1)], sizeof(Slot));
        times[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      }
      if (result[0] != 3.0f || result[1] != 1.0f) throw IoError("shm all-reduce floor: a wrong sum");
    }
    // As tbcoll-perf times a call: per iteration the slower rank's time, then the median.
    comm.all_reduce(times.data(), times.data(), times.size(), DataType::kFloat64, ReduceOp::kMax);
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
  };
  // Which way hands the line over sooner depends on the machine: a sequentially consistent store waits for the
  // line's ownership before polling the peer's, so the peer's polling does not pull the line back meanwhile; taking
  // the next call's line exclusive early moves the invalidation of the peer's copy off the next call's path, but
  // can pull the line from a peer already polling it. The limit is the fastest of the four.
  double best = std::numeric_limits<double>::infinity();
  for (std::memory_order order : {std::memory_order_release, std::memory_order_seq_cst}) {
    for (bool take_next : {false, true}) best = std::min(best, pass(order, take_next));
  }
  return shared.base() != nullptr ? best : 0;
}

double raw_shm_exchange_gbps(Communicator& comm, size_t bytes) {
  const size_t half = std::max<size_t>(64, bytes / 2 / 64 * 64);
  SharedMapping shared(comm, 4096 + 4 * half);
  double gbps = 0;
  if (shared.base() != nullptr) {
    const int me = comm.rank(), peer = 1 - me;
    auto* flags = reinterpret_cast<Line*>(shared.base());
    // Double-buffered per rank (buffer step & 1), so one flag per step suffices: a rank rewrites a buffer two
    // steps later, after it saw the peer's flag of the step in between, which the peer sets after its read.
    auto buffer = [&](int rank, uint64_t step) { return shared.base() + 4096 + (2 * rank + (step & 1)) * half; };
    std::vector<uint8_t> source(half, static_cast<uint8_t>(me + 1)), sink(half, 0);
    const int iterations = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 5, 2000));
    std::vector<double> times;
    PhaseDeadline deadline;
    uint64_t step = 0;
    for (int i = 0; i < iterations; ++i) {
      auto start = Clock::now();
      for (int phase = 0; phase < 2; ++phase) {  // the reduce-scatter half, then the all-gather half
        ++step;
        std::memcpy(buffer(me, step), source.data(), half);
        flags[me].value.store(step, std::memory_order_release);
        wait_at_least(flags[peer].value, step, deadline);
        std::memcpy(sink.data(), buffer(peer, step), half);
      }
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    gbps = static_cast<double>(bytes) / times[times.size() / 2] / 1e9;
  }
  comm.barrier();
  return gbps;
}

double raw_shm_stream_gbps(Communicator& comm, size_t bytes) {
  constexpr size_t kSlot = 64 << 10, kSlots = 4;
  const size_t slots_per_run = std::max<size_t>(1, (bytes + kSlot - 1) / kSlot);
  // Per rank: a line of "produced" and a line of "consumed" (counts of slots), then its ring.
  SharedMapping shared(comm, 4096 + 2 * kSlots * kSlot);
  double gbps = 0;
  if (shared.base() != nullptr) {
    const int me = comm.rank(), peer = 1 - me;
    auto* lines = reinterpret_cast<Line*>(shared.base());
    std::atomic<uint64_t>& produced = lines[2 * me].value;
    std::atomic<uint64_t>& consumed_by_peer = lines[2 * peer + 1].value;
    std::atomic<uint64_t>& peer_produced = lines[2 * peer].value;
    std::atomic<uint64_t>& consumed = lines[2 * me + 1].value;
    auto slot = [&](int rank, uint64_t index) {
      return shared.base() + 4096 + (static_cast<size_t>(rank) * kSlots + index % kSlots) * kSlot;
    };
    // Slot n holds the byte (n * 2 + rank) & 0xff everywhere, so a stale or torn slot is caught.
    auto pattern = [](uint64_t n, int rank) { return static_cast<uint8_t>(n * 2 + static_cast<uint64_t>(rank)); };
    const int iterations = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 5, 2000));
    std::vector<double> times;
    PhaseDeadline deadline;
    uint64_t written = 0, read = 0;
    for (int i = 0; i < iterations; ++i) {
      auto start = Clock::now();
      const uint64_t write_end = written + slots_per_run, read_end = read + slots_per_run;
      while (written < write_end || read < read_end) {
        bool moved = false;
        if (written < write_end && written < consumed_by_peer.load(std::memory_order_acquire) + kSlots) {
          std::memset(slot(me, written), pattern(written, me), kSlot);
          produced.store(++written, std::memory_order_release);
          moved = true;
        }
        if (read < read_end && read < peer_produced.load(std::memory_order_acquire)) {
          const uint64_t want = 0x0101010101010101ull * pattern(read, peer);
          if (!slot_is(reinterpret_cast<const uint64_t*>(slot(peer, read)), kSlot / 8, want)) throw IoError("shm stream floor: rank " + std::to_string(me) + " read a wrong slot");
          consumed.store(++read, std::memory_order_release);
          moved = true;
        }
        if (!moved) deadline.check("the other rank's slots");
      }
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    gbps = static_cast<double>(slots_per_run * kSlot) / times[times.size() / 2] / 1e9;
  }
  comm.barrier();
  return gbps;
}

}  // namespace tbcoll::bench
