// tbcoll-perf's calls and timed batches (perf_calls.h).
#include "benchmarks/perf_calls.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>

namespace tbcoll::bench {
namespace {

CheckSpec check_spec(const Options& o, int world_size) {
  return {o.kind, o.dtype, o.op, world_size, o.root};
}

void fill(const Options& o, int rank, int world_size, Buffers& b, bool in_place) {
  const size_t es = dtype_size(o.dtype);
  fill_input(check_spec(o, world_size), rank, b.send.data(), b.send.size() / es);
  std::memset(b.recv.data(), 0, b.recv.size());
  // reduce_scatter and scatter work in place inside send
  if (in_place && o.kind != Collective::kReduceScatter && o.kind != Collective::kScatter) {
    size_t offset = o.kind == Collective::kAllGather || o.kind == Collective::kGather ? rank * b.send.size() : 0;
    std::memcpy(b.recv.data() + offset, b.send.data(), b.send.size());
  }
}

long long count_wrong(const Options& o, int rank, int n, const Buffers& b, size_t count, bool in_place) {
  // reduce_scatter in place leaves this rank's block in its block of send.
  const uint8_t* out = b.recv.data();
  if ((o.kind == Collective::kReduceScatter || (o.kind == Collective::kScatter && rank == o.root)) && in_place) {
    out = b.send.data() + rank * count * dtype_size(o.dtype);
  }
  return bench::count_wrong(check_spec(o, n), rank, out, count);
}

// tbcoll-perf's own tests (TBCOLL_PERF_FAULT=skip_repeats): the f32 all_reduce of each count and layout runs on
// its first call only and does nothing on the later ones (the benchmark's own reductions, of i64 and f64, go
// through), so a benchmark whose timed calls stop working is seen to report WRONG rather than "0 OK".
bool skipped_by_fault(const Options& o, size_t count, bool in_place) {
  static const bool skip_repeats = [] {
    const char* fault = std::getenv("TBCOLL_PERF_FAULT");
    return fault != nullptr && std::string(fault) == "skip_repeats";
  }();
  if (!skip_repeats || o.kind != Collective::kAllReduce || o.dtype != DataType::kFloat32) return false;
  static std::set<std::pair<size_t, bool>> seen;  // (count, in place) whose first call ran
  return !seen.insert({count, in_place}).second;
}

}  // namespace

void call(Communicator& comm, const Options& o, Buffers& b, size_t count, bool in_place) {
  if (skipped_by_fault(o, count, in_place)) return;
  // A rank's block in a buffer of all ranks' (worked out only by the calls that need it: it is timed too).
  auto block = [&](int rank) { return static_cast<size_t>(rank) * count * dtype_size(o.dtype); };
  switch (o.kind) {  // an enum, not the name: string compares would be timed with the call
    case Collective::kAllReduce:
      comm.all_reduce(in_place ? b.recv.data() : b.send.data(), b.recv.data(), count, o.dtype, o.op);
      break;
    case Collective::kAllGather:
      comm.all_gather(in_place ? b.recv.data() + block(comm.rank()) : b.send.data(), b.recv.data(), count,
                      o.dtype);
      break;
    case Collective::kReduceScatter:
      // send holds size * count elements; in place, the result lands in this rank's block of send.
      comm.reduce_scatter(b.send.data(), in_place ? b.send.data() + block(comm.rank()) : b.recv.data(), count,
                          o.dtype, o.op);
      break;
    case Collective::kReduce:
      comm.reduce(in_place ? b.recv.data() : b.send.data(), b.recv.data(), count, o.dtype, o.op, o.root);
      break;
    case Collective::kBroadcast:
      comm.broadcast(in_place ? b.recv.data() : b.send.data(), b.recv.data(), count, o.dtype, o.root);
      break;
    case Collective::kAllToAll:
      if (o.per_peer_counts) {
        comm.all_to_allv(in_place ? b.recv.data() : b.send.data(), b.recv.data(), b.counts.data(), b.displs.data(),
                         b.counts.data(), b.displs.data(), o.dtype);
      } else {
        comm.all_to_all(in_place ? b.recv.data() : b.send.data(), b.recv.data(), count, o.dtype);
      }
      break;
    case Collective::kGather:  // in place: the root's block already in its place in recv
      comm.gather(in_place && comm.rank() == o.root ? b.recv.data() + block(o.root) : b.send.data(),
                  b.recv.data(), count, o.dtype, o.root);
      break;
    case Collective::kScatter:  // in place: the root's block stays in send
      comm.scatter(b.send.data(), in_place && comm.rank() == o.root ? b.send.data() + block(o.root)
                                                                      : b.recv.data(), count, o.dtype, o.root);
      break;
  }
}

bool is_reduction(const std::string& collective) {
  return collective == "all_reduce" || collective == "reduce_scatter" || collective == "reduce";
}

bool sized_per_block(const Options& o) {
  return o.collective == "all_gather" || o.collective == "reduce_scatter" || o.kind == Collective::kAllToAll ||
         o.kind == Collective::kGather || o.kind == Collective::kScatter;
}

int iterations_for(const Options& o, size_t bytes) {
  if (o.iterations > 0) return o.iterations;
  const double scaled = static_cast<double>(size_t{64} << 20) / static_cast<double>(std::max<size_t>(bytes, 1));
  return static_cast<int>(std::clamp(scaled, 20.0, 5000.0));
}

int warmup_for(const Options& o, size_t bytes) {
  if (o.warmup >= 0) return o.warmup;
  return std::clamp(iterations_for(o, bytes) / 10, 5, 100);
}

Measured measure(Communicator& comm, const Options& o, Buffers& b, size_t count, bool in_place, int iterations,
                 bool check_first) {
  // Every rank decides at the same call, so every rank leaves the warm-up loop below after as many.
  const size_t bytes = count * dtype_size(o.dtype) * (sized_per_block(o) ? static_cast<size_t>(comm.size()) : 1);
  if (iterations < 1) iterations = iterations_for(o, bytes);
  Measured m;
  fill(o, comm.rank(), comm.size(), b, in_place);
  if (!o.check) m.wrong = -1;
  if (check_first && o.check) {
    call(comm, o, b, count, in_place);
    long long wrong = count_wrong(o, comm.rank(), comm.size(), b, count, in_place);
    comm.all_reduce(&wrong, &m.wrong, 1, DataType::kInt64, ReduceOp::kSum);
  }
  const int warmup = warmup_for(o, bytes);
  const int late = o.engine.skew_rank < 0 ? comm.size() - 1 : o.engine.skew_rank;
  const double work_us = o.engine.compute_us + (comm.rank() == late ? o.engine.skew_us : 0);
  for (int i = 0; i < warmup; ++i) {
    compute_for(work_us);
    call(comm, o, b, count, in_place);
  }
  for (int i = 0; i < 10000 && comm.explain(o.collective, bytes).measuring; ++i) call(comm, o, b, count, in_place);
  // Out of place, the timed calls must produce the result again: recv is cleared first (outside the timing) and
  // checked after the last one, so calls that stopped working cannot hide behind the first one's result. (In
  // place, every call feeds the next: only the first is checked.)
  if (!in_place) std::memset(b.recv.data(), 0, b.recv.size());
  std::vector<double> times(static_cast<size_t>(iterations));
  std::vector<double> ends;
  if (o.engine.active()) ends.resize(times.size());
  auto now_us = [&o] {
    return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count() - o.clock_offset_us;
  };
  comm.barrier();
  for (int i = 0; i < iterations; ++i) {
    if (o.engine.active()) {  // starts, then ends, on rank 0's clock
      compute_for(work_us);
      times[i] = now_us();
      call(comm, o, b, count, in_place);
      ends[i] = now_us();
      continue;
    }
    auto start = Clock::now();
    call(comm, o, b, count, in_place);
    times[i] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  double per_iteration_us = 0;
  if (o.engine.active()) times = after_last_arrival(comm, std::move(times), std::move(ends), &per_iteration_us);
  if (!in_place && o.check) {
    long long timed_wrong = count_wrong(o, comm.rank(), comm.size(), b, count, in_place), all = 0;
    comm.all_reduce(&timed_wrong, &all, 1, DataType::kInt64, ReduceOp::kSum);
    m.wrong += all;
  }
  // Per iteration, the slowest rank's time: a collective is done when the last rank is done.
  if (!o.engine.active()) comm.all_reduce(times.data(), times.data(), times.size(), DataType::kFloat64, ReduceOp::kMax);
  double sum = 0;
  for (double t : times) sum += t;
  m.mean_us = sum / times.size();
  m.per_iteration_us = per_iteration_us;
  // The median; of an even count, the mean of the two middle values.
  const size_t mid = times.size() / 2;
  std::nth_element(times.begin(), times.begin() + mid, times.end());
  m.median_us = times[mid];
  if (times.size() % 2 == 0) m.median_us = (m.median_us + *std::max_element(times.begin(), times.begin() + mid)) / 2;
  return m;
}

void size_buffers(const Options& o, int world_size, size_t count, Buffers& b) {
  const size_t es = dtype_size(o.dtype);
  const bool whole_send = o.collective == "reduce_scatter" || o.kind == Collective::kAllToAll ||
                          o.kind == Collective::kScatter;
  const bool whole_recv = o.collective == "all_gather" || o.kind == Collective::kAllToAll ||
                          o.kind == Collective::kGather;
  const size_t n = static_cast<size_t>(world_size);
  b.send.assign(whole_send ? count * es * n : count * es, 0);
  b.recv.assign(whole_recv ? count * es * n : count * es, 0);
  b.counts.clear();
  b.displs.clear();
  for (size_t p = 0; p < n && o.per_peer_counts; ++p) {
    b.counts.push_back(count);
    b.displs.push_back(p * count);
  }
}

}  // namespace tbcoll::bench
