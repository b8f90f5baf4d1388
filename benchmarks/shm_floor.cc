// Raw shared-memory floors between ranks 0 and 1 (see pingpong.h): no tbcoll code on the measured path.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "benchmarks/pingpong.h"

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
    const std::string name = "/tbcoll-floor-" + std::to_string(pid);
    for (int turn = 0; turn < 2; ++turn) {
      if (rank == turn) {
        int fd = turn == 0 ? shm_open(name.c_str(), O_CREAT | O_RDWR, 0600) : shm_open(name.c_str(), O_RDWR, 0600);
        if (fd < 0 || (turn == 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0)) {
          throw IoError("shm floor: cannot create " + name + ": " + strerror(errno));
        }
        void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (at == MAP_FAILED) throw IoError("shm floor: cannot map " + name + ": " + strerror(errno));
        base_ = static_cast<uint8_t*>(at);
      }
      comm.barrier();
    }
    if (rank == 0) shm_unlink(name.c_str());
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

}  // namespace tbcoll::bench
