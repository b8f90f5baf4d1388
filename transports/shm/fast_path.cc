#include "transports/shm/fast_path.h"

#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "algorithms/chunking.h"
#include "common/cpu.h"
#include "common/dtype.h"
#include "tbcoll/collective_fast_path.hpp"

namespace tbcoll::shm {

std::vector<transport::FastPathAlgorithm> FastPath::catalogue() {
  std::vector<transport::FastPathAlgorithm> out(6);
  out[0] = {"oneshot", OpKind::kAllReduce, "inputs copied into shared slots, every rank reduces all n: one "
            "cache-line hand-off per peer up to 48 B"};
  out[1] = {"cma", OpKind::kAllReduce, "peers' buffers read in place (cross-memory attach): each rank reduces its "
            "slice, then gathers the rest; no copy through the segment"};
  out[2] = {"twoshot", OpKind::kAllReduce, "slices staged in the segment, each rank reduces its slice of every "
            "input, copies the others' out; pipelined in rounds"};
  out[3] = {"oneshot", OpKind::kAllGather, "blocks copied into shared slots, every rank copies all n out"};
  out[4] = {"cma", OpKind::kAllGather, "every rank reads every peer's block in place (cross-memory attach)"};
  out[5] = {"cma", OpKind::kBroadcast, "every rank reads the root's buffer in place (cross-memory attach)"};
  return out;
}

FastPath::FastPath(int rank, std::vector<CollectiveArea*> areas, std::vector<SegmentHeader*> headers, bool direct,
                   const FastPathTuning& tuning)
    : rank_(rank), size_(static_cast<int>(areas.size())), areas_(std::move(areas)), headers_(std::move(headers)),
      direct_(direct), inputs_(size_) {
  for (int p = 0; p < size_; ++p) processes_.emplace_back(headers_[p]->owner_pid);
  // In the order the tuner asks them: one-shot for small calls, in place where cross-memory attach works,
  // then two-shot above the direct exchange's sizes.
  const std::vector<transport::FastPathAlgorithm> all = catalogue();
  auto offer = [&](size_t row, Kind kind, size_t max_bytes, size_t auto_min, size_t auto_max) {
    transport::FastPathAlgorithm algorithm = all[row];
    algorithm.max_bytes = max_bytes;
    algorithm.auto_min_bytes = auto_min;
    algorithm.auto_max_bytes = auto_max;
    algorithms_.push_back(algorithm);
    kinds_.push_back(kind);
  };
  auto above = [](size_t bytes) { return bytes == SIZE_MAX ? SIZE_MAX : bytes + 1; };
  const size_t one_shot_max = std::min(kSlotBytes, tuning.one_shot_max_bytes);
  offer(0, Kind::kAllReduceOneShot, kSlotBytes, 0, above(one_shot_max));
  if (direct_) offer(1, Kind::kAllReduceDirect, SIZE_MAX, tuning.cma_min_bytes, tuning.cma_max_bytes);
  offer(2, Kind::kAllReduceTwoShot, SIZE_MAX, above(tuning.two_shot_above_bytes), SIZE_MAX);
  offer(3, Kind::kAllGatherOneShot, kSlotBytes * static_cast<size_t>(size_), 0, above(one_shot_max));
  if (direct_) {
    offer(4, Kind::kAllGatherDirect, SIZE_MAX, tuning.cma_gather_min_bytes, SIZE_MAX);
    offer(5, Kind::kBroadcastDirect, SIZE_MAX, tuning.cma_gather_min_bytes, SIZE_MAX);
  }
}

void FastPath::run(size_t index, const transport::CollectiveArgs& args) {
  with_call(args, [&] { run_kind(kinds_[index], args); });
}

void FastPath::run_kind(Kind kind, const transport::CollectiveArgs& args) {
  switch (kind) {
    case Kind::kAllReduceOneShot:
      return all_reduce_one_shot(args.send, args.recv, args.count, args.dtype, args.op, args.tag, args.deadline,
                                 args.spin);
    case Kind::kAllReduceTwoShot:
      return all_reduce_two_shot(args.send, args.recv, args.count, args.dtype, args.op, args.tag, args.deadline,
                                 args.spin);
    case Kind::kAllReduceDirect:
      return all_reduce_direct(args.send, args.recv, args.count, args.dtype, args.op, args.tag, args.deadline,
                               args.spin);
    case Kind::kAllGatherOneShot:
      return all_gather_one_shot(args.send, args.recv, args.count * element_size(args.dtype), args.tag, args.deadline,
                                 args.spin);
    case Kind::kAllGatherDirect:
      return all_gather_direct(args.send, args.recv, args.count * element_size(args.dtype), args.tag, args.deadline,
                               args.spin);
    case Kind::kBroadcastDirect:
      return broadcast_direct(args.send, args.recv, args.count * element_size(args.dtype), args.root, args.tag,
                              args.deadline, args.spin);
  }
}

FastPath::~FastPath() = default;

void FastPath::check_peer(int peer) {
  if (headers_[peer]->closed.load(std::memory_order_acquire) != 0) {
    throw IoError(fmt::format("[shm] rank {}: peer {} closed its end (aborted or finished)", rank_, peer));
  }
  if (headers_[rank_]->closed.load(std::memory_order_relaxed) != 0) {
    throw IoError(fmt::format("[shm] rank {}: communicator aborted", rank_));
  }
  if (processes_[peer].exited()) throw IoError(fmt::format("[shm] rank {}: peer {} (pid {}) died", rank_, peer, headers_[peer]->owner_pid));
}

void FastPath::check_peer_call(int peer, const transport::Tag& tag) {
  check_announcement(areas_[peer]->call, rank_, peer, tag, current_algorithm_, 0);
  Queue* queue = queue_at(headers_[peer], rank_);
  uint64_t tail = queue->tail.load(std::memory_order_acquire);
  if (queue->head.load(std::memory_order_acquire) == tail) return;
  // A message of this call waiting in the peer's queue: the peer ran the call point to point (it may have moved
  // on since, so its announcement no longer shows it), or ran another call under this sequence number.
  const FrameHeader& frame = queue->frames[tail % kFrames].header;
  if (frame.first != 1 || frame.tag != tag.tag) return;
  if (!transport::same_call(frame.meta, tag.meta)) {  // a point-to-point message adds its schedule
    throw MismatchError(another_call_message(rank_, peer, frame.meta, tag.meta), peer, tag.meta, frame.meta, 0,
                        frame.message_bytes);
  }
  throw_tuned_differently(rank_, peer, kPointToPoint, current_algorithm_);
}

void FastPath::wait_for(const std::atomic<uint64_t>& counter, uint64_t target, std::atomic<uint32_t>* sleepers,
                        int peer, const Wait& wait, const char* what) {
  const Deadline deadline = wait.deadline;
  const transport::Tag* tag = wait.tag;
  transport::WaitPolicy* policy = wait_policy_;
  if (counter.load(std::memory_order_acquire) >= target) return;
  // The spin phase starts at the first clock read, 128 polls in: a wait that ends sooner reads no clock.
  Clock::time_point spin_until{};
  bool begun = false, spinning = true;
  for (unsigned i = 1;; ++i) {
    if (counter.load(std::memory_order_acquire) >= target) return;
    if (i % 128 != 0) continue;
    auto now = Clock::now();
    if (!begun) {
      begun = true;
      if (policy != nullptr) {
        policy->begin(now);
      } else {
        spin_until = now + wait.spin;
      }
    }
    if (now >= deadline) {
      throw TimeoutError(fmt::format("[shm] rank {}: timed out waiting for peer {} ({})", rank_, peer, what));
    }
    if (spinning) {
      if (policy != nullptr ? policy->spinning(now) : now < spin_until) {
        // Let who shares the CPU run: at every clock read (128 polls) when the machine has more ranks than CPUs.
        if (yield_now(spin_yield_, i, 4096)) {
          sched_yield();
          if (policy != nullptr) policy->yielded();
        }
        continue;
      }
      spinning = false;
    }
    // The call check first: a peer that spotted the mismatch may already have closed its end. A peer that
    // published what we wait for and then finished (closed, release) is not an error: after seeing its close
    // (acquire), the counter shows everything it published, so look once more before failing.
    try {
      if (tag != nullptr) check_peer_call(peer, *tag);
      check_peer(peer);
    } catch (const Error&) {
      if (counter.load(std::memory_order_acquire) >= target) return;
      throw;
    }
    if (watch_) watch_();
    if (policy != nullptr && !policy->sleeps()) {  // TBCOLL_WAIT=spin: checked, and spinning on
      policy->begin(now);
      spinning = true;
      continue;
    }
    uint64_t seen = counter.load(std::memory_order_seq_cst);
    if (seen >= target) return;
    if (sleepers != nullptr) {
      sleepers->fetch_add(1, std::memory_order_seq_cst);
      seen = counter.load(std::memory_order_seq_cst);
      if (seen < target) sleep_on(&counter, seen, wait.sleep_us);
      sleepers->fetch_sub(1, std::memory_order_seq_cst);
    } else {
      sleep_on(&counter, seen, 200);  // no waker for this counter: a short timed sleep
    }
  }
}

int FastPath::exchange_slots(const void* send, size_t bytes, const transport::Tag& tag, Deadline deadline,
                             std::chrono::microseconds spin) {
  if (bytes > kSlotBytes) throw InvalidArgument("[shm] one-shot input larger than the slot");
  announce(tag, kOneShot);
  const uint64_t k = ++calls_;
  const int b = static_cast<int>(k & 1);
  // Slot b last carried call k-2. No peer can still be reading it: during call k-1 we saw every peer's
  // input for k-1, which a peer publishes only after it finished call k-2. So no "done" round-trip is needed.
  CollectiveSlot& mine = areas_[rank_]->slots[b];
  std::memcpy(mine.data, send, bytes);
  mine.tag = tag.tag;
  mine.meta = tag.meta;
  mine.bytes = static_cast<uint32_t>(bytes);
  mine.seq.store(k, std::memory_order_seq_cst);
  if (mine.sleepers.load(std::memory_order_seq_cst) != 0) wake_sleepers(&mine.seq);

  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    CollectiveSlot& theirs = areas_[p]->slots[b];
    wait_for(theirs.seq, k, &theirs.sleepers, p, Wait{deadline, spin, &tag}, "its one-shot input");
    if (theirs.meta != tag.meta || theirs.bytes != bytes) {
      std::string what = fmt::format("[shm] rank {}: fast-path input of peer {} does not match: expected "
                                     "meta {:#x} {} B, got meta {:#x} {} B",
                                     rank_, p, tag.meta, bytes, theirs.meta, theirs.bytes);
      throw MismatchError(what, p, tag.meta, theirs.meta, bytes, theirs.bytes);
    }
  }
  return b;
}

void FastPath::prepare_next_slot(size_t bytes) {
  // The next call writes slot (calls_ + 1) & 1, whose lines the peers still hold shared from reading it two
  // calls ago. Taking them exclusive now (prefetchw) moves that invalidation round trip off the next call's
  // critical path, where it would stall the store of seq behind the data stores. Safe: every peer finished
  // reading that slot before publishing the input we just consumed; this changes cache state, not data.
  take_exclusive(&areas_[rank_]->slots[(calls_ + 1) & 1],
                 std::min<size_t>(bytes + offsetof(CollectiveSlot, data), 4096));
}

void FastPath::all_reduce_one_shot(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                   transport::Tag tag, Deadline deadline, std::chrono::microseconds spin) {
  const size_t bytes = count * element_size(dtype);
  if (bytes <= kFlaggedMaxBytes) {
    all_reduce_flagged(send, recv, count, dtype, op, tag, Wait{deadline, spin, &tag});
    return;
  }
  const int b = exchange_slots(send, bytes, tag, deadline, spin);
  reduce::reduce_ranks(recv, size_, count, dtype, op, kernel_for(dtype, op),
                       [&](int p) { return areas_[p]->slots[b].data; });
  prepare_next_slot(bytes);
}

void FastPath::all_gather_one_shot(const void* send, void* recv, size_t bytes_per_rank, transport::Tag tag,
                                   Deadline deadline, std::chrono::microseconds spin) {
  if (bytes_per_rank <= kFlaggedMaxBytes) {
    all_gather_flagged(send, recv, bytes_per_rank, tag, Wait{deadline, spin, &tag});
    return;
  }
  const int b = exchange_slots(send, bytes_per_rank, tag, deadline, spin);
  auto* out = static_cast<uint8_t*>(recv);
  for (int p = 0; p < size_; ++p) {
    std::memcpy(out + static_cast<size_t>(p) * bytes_per_rank, areas_[p]->slots[b].data, bytes_per_rank);
  }
  prepare_next_slot(bytes_per_rank);
}

void FastPath::read_peer(int pid, uint64_t remote, void* local, size_t bytes, int rank, int peer) {
  auto* at = static_cast<uint8_t*>(local);
  while (bytes > 0) {
    const long got = platform::read_process_memory(pid, at, remote, bytes);
    if (got <= 0) {
      throw IoError(fmt::format("[shm] rank {}: cross-memory read of {} B from peer {} (pid {}) failed: {}", rank,
                                bytes, peer, pid, got < 0 ? strerror(errno) : "no progress"));
    }
    at += got;
    remote += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
}

void FastPath::publish(std::atomic<uint64_t>& counter, uint64_t value, const std::atomic<uint32_t>& sleepers) {
  counter.store(value, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) wake_sleepers(&counter);
}

void FastPath::wait_all(std::atomic<uint64_t> DirectControl::*counter, uint64_t k, const Wait& wait,
                        const char* what) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    DirectControl& theirs = areas_[p]->direct;
    wait_for(theirs.*counter, k, &theirs.sleepers, p, wait, what);
  }
}

void FastPath::direct_call(const void* send, void* recv, size_t bytes, const transport::Tag& tag, const Wait& wait,
                           const std::function<void(uint64_t)>& body) {
  announce(tag, kCrossMemory);
  const uint64_t k = ++direct_calls_;
  DirectControl& mine = areas_[rank_]->direct;
  mine.send_addr = reinterpret_cast<uint64_t>(send);
  mine.recv_addr = reinterpret_cast<uint64_t>(recv);
  mine.tag = tag.tag;
  mine.meta = tag.meta;
  mine.bytes = bytes;
  publish(mine.posted, k, mine.sleepers);
  // From here peers may read our buffers until they are done. Leaving with an error (deadline, abort, a failed
  // peer) hands the buffers back to the caller while a slower peer may still be reading them: say so first
  // (abandoned, seq_cst, before any reuse), and every rank checks it after its own reads (below).
  try {
    wait_all(&DirectControl::posted, k, wait, "its buffer addresses");
    for (int p = 0; p < size_; ++p) {
      const DirectControl& theirs = areas_[p]->direct;
      if (p != rank_ && (theirs.meta != tag.meta || theirs.bytes != bytes)) {
        throw MismatchError(fmt::format("[shm] rank {}: direct call of peer {} does not match: expected meta {:#x} "
                                        "{} B, got meta {:#x} {} B", rank_, p, tag.meta, bytes, theirs.meta,
                                        theirs.bytes),
                            p, tag.meta, theirs.meta, bytes, theirs.bytes);
      }
    }
    body(k);
    publish(mine.done, k, mine.sleepers);
    wait_all(&DirectControl::done, k, wait, "the end of the call");  // peers may still read our buffers
  } catch (...) {
    mine.abandoned.store(k, std::memory_order_seq_cst);
    throw;
  }
  // A peer that abandoned the call may have reused its buffers while we read them (if we saw its new data, the
  // fence makes its abandoned mark visible here).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && areas_[p]->direct.abandoned.load(std::memory_order_relaxed) >= k) {
      throw IoError(fmt::format("[shm] rank {}: peer {} left this call with an error (deadline or abort) while its "
                                "buffers were being read: the results are not valid", rank_, p));
    }
  }
}

void FastPath::all_reduce_direct(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                 transport::Tag tag, Deadline deadline, std::chrono::microseconds spin) {
  const size_t es = element_size(dtype);
  const Wait wait{deadline, spin, &tag};
  direct_call(send, recv, count * es, tag, wait,
              [&](uint64_t k) { all_reduce_direct_body(send, recv, count, dtype, op, wait, k); });
}

void FastPath::all_reduce_direct_body(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                      const Wait& wait, uint64_t k) {
  const size_t es = element_size(dtype);
  // My slice of the elements, reduced chunk by chunk in rank order.
  auto slice = [&](int r) {
    const algo::Piece piece = algo::segment(count, size_, r);
    return std::pair<size_t, size_t>{piece.offset, piece.count};
  };
  const size_t chunk_elems = std::max<size_t>(1, (256 * 1024) / es);
  scratch_.resize(3 * chunk_elems * es);
  uint8_t* incoming[2] = {scratch_.data(), scratch_.data() + chunk_elems * es};  // peers' chunks, taking turns
  uint8_t* own_copy = scratch_.data() + 2 * chunk_elems * es;
  reduce::Kernel kernel = reduce::kernel(dtype, op);
  auto [first, elems] = slice(rank_);
  const auto* own = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  for (size_t done = 0; done < elems; done += chunk_elems) {
    const size_t n = std::min(chunk_elems, elems - done);
    const size_t offset = (first + done) * es;
    // In place, out is our own input. Ranks 0 and 1 use it in the first reduction only (exact aliasing is
    // fine); later ranks keep a copy, since the first reductions overwrite it.
    const uint8_t* mine = own + offset;
    if (send == recv && rank_ >= 2) {
      std::memcpy(own_copy, own + offset, n * es);
      mine = own_copy;
    }
    auto input = [&](int p) -> const uint8_t* {
      if (p == rank_) return mine;
      uint8_t* into = incoming[p & 1];
      read_peer(headers_[p]->owner_pid, areas_[p]->direct.send_addr + offset, into, n * es, rank_, p);
      return into;
    };
    reduce::reduce_ranks(out + offset, size_, n, dtype, op, kernel, input);
  }
  publish(areas_[rank_]->direct.reduced, k, areas_[rank_]->direct.sleepers);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    wait_for(areas_[p]->direct.reduced, k, &areas_[p]->direct.sleepers, p, wait, "its reduced slice");
    auto [start, length] = slice(p);
    read_peer(headers_[p]->owner_pid, areas_[p]->direct.recv_addr + start * es, out + start * es, length * es, rank_,
              p);
  }
}

void FastPath::all_gather_direct(const void* send, void* recv, size_t bytes_per_rank, transport::Tag tag,
                                 Deadline deadline, std::chrono::microseconds spin) {
  const Wait wait{deadline, spin, &tag};
  direct_call(send, recv, bytes_per_rank, tag, wait, [&](uint64_t) {
    auto* out = static_cast<uint8_t*>(recv);
    uint8_t* own = out + static_cast<size_t>(rank_) * bytes_per_rank;
    if (send != own) std::memcpy(own, send, bytes_per_rank);
    for (int step = 1; step < size_; ++step) {
      int p = (rank_ + step) % size_;  // stagger the peers so all ranks don't read rank 0 first
      read_peer(headers_[p]->owner_pid, areas_[p]->direct.send_addr, out + static_cast<size_t>(p) * bytes_per_rank,
                bytes_per_rank, rank_, p);
    }
  });
}

void FastPath::broadcast_direct(const void* send, void* recv, size_t bytes, int root, transport::Tag tag,
                                Deadline deadline, std::chrono::microseconds spin) {
  const Wait wait{deadline, spin, &tag};
  direct_call(rank_ == root ? send : recv, recv, bytes, tag, wait, [&](uint64_t) {
    if (rank_ == root) {
      if (send != recv) std::memcpy(recv, send, bytes);
    } else {
      read_peer(headers_[root]->owner_pid, areas_[root]->direct.send_addr, recv, bytes, rank_, root);
    }
  });
}

}  // namespace tbcoll::shm
