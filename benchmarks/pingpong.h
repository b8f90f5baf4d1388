// The raw TCP floor between ranks 0 and 1 of a communicator: plain sockets, no tbcoll protocol, so a
// benchmark run shows the transport's own limits next to the collectives.
#pragma once

#include <chrono>
#include <cstddef>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::bench {

struct PingPongResult {
  int round_trips = 0;
  double one_way_8b_us = 0;           ///< busy-polled, median round trip / 2
  double one_way_1k_us = 0;
  double one_way_8b_blocking_us = 0;  ///< receiver sleeps in poll()
  double stream_gbps = 0;             ///< one stream, rank 0 -> rank 1, 1 MiB buffers, median of 3 runs
  double stream_large_gbps = 0;       ///< the same from and into 64 MiB buffers (DRAM-resident)
  double bidir_gbps = 0;              ///< per direction, both ranks sending and receiving at once (1 MiB buffers)
  double bidir_large_gbps = 0;        ///< the same with 64 MiB buffers: the traffic of a 2-rank all-reduce
  size_t stream_bytes = 0;
};

/// Collective over comm (every rank calls it); only ranks 0 and 1 exchange data. Results valid on rank 0.
/// Every floor throws TimeoutError when the other rank makes no progress for TBCOLL_TIMEOUT seconds.
PingPongResult raw_tcp_floor(Communicator& comm);

/// The deadline of one phase of a floor measurement (TBCOLL_TIMEOUT seconds from now).
class PhaseDeadline {
 public:
  PhaseDeadline();
  void check(const char* what);      // busy loops: reads the clock every 256th call
  void check_now(const char* what);  // after a sleep (poll): reads it every time

 private:
  std::chrono::steady_clock::time_point at_;
  unsigned calls_ = 0;
};

/// One-way time of a cache-line flag hand-off between ranks 0 and 1 through a shared mapping (spinning both
/// sides; mean over many round trips), in microseconds: the floor of any shared-memory collective.
/// Collective over comm; valid on rank 0; 0 if the ranks are not on one host.
double raw_shm_floor_us(Communicator& comm);

/// The hand-written limit of a 2-rank 8 B all-reduce through shared memory: each rank copies its two floats into
/// a line of its own, raises its flag, spins on the peer's, adds (no checks, no protocol). The median over
/// `iterations` of the slower rank's time per call, timed as tbcoll-perf times a call, in microseconds: the
/// fastest of four passes, the flag stored with release or sequentially consistent order, with or without the
/// next call's line taken exclusive as a call ends.
/// Collective over comm (ranks beyond 1 take part in the final reduction only); 0 if ranks 0 and 1 do not share
/// memory.
double raw_shm_all_reduce_us(Communicator& comm, int iterations);

/// The data movement of a 2-rank two-shot all-reduce of `bytes` through shared memory, without the
/// reduction or any protocol: ranks 0 and 1 at once, twice (the reduce-scatter half, then the all-gather
/// half): memcpy bytes/2 of private memory into a double-buffered shared buffer, flag, memcpy the peer's
/// bytes/2 out. Returns bytes / median time, comparable to a 2-rank all-reduce's busbw (valid on rank 0).
double raw_shm_exchange_gbps(Communicator& comm, size_t bytes);

/// The ceiling of moving `bytes` from each of ranks 0 and 1 to the other at once, through shared memory: the
/// producer writes 64 KiB slots of a 4-slot ring with stores only (data born in its cache, as if just computed;
/// no source is read), the consumer only loads them (checking every word; throws IoError on a wrong one). A
/// 2-rank all-reduce must move `bytes` each way between the two cores (the peer's half of the input, then its
/// half of the result; or its whole input), so its busbw cannot exceed this. Returns bytes / median time per
/// direction (valid on rank 0).
double raw_shm_stream_gbps(Communicator& comm, size_t bytes);

}  // namespace tbcoll::bench
