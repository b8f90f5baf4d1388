#include "algorithms/exec.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/enforce.h"
#include "flight/flight_file.h"

namespace tbcoll::algo {

void Scratch::Free::operator()(void* p) const { std::free(p); }

void* Scratch::get(size_t bytes) {
  if (bytes > bytes_ || !memory_) {
    if (bytes > (size_t{1} << 40)) {  // a wrapped size computation, never a real need
      throw Error(tbcollInternalError, fmt::format("scratch request of {} B is not plausible", bytes));
    }
    size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) throw Error(tbcollSystemError, fmt::format("out of memory allocating {} B of scratch", rounded));
    memory_.reset(p);
    bytes_ = rounded;
  }
  return memory_.get();
}

std::string CallInfo::describe() const {
  if (count == 0 && root < 0 && !has_op) return fmt::format("{}()", name);
  std::string out = fmt::format("{}({}={}, {}", name, count_name, count, to_string(dtype));
  if (has_op) out += ", " + to_string(op);
  if (root >= 0) out += fmt::format(", {}={}", root_name, root);
  return out + ")";
}

void RequestTable::reset(int world_size) {
  requests.clear();  // drops requests of an earlier call that failed midway
  done.clear();
  active_peers.clear();
  if (pending_sends.size() != static_cast<size_t>(world_size)) {
    pending_sends.assign(world_size, {});
    pending_recvs.assign(world_size, {});
  }
  for (auto& queue : pending_sends) queue.clear();
  for (auto& queue : pending_recvs) queue.clear();
}

Exec::Exec(int rank, int size, const std::vector<transport::Endpoint*>& peers, const std::vector<size_t>& max_message,
           transport::Tag tag, Deadline deadline, transport::WaitPolicy& wait, size_t chunk_bytes, Scratch& scratch,
           RequestTable& table, [[maybe_unused]] const CallInfo& call, const std::vector<int>* host_of)
    : rank_(rank),
      size_(size),
      peers_(peers),
      max_message_(max_message),
      tag_(tag),
      deadline_(deadline),
      wait_(wait),
      chunk_bytes_(chunk_bytes),
      scratch_(scratch),
      table_(table),
      requests_(table.requests),
      done_(table.done),
      pending_sends_(table.pending_sends),
      pending_recvs_(table.pending_recvs),
      active_peers_(table.active_peers),
      host_of_(host_of) {
  table_.reset(size);
}

size_t Exec::isend(int peer, const void* buf, size_t bytes, transport::Tag tag) {
  return post(peer, true, const_cast<void*>(buf), bytes, tag);  // only read
}

size_t Exec::irecv(int peer, void* buf, size_t bytes, transport::Tag tag) { return post(peer, false, buf, bytes, tag); }

size_t Exec::isend_later(int peer) {
  TBCOLL_ENFORCE(peer >= 0 && peer < size_ && peer != rank_ && peers_[peer] != nullptr);
  if (pending_sends_[peer].empty() && pending_recvs_[peer].empty()) active_peers_.push_back(peer);
  const size_t id = requests_.size();
  requests_.push_back({peers_[peer]->isend_later(tag_), peer, true, 0});
  done_.push_back(0);
  pending_sends_[peer].push_back(id);
  return id;
}

void Exec::flush_all() {
  for (transport::Endpoint* endpoint : peers_) {
    if (endpoint != nullptr) endpoint->flush();
  }
}

size_t Exec::post(int peer, bool is_send, void* buf, size_t bytes, transport::Tag tag) {
  TBCOLL_ENFORCE(peer >= 0 && peer < size_ && peer != rank_ && peers_[peer] != nullptr);
  if (pending_sends_[peer].empty() && pending_recvs_[peer].empty()) active_peers_.push_back(peer);
  std::deque<size_t>& pending = is_send ? pending_sends_[peer] : pending_recvs_[peer];
  if (table_.figures != nullptr) {  // one writer: plain loads and stores
    flight::PeerFigures& figures = table_.figures[peer];
    std::atomic<uint64_t>& moved = is_send ? figures.sent_bytes : figures.received_bytes;
    moved.store(moved.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
    figures.messages.store(figures.messages.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  const size_t limit = max_message_[peer];
  auto* at = static_cast<uint8_t*>(buf);
  size_t left = bytes;
  do {
    const size_t piece = std::min(left, limit);
    const size_t id = requests_.size();
    requests_.push_back({is_send ? peers_[peer]->isend(at, piece, tag) : peers_[peer]->irecv(at, piece, tag), peer,
                         is_send, piece});
    done_.push_back(0);
    pending.push_back(id);
    at = at == nullptr ? at : at + piece;
    left -= piece;
  } while (left > 0);
  return requests_.size() - 1;
}

bool Exec::sweep() {
  if (table_.also_progress) table_.also_progress();
  bool progressed = false;
  for (size_t i = 0; i < active_peers_.size();) {
    int peer = active_peers_[i];
    for (auto* queue : {&pending_recvs_[peer], &pending_sends_[peer]}) {
      // A request set aside, alone in its queue, is looked at only in long waits: where a poll is a system call,
      // the schedule's own messages do not pay for it.
      if (queue->size() == 1 && !look_aside_ && (queue->front() == aside_[0] || queue->front() == aside_[1])) {
        continue;
      }
      while (!queue->empty() && requests_[queue->front()].request->test()) {
        done_[queue->front()] = 1;
        requests_[queue->front()].request.reset();
        queue->pop_front();
        progressed = true;
      }
    }
    if (pending_sends_[peer].empty() && pending_recvs_[peer].empty()) {
      active_peers_[i] = active_peers_.back();
      active_peers_.pop_back();
    } else {
      ++i;
    }
  }
  return progressed;
}

void Exec::wait(size_t id) {
  TBCOLL_ENFORCE_LT(id, requests_.size());
  if (done_[id]) return;
  if (id == aside_[0] || id == aside_[1]) look_aside_ = true;  // waited for now: its sweeps test it
  const auto start = Clock::now();
  wait_.begin(start);
  bool spinning = true, flushed = false;
  unsigned iterations = 0;
  auto now = start;
  while (true) {
    sweep();
    if (done_[id]) {
      if (now != start) count_wait(requests_[id].peer, now - start);  // waited beyond the first look
      return;
    }
    now = Clock::now();
    if (now >= deadline_) timed_out(id);
    if (!flushed && now - start >= kFlushAfter) {
      // A long wait: what waits to leave with a later message (a rooted call's check of its neighbour) goes now,
      // and what was set aside is looked at, so ranks that wait for each other see each other's calls.
      flushed = true;
      look_aside_ = true;
      flush_all();
      if (table_.on_long_wait) table_.on_long_wait();
    }
    if (spinning && !wait_.spinning(now)) spinning = false;
    if (!spinning) {
      if (now - start >= transport::WaitPolicy::kWatchAfter) look_at_peers();
      if (!wait_.sleeps()) {  // TBCOLL_WAIT=spin: looked, and spinning on
        wait_.begin(now);
        spinning = true;
        continue;
      }
      // Past the spin budget: sleep in the transport until something can move (bounded, so other
      // endpoints of this call still get progressed and the deadline is honoured).
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - now);
      requests_[id].request->block(std::min(left, std::chrono::microseconds(1000)));
    } else if (yield_now(wait_.yield(), ++iterations, 256)) {
      // Ranks that may share a CPU: let the peer we wait for run. On a crowded machine at every poll: a poll of
      // a socket is a system call, so 256 of them hold the CPU ~250 us from a peer that has work to do
      // (8 ranks on 2 CPUs, tcp: recursive doubling's 4-byte all-reduce 810 us yielding every 256 polls,
      // 150 us at every poll).
      sched_yield();
      wait_.yielded();
    }
  }
}

void Exec::look_at_peers() {
  if (!watch_) return;
  try {
    watch_();
  } catch (const RemoteError&) {
    // A peer's notice that it gave up: what it sent before that may be here already, and a mismatch names its
    // call more precisely than the notice (whichever of the two this rank happened to look at first). Other
    // errors of that sweep (the peer closed, say) say less than the notice.
    try {
      sweep();
    } catch (const MismatchError&) {
      throw;
    } catch (const Error&) {
    }
    throw;
  }
}

void Exec::wait_all() {
  for (size_t id = 0; id < requests_.size(); ++id) {
    if (id != aside_[0] && id != aside_[1]) wait(id);
  }
}

void Exec::set_aside(size_t id) {
  TBCOLL_ENFORCE(aside_[1] == SIZE_MAX);
  aside_[aside_[0] == SIZE_MAX ? 0 : 1] = id;
}

std::unique_ptr<transport::Request> Exec::detach(size_t id) {
  RequestTable::Pending& pending = requests_[id];
  std::deque<size_t>& queue = pending.is_send ? pending_sends_[pending.peer] : pending_recvs_[pending.peer];
  TBCOLL_ENFORCE(!queue.empty() && queue.back() == id);
  queue.pop_back();
  done_[id] = 1;  // no longer this call's
  return std::move(pending.request);
}

void Exec::count_wait(int peer, Clock::duration waited) {
  if (table_.figures == nullptr) return;
  flight::PeerFigures& figures = table_.figures[peer];
  const auto us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(waited).count());
  figures.wait_us.store(figures.wait_us.load(std::memory_order_relaxed) + us, std::memory_order_relaxed);
  figures.waits.store(figures.waits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void Exec::timed_out(size_t id) {
  const RequestTable::Pending& pending = requests_[id];
  if (table_.stalled_on != nullptr) table_.stalled_on->store(pending.peer, std::memory_order_relaxed);
  // The caller (Communicator::Impl::guard) puts the rank and the call in front.
  throw TimeoutError(fmt::format("timed out waiting for peer {} ({} of {} B)", pending.peer,
                                 pending.is_send ? "send" : "receive", pending.bytes));
}

}  // namespace tbcoll::algo
