#include "transports/shm/fast_path.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "reduce/reduce.h"

namespace tbcoll::shm {

FastPath::FastPath(int rank, std::vector<CollectiveArea*> areas, std::vector<SegmentHeader*> headers)
    : rank_(rank), size_(static_cast<int>(areas.size())), areas_(std::move(areas)), headers_(std::move(headers)),
      pidfds_(size_, -1) {
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && headers_[p]->owner_pid != static_cast<int32_t>(getpid())) {
      pidfds_[p] = static_cast<int>(syscall(SYS_pidfd_open, headers_[p]->owner_pid, 0));
    }
  }
}

FastPath::~FastPath() {
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

void FastPath::check_peer(int peer) {
  if (headers_[peer]->closed.load(std::memory_order_acquire) != 0) {
    throw IoError(fmt::format("[shm] rank {}: peer {} closed its end (aborted or finished)", rank_, peer));
  }
  if (headers_[rank_]->closed.load(std::memory_order_relaxed) != 0) {
    throw IoError(fmt::format("[shm] rank {}: communicator aborted", rank_));
  }
  bool dead = false;
  if (pidfds_[peer] >= 0) {
    pollfd pfd{pidfds_[peer], POLLIN, 0};
    dead = poll(&pfd, 1, 0) > 0;
  } else if (headers_[peer]->owner_pid != static_cast<int32_t>(getpid())) {
    dead = kill(headers_[peer]->owner_pid, 0) != 0 && errno == ESRCH;
  }
  if (dead) throw IoError(fmt::format("[shm] rank {}: peer {} (pid {}) died", rank_, peer, headers_[peer]->owner_pid));
}

void FastPath::check_peer_call(int peer, const transport::Tag& tag) {
  Queue* queue = queue_at(headers_[peer], rank_);
  uint64_t tail = queue->tail.load(std::memory_order_acquire);
  if (queue->head.load(std::memory_order_acquire) == tail) return;
  const FrameHeader& frame = queue->frames[tail % kFrames].header;
  if (frame.first == 1 && frame.tag == tag.tag && frame.meta != tag.meta) {
    throw MismatchError(fmt::format("[shm] rank {}: peer {} is in another call with the same sequence number "
                                    "(signature {:#x}, ours {:#x})", rank_, peer, frame.meta, tag.meta),
                        peer, tag.meta, frame.meta, 0, frame.message_bytes);
  }
}

void FastPath::wait_for(const std::atomic<uint64_t>& counter, uint64_t target, std::atomic<uint32_t>* sleepers,
                        int peer, Deadline deadline, std::chrono::microseconds spin, const char* what,
                        const transport::Tag* tag) {
  if (counter.load(std::memory_order_acquire) >= target) return;
  auto spin_until = Clock::now() + spin;
  for (unsigned i = 1;; ++i) {
    if (counter.load(std::memory_order_acquire) >= target) return;
    if (i % 128 != 0) continue;
    auto now = Clock::now();
    if (now >= deadline) {
      throw TimeoutError(fmt::format("[shm] rank {}: timed out waiting for peer {} ({})", rank_, peer, what));
    }
    if (now < spin_until) {
      if (i % 4096 == 0) sched_yield();  // oversubscribed: let the peer we wait for run
      continue;
    }
    check_peer(peer);
    if (tag != nullptr) check_peer_call(peer, *tag);
    uint64_t seen = counter.load(std::memory_order_seq_cst);
    if (seen >= target) return;
    if (sleepers != nullptr) {
      sleepers->fetch_add(1, std::memory_order_seq_cst);
      seen = counter.load(std::memory_order_seq_cst);
      if (seen < target) futex_wait(&counter, seen, 1000);
      sleepers->fetch_sub(1, std::memory_order_seq_cst);
    } else {
      futex_wait(&counter, seen, 200);  // no waker for this counter: a short timed sleep
    }
  }
}

void FastPath::all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                          transport::Tag tag, Deadline deadline, std::chrono::microseconds spin) {
  const uint64_t meta = tag.meta;
  const size_t bytes = count * dtype_size(dtype);
  if (bytes > kSlotBytes) throw InvalidArgument("[shm] one-shot all_reduce larger than the slot");
  const uint64_t k = ++calls_;
  const int b = static_cast<int>(k & 1);
  // Slot b last carried call k-2. No peer can still be reading it: during call k-1 we saw every peer's
  // input for k-1, which a peer publishes only after it finished call k-2. So no "done" round-trip is needed.
  CollectiveSlot& mine = areas_[rank_]->slots[b];
  std::memcpy(mine.data, send, bytes);
  mine.tag = tag.tag;
  mine.meta = meta;
  mine.bytes = static_cast<uint32_t>(bytes);
  mine.seq.store(k, std::memory_order_seq_cst);
  if (mine.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(&mine.seq);

  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    CollectiveSlot& theirs = areas_[p]->slots[b];
    wait_for(theirs.seq, k, &theirs.sleepers, p, deadline, spin, "all_reduce input", &tag);
    if (theirs.meta != meta || theirs.bytes != bytes) {
      std::string what = fmt::format("[shm] rank {}: fast-path all_reduce input of peer {} does not match: expected "
                                     "meta {:#x} {} B, got meta {:#x} {} B",
                                     rank_, p, meta, bytes, theirs.meta, theirs.bytes);
      throw MismatchError(what, p, meta, theirs.meta, bytes, theirs.bytes);
    }
  }
  reduce::Kernel kernel = reduce::kernel(dtype, op);
  kernel(recv, areas_[0]->slots[b].data, areas_[1]->slots[b].data, count);
  for (int p = 2; p < size_; ++p) kernel(recv, recv, areas_[p]->slots[b].data, count);
  if (op == ReduceOp::kAvg) reduce::divide(recv, recv, count, dtype, size_);
}

}  // namespace tbcoll::shm
