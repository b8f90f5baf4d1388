// tbcoll-perf under an engine's conditions (perf_engine.h).
#include "benchmarks/perf_engine.h"

#include <chrono>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "platform/platform.h"

namespace tbcoll::bench {

std::string EngineConditions::describe(int world_size) const {
  std::string out = fmt::format("compute {:g} us between calls", compute_us);
  if (skew_us > 0) out += fmt::format(", rank {} late by {:g} us", skew_rank < 0 ? world_size - 1 : skew_rank, skew_us);
  if (background > 0) out += fmt::format(", {} background thread(s) spinning", background);
  return out;
}

BackgroundLoad::BackgroundLoad(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      platform::unbind_from_cpus();  // pinned nowhere: the rank's own pinning (tbcoll-run --bind-to) is not theirs
      volatile uint64_t work = 0;
      while (!stop_.load(std::memory_order_relaxed)) work = work + 1;
    });
  }
}

BackgroundLoad::~BackgroundLoad() {
  stop_.store(true);
  for (std::thread& thread : threads_) thread.join();
}

void compute_for(double us) {
  if (us <= 0) return;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::micro>(us));
  while (Clock::now() < until) {
  }
}

namespace {

double now_us() { return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count(); }

}  // namespace

double clock_offset_us(Communicator& comm) {
  constexpr int kRoundTrips = 64;
  const int n = comm.size();
  std::vector<double> offsets(static_cast<size_t>(n), 0.0);
  for (int peer = 1; peer < n; ++peer) {
    double best_rtt = std::numeric_limits<double>::max(), best = 0, stamp = 0;
    for (int i = 0; i < kRoundTrips; ++i) {
      if (comm.rank() == 0) {
        const double sent = now_us();
        comm.send(&sent, 1, DataType::kFloat64, peer);
        comm.recv(&stamp, 1, DataType::kFloat64, peer);
        const double back = now_us();
        if (back - sent < best_rtt) {
          best_rtt = back - sent;
          best = stamp - (sent + back) / 2;
        }
      } else if (comm.rank() == peer) {
        comm.recv(&stamp, 1, DataType::kFloat64, 0);
        stamp = now_us();
        comm.send(&stamp, 1, DataType::kFloat64, 0);
      }
    }
    offsets[static_cast<size_t>(peer)] = best;
  }
  comm.broadcast(offsets.data(), offsets.data(), offsets.size(), DataType::kFloat64, 0);
  return offsets[static_cast<size_t>(comm.rank())];
}

std::vector<double> after_last_arrival(Communicator& comm, std::vector<double> starts, std::vector<double> ends,
                                       double* per_iteration_us) {
  double first = starts.empty() ? 0 : -starts.front();  // the first arrival: the max of the negated starts
  comm.all_reduce(&first, &first, 1, DataType::kFloat64, ReduceOp::kMax);
  comm.all_reduce(starts.data(), starts.data(), starts.size(), DataType::kFloat64, ReduceOp::kMax);
  comm.all_reduce(ends.data(), ends.data(), ends.size(), DataType::kFloat64, ReduceOp::kMax);
  std::vector<double> times(starts.size());
  for (size_t i = 0; i < times.size(); ++i) times[i] = ends[i] - starts[i];
  *per_iteration_us = times.empty() ? 0 : (ends.back() + first) / static_cast<double>(times.size());
  return times;
}

}  // namespace tbcoll::bench
