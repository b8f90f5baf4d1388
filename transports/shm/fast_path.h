// The shm transport's whole-collective fast paths, for communicators whose ranks all share one host.
//
// One-shot all-reduce (small inputs), through each rank's double-buffered collective slot:
//   call k, slot b = k & 1:
//     copy send into my slot b; publish seq = k (release; wake sleeping readers)
//     for each peer: wait until its slot b holds call k (acquire); check its signature
//     recv = slot_0 op slot_1 op ... op slot_(n-1)     (rank order: bitwise identical everywhere)
//   Slot b is free again at call k+2 without any acknowledgement: a peer publishes its input for k+1 only
//   after finishing call k, and we wait for every peer's k+1 input before starting k+2.
//   Cost: one copy in, one cache-line hand-off per peer for inputs up to 32 bytes. Inputs up to 3.5 KiB go
//   through flagged lines instead (flagged.cc, layout in segment.h): one hand-off per peer for up to 48 bytes,
//   and the lines of longer inputs are fetched in parallel.
//
// Two-shot all-reduce (medium and large inputs), through staging buffers in the segment, in rounds g of
// world_size slices (slice p of a round is reduced by rank p):
//   A(g) copy the peers' slices of my input into stage[g & 1]; publish input = g
//   B    wait for every peer's reduced >= g-1; copy their slices of round g-1 from result[(g-1) & 1] into recv
//   C(g) wait for every peer's input >= g; recv slice = input_0 op ... op input_(n-1) (mine read in place);
//        copy it to result[g & 1]; publish reduced = g
//   and after the last round, B once more. B overlaps the wait for the peers' reductions with my next copy.
//   Buffers g & 1 are free again at round g+2 without acknowledgements: before A(g+2), in round g+1, I waited
//   in B for every peer's reduced(g), which it publishes after reading stage(g) in C(g); before writing
//   result(g+2) in C, I waited for every peer's input(g+2), which it publishes after copying result(g) out in
//   B (during round g+1, or at the end of the call that round g belonged to).
//   Per rank and byte: one copy in, one reduction, one copy of the result to the segment and one copy out,
//   all on cache-resident slices; no system calls.
//
// Direct collectives (large inputs), where cross-memory attach (platform::read_process_memory: Linux) is
// permitted: ranks post their buffer addresses and read each other's buffers in place, with no copy through the
// segment.
//   all_reduce: post -> each rank reduces its slice r of the n inputs in rank order, chunk by chunk (peer
//               chunks read into a cache-resident scratch), into recv -> post "reduced" -> read every peer's
//               final slice into recv -> post "done" -> wait until every peer is done with our buffers.
//               Per rank: reads (n-1)/n of the input from peers twice (inputs, results), no other copy.
//   all_gather: post -> read every peer's block into recv -> post "done" -> wait for every peer's "done".
//   broadcast:  post -> non-roots read the root's buffer into recv -> post "done" -> wait for every "done".
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/copy.h"
#include "reduce/reduce.h"
#include "tbcoll/collective_fast_path.hpp"
#include "tbcoll/transport.hpp"
#include "transports/shm/announce.h"
#include "transports/shm/prefetch_learner.h"
#include "transports/shm/process_watch.h"
#include "transports/shm/segment.h"

namespace tbcoll::shm {

/// The sizes where the tuner picks each fast path by default (TBCOLL_ONESHOT_MAX_BYTES, TBCOLL_CMA_*,
/// TBCOLL_DIRECT_MAX_BYTES), read by the context from the communicator's knobs.
struct FastPathTuning {
  size_t one_shot_max_bytes = 2048;      ///< all_reduce and all_gather (gathered bytes) up to this: one-shot
  size_t two_shot_above_bytes = 32768;   ///< all_reduce above this (the direct exchange's limit): two-shot
  size_t cma_min_bytes = 4 << 20;        ///< all_reduce in [cma_min, cma_max): read peers' buffers in place
  size_t cma_max_bytes = 32 << 20;
  size_t cma_gather_min_bytes = 16384;   ///< all_gather (gathered bytes) and broadcast from this: in place
};

class FastPath final : public transport::CollectiveFastPath {
 public:
  /// areas[r] / headers[r]: rank r's collective area and segment header as mapped here (own included).
  /// direct: every rank can read every other rank's memory (decided jointly at set-up).
  FastPath(int rank, std::vector<CollectiveArea*> areas, std::vector<SegmentHeader*> headers, bool direct,
           const FastPathTuning& tuning);
  ~FastPath() override;

  /// The algorithms of any shm fast path, sizes unset (Device::fast_path_algorithms).
  static std::vector<transport::FastPathAlgorithm> catalogue();

  const std::vector<transport::FastPathAlgorithm>& algorithms() const override { return algorithms_; }
  void run(size_t index, const transport::CollectiveArgs& args) override;
  /// The 2-rank one-shot all_reduce of up to one flagged line is prepared (PairLine); other calls run run().
  std::unique_ptr<transport::PreparedFastCall> prepare(size_t index, const transport::CollectiveArgs& args) override;

  void all_reduce_one_shot(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           transport::Tag tag, Deadline deadline, std::chrono::microseconds spin);
  void all_gather_one_shot(const void* send, void* recv, size_t bytes_per_rank, transport::Tag tag, Deadline deadline,
                           std::chrono::microseconds spin);
  void all_reduce_two_shot(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           transport::Tag tag, Deadline deadline, std::chrono::microseconds spin);
  void all_reduce_direct(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, transport::Tag tag,
                         Deadline deadline, std::chrono::microseconds spin);
  void all_gather_direct(const void* send, void* recv, size_t bytes_per_rank, transport::Tag tag, Deadline deadline,
                         std::chrono::microseconds spin);
  void broadcast_direct(const void* send, void* recv, size_t bytes, int root, transport::Tag tag, Deadline deadline,
                        std::chrono::microseconds spin);

  // Tells peers which call this rank is in and how it runs it (see CallAnnounce); for fast-path calls, after
  // checking that no peer sent a message of an earlier call this rank never received (check_unreceived).
  void announce(const transport::Tag& tag) override { announce(tag, kPointToPoint); }
  void announce(const transport::Tag& tag, uint64_t algorithm) {
    // Fast paths never read the message queues, so a message of an earlier call nobody received (ranks that
    // named different broadcast roots) would go unnoticed: look first. Point-to-point schedules need not: their
    // receives meet such a message, and there the extra read of a queue the peer keeps writing cost small
    // broadcasts 0.13 us.
    for (int p = 0; p < size_ && algorithm != kPointToPoint; ++p) {
      if (p != rank_) check_unreceived(*queue_at(headers_[p], rank_), rank_, p, tag);
    }
    publish_announcement(tag, algorithm);
  }
  void publish_announcement(const transport::Tag& tag, uint64_t algorithm) {
    announce_call(areas_[rank_]->call, tag, algorithm);
    current_algorithm_ = algorithm;
  }

  /// Reads bytes at a peer's address into local memory (platform::read_process_memory); throws IoError.
  static void read_peer(int pid, uint64_t remote, void* local, size_t bytes, int rank, int peer);

 private:
  struct Wait {
    Deadline deadline;
    std::chrono::microseconds spin;
    const transport::Tag* tag;  // to spot a peer stuck in another call; may be null
    long sleep_us = 1000;       // longest sleep_on sleep: what a missed wake may cost
  };
  // Waits until counter >= target: spin, then sleep_on (sleepers announces it to the writer).
  void wait_for(const std::atomic<uint64_t>& counter, uint64_t target, std::atomic<uint32_t>* sleepers, int peer,
                const Wait& wait, const char* what);
  void check_peer(int peer);

  size_t two_shot_slice_bytes() const;
  void prepare_next_slot(size_t bytes);
  // A flagged call k begins: at a block's edge the prefetch learner reads the clock (and may decide, said at
  // TBCOLL_DEBUG=TRACE).
  void start_flagged(uint64_t k) {
    if (prefetch_.needs_clock(k)) start_flagged_block(k);
  }
  void start_flagged_block(uint64_t k);
  void log_prefetch_choice() const;
  // A flagged call k of `lines` lines ended: takes the next call's lines exclusive where the learner says so.
  void end_flagged(uint64_t k, size_t lines) {
    // Safe: every peer finished reading the next call's lines (those of call k - 1) before publishing the input
    // of call k that we just consumed; prefetchw changes their cache state, not their data.
    if (lines <= kPrefetchLines && prefetch_.prefetched(k + 1)) {
      take_exclusive(&areas_[rank_]->flagged[(k + 1) & 1], lines * sizeof(FlaggedLine));
    }
  }
  // Calls of up to this many lines take the next call's lines exclusive where the learner says so: a peer already
  // polling all of them would pull each back shared, and many such round trips cost more than they save.
  static constexpr size_t kPrefetchLines = 8;
  // One-shot calls: copy send into this call's slot, publish it, wait for every peer's; returns the slot index.
  int exchange_slots(const void* send, size_t bytes, const transport::Tag& tag, Deadline deadline,
                     std::chrono::microseconds spin);
  void check_peer_call(int peer, const transport::Tag& tag);
  // Flagged-line one-shot calls (flagged.cc): publish my input for call k and wait for every peer's.
  uint64_t exchange_flagged(const void* send, size_t bytes, const transport::Tag& tag, const Wait& wait);
  void check_flagged_meta(int peer, const FlaggedSlot& theirs, const transport::Tag& tag);
  void read_flagged(int peer, uint64_t k, void* out, size_t bytes);
  void all_reduce_flagged(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                          const transport::Tag& tag, const Wait& wait);
  void all_gather_flagged(const void* send, void* recv, size_t bytes_per_rank, const transport::Tag& tag,
                          const Wait& wait);
  // The 2-rank all_reduce whose input and signature fit one flagged line, tensor parallelism's common call: one
  // line each way, reduced where it lies. What it needs from the call's shape, decided once (a prepared call
  // keeps it; the general path makes it per call).
  struct PairLine {
    int peer;
    CollectiveArea* mine;
    CollectiveArea* theirs;
    const Queue* from_peer;  // the peer's queue to this rank (announce's look, for one peer)
    reduce::Kernel kernel;
    size_t count;
    size_t bytes;
    DataType dtype;
    bool average;
  };
  friend class PreparedPairLine;
  PairLine pair_line(size_t count, DataType dtype, ReduceOp op);
  // prepared: a prepared call's arguments (their watch, spin_yield and deadline are put in place when the wait
  // needs them); null when called from run(), which did that already.
  void all_reduce_pair_line(const PairLine& plan, const void* send, void* recv, const transport::Tag& tag,
                            const Wait& wait, const transport::CollectiveArgs* prepared = nullptr);
  // Runs body with the call's spin_yield and watch in place for wait_for (the watch cleared as it returns or
  // throws: it refers to the caller's callable).
  template <typename Body>
  void with_call(const transport::CollectiveArgs& args, Body&& body) {
    spin_yield_ = args.spin_yield;
    wait_policy_ = args.wait;
    watch_ = args.watch;
    struct Unwatch {
      transport::Watch& watch;
      ~Unwatch() { watch = {}; }
    } unwatch{watch_};
    body();
  }
  // Direct calls: posts our addresses for call k, waits for every peer's (checking signatures), runs body(k),
  // then waits until every peer finished reading; fails if a peer abandoned the call meanwhile.
  void direct_call(const void* send, void* recv, size_t bytes, const transport::Tag& tag, const Wait& wait,
                   const std::function<void(uint64_t)>& body);
  void all_reduce_direct_body(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                              const Wait& wait, uint64_t k);
  // Stores counter = value (seq_cst, so it cannot pass the load of sleepers) and wakes the readers asleep on it.
  void publish(std::atomic<uint64_t>& counter, uint64_t value, const std::atomic<uint32_t>& sleepers);
  // Two-shot: waits for every peer's input of round g and checks that it belongs to the same call.
  void wait_two_shot_inputs(uint64_t g, const transport::Tag& tag, size_t bytes, const Wait& wait);
  void wait_all(std::atomic<uint64_t> DirectControl::*counter, uint64_t k, const Wait& wait, const char* what);

  // What algorithms()[i] runs.
  enum class Kind { kAllReduceOneShot, kAllGatherOneShot, kAllReduceDirect, kAllGatherDirect, kBroadcastDirect,
                    kAllReduceTwoShot };

  void run_kind(Kind kind, const transport::CollectiveArgs& args);

  int rank_;
  int size_;
  std::vector<transport::FastPathAlgorithm> algorithms_;
  std::vector<Kind> kinds_;  // by algorithms_ index
  std::vector<CollectiveArea*> areas_;
  std::vector<SegmentHeader*> headers_;
  std::vector<ProcessWatch> processes_;  // by rank
  bool direct_;
  transport::SpinYield spin_yield_ = transport::SpinYield::kNowAndThen;  // the running call's spin_yield
  transport::Watch watch_;  // the running call's CollectiveArgs::watch, while it runs
  transport::WaitPolicy* wait_policy_ = nullptr;  // the running call's CollectiveArgs::wait
  uint64_t calls_ = 0;
  uint64_t current_algorithm_ = kPointToPoint;  // of the call this rank announced last
  uint64_t direct_calls_ = 0;
  uint64_t two_shot_rounds_ = 0;
  PrefetchLearner prefetch_;
  std::vector<uint8_t> scratch_;
  std::vector<const uint8_t*> inputs_;  // per rank, for the flagged all_reduce
  // The reduction kernel of the last (dtype, op) reduced: a repeated call does not look it up again.
  reduce::Kernel kernel_for(DataType dtype, ReduceOp op) {
    if (dtype != kernel_dtype_ || op != kernel_op_ || kernel_ == nullptr) {
      kernel_ = reduce::kernel(dtype, op);
      kernel_dtype_ = dtype;
      kernel_op_ = op;
    }
    return kernel_;
  }
  reduce::Kernel kernel_ = nullptr;
  DataType kernel_dtype_ = DataType::kFloat32;
  ReduceOp kernel_op_ = ReduceOp::kSum;
};

}  // namespace tbcoll::shm
