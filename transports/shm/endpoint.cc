#include "transports/shm/endpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "transports/queued_request.h"
#include "transports/shm/announce.h"

namespace tbcoll::shm {

Endpoint::Endpoint(int rank, int peer, Queue* out, Queue* in, SegmentHeader* own, SegmentHeader* remote)
    : rank_(rank), peer_(peer), out_(out), in_(in), own_(own), remote_(remote), peer_process_(remote->owner_pid) {
  out_head_ = out_->head.load(std::memory_order_relaxed);
  out_tail_cached_ = out_->tail.load(std::memory_order_acquire);
  in_tail_ = in_->tail.load(std::memory_order_relaxed);
}

Endpoint::~Endpoint() = default;

void Endpoint::fail(const std::string& message) {
  if (broken_.empty()) broken_ = message;
  throw IoError(message);
}

void Endpoint::abandon(const std::shared_ptr<Operation>& op) {
  if (broken_.empty()) {
    broken_ = fmt::format("[shm] rank {}: queue to peer {} is out of sync (an operation was abandoned)", rank_, peer_);
  }
  op->buf = nullptr;
}

std::unique_ptr<transport::Request> Endpoint::isend(const void* buf, size_t bytes, transport::Tag tag) {
  auto request = transport::enqueue<Endpoint, Operation>(this, sends_, buf, bytes, tag).first;
  if (sends_.size() == 1 && broken_.empty()) progress_sends();
  return request;
}

std::unique_ptr<transport::Request> Endpoint::irecv(void* buf, size_t bytes, transport::Tag tag) {
  return transport::enqueue<Endpoint, Operation>(this, recvs_, buf, bytes, tag).first;
}

void Endpoint::check_peer() {
  if (remote_->closed.load(std::memory_order_acquire) != 0) {
    // Frames the peer published before it closed (release; acquired above) are still ours to read (a receive's,
    // or a probe's to see).
    if (in_->head.load(std::memory_order_acquire) != in_tail_) return;
    fail(fmt::format("[shm] rank {}: peer {} closed its end (aborted or finished)", rank_, peer_));
  }
  if (own_->closed.load(std::memory_order_relaxed) != 0) {
    fail(fmt::format("[shm] rank {}: connection to peer {} was aborted", rank_, peer_));
  }
  if (peer_process_.exited()) {
    fail(fmt::format("[shm] rank {}: peer {} (pid {}) died", rank_, peer_, remote_->owner_pid));
  }
}

void Endpoint::progress() {
  if (!broken_.empty()) throw IoError(broken_);
  bool moved = progress_sends();
  moved |= progress_recvs();
  // Nothing moved: look at the peer now and then (a dead peer never advances the counters).
  if (!moved && (++idle_polls_ & 0x3fff) == 0) check_peer();
}

bool Endpoint::progress_sends() {
  bool moved = false;
  while (!sends_.empty()) {
    Operation& op = *sends_.front();
    while (!op.complete) {
      if (out_head_ - out_tail_cached_ >= kFrames) {
        out_tail_cached_ = out_->tail.load(std::memory_order_acquire);
        if (out_head_ - out_tail_cached_ >= kFrames) return moved;  // queue full
      }
      Frame& frame = out_->frames[out_head_ % kFrames];
      size_t take = std::min(kFrameBytes, op.bytes - op.done);
      frame.header.tag = op.tag.tag;
      frame.header.meta = op.tag.meta;
      frame.header.message_bytes = op.bytes;
      frame.header.frame_bytes = static_cast<uint32_t>(take);
      frame.header.first = op.started ? 0 : 1;
      if (take > 0) std::memcpy(frame.payload, op.buf + op.done, take);
      op.started = true;
      op.done += take;
      // seq_cst, not release: the store must not pass the load of the sleeping flag below (StoreLoad), or a
      // consumer that just announced its sleep would miss the wake and sleep to its timeout.
      out_->head.store(++out_head_, std::memory_order_seq_cst);
      wake(out_->consumer_sleeping.load(std::memory_order_seq_cst), &out_->head);
      moved = true;
      if (op.done == op.bytes) op.complete = true;
    }
    sends_.pop_front();
  }
  return moved;
}

bool Endpoint::progress_recvs() {
  bool moved = false;
  while (!recvs_.empty()) {
    Operation& op = *recvs_.front();
    while (!op.complete) {
      uint64_t head = in_->head.load(std::memory_order_acquire);
      if (head == in_tail_) return moved;
      const Frame& frame = in_->frames[in_tail_ % kFrames];
      if (!op.started) {
        if (frame.header.first != 1) {
          fail(fmt::format("[shm] rank {}: corrupt queue from peer {} (message continues where one should start)",
                           rank_, peer_));
        }
        if (frame.header.tag != op.tag.tag || frame.header.meta != op.tag.meta ||
            frame.header.message_bytes != op.bytes) {
          std::string what = fmt::format(
              "[shm] rank {}: message from peer {} does not match: expected tag {} meta {:#x} {} B, got tag {} "
              "meta {:#x} {} B",
              rank_, peer_, op.tag.tag, op.tag.meta, op.bytes, frame.header.tag, frame.header.meta,
              frame.header.message_bytes);
          broken_ = what;
          throw MismatchError(what, peer_, op.tag.meta, frame.header.meta, op.bytes, frame.header.message_bytes);
        }
        op.started = true;
      }
      size_t take = frame.header.frame_bytes;
      if (take > op.bytes - op.done) fail(fmt::format("[shm] rank {}: corrupt frame from peer {}", rank_, peer_));
      if (take > 0 && op.buf != nullptr) std::memcpy(op.buf + op.done, frame.payload, take);
      op.done += take;
      in_->tail.store(++in_tail_, std::memory_order_seq_cst);  // seq_cst: see progress_sends
      wake(in_->producer_sleeping.load(std::memory_order_seq_cst), &in_->tail);
      moved = true;
      if (op.done == op.bytes) op.complete = true;
    }
    recvs_.pop_front();
  }
  return moved;
}

std::optional<transport::Arrival> Endpoint::probe() {
  progress();
  if (!recvs_.empty()) return std::nullopt;
  if (in_->head.load(std::memory_order_acquire) == in_tail_) return std::nullopt;
  const Frame& frame = in_->frames[in_tail_ % kFrames];
  if (frame.header.first != 1) {
    fail(fmt::format("[shm] rank {}: corrupt queue from peer {} (message continues where one should start)", rank_,
                     peer_));
  }
  return transport::Arrival{{frame.header.tag, frame.header.meta}, frame.header.message_bytes};
}

void Endpoint::check_peer_call() {
  // A peer that announced the collective our receive belongs to, with another signature or in a fast path,
  // is not going to send it; nor to receive our send (whose queue may be full).
  if ((recvs_.empty() && sends_.empty()) || remote_->world_size <= 0) return;
  const Operation& op = recvs_.empty() ? *sends_.front() : *recvs_.front();
  try {
    check_announcement(collective_area(remote_, remote_->world_size)->call, rank_, peer_, op.tag, kPointToPoint,
                       op.bytes);
  } catch (const Error& error) {
    broken_ = error.what();
    throw;
  }
}

void Endpoint::block(std::chrono::microseconds max_wait) {
  if (!recvs_.empty() && in_->head.load(std::memory_order_acquire) != in_tail_) return;  // data waiting
  if (!sends_.empty() && out_head_ - out_->tail.load(std::memory_order_acquire) < kFrames) return;  // room
  check_peer_call();  // first: a peer that spotted the mismatch may already have closed its end
  check_peer();
  long timeout_us = std::max<long>(1, static_cast<long>(max_wait.count()));
  // Announce the sleep, then re-check: the other side wakes us only if it sees the flag after publishing. With a
  // receive and a send both waiting (a group, or a receive whose data needs our send first), either side's
  // progress must wake us, so we sleep on our doorbell, read before the announcement: a ring after that read
  // changes it, and sleep_on then does not sleep.
  const bool receiving = !recvs_.empty(), sending = !sends_.empty();
  const bool both = receiving && sending;
  const uint64_t bell = out_->doorbell.load(std::memory_order_seq_cst);
  const uint32_t how = both ? kAsleepOnDoorbell : kAsleepOnCounter;
  if (receiving) in_->consumer_sleeping.store(how, std::memory_order_seq_cst);
  if (sending) out_->producer_sleeping.store(how, std::memory_order_seq_cst);
  const uint64_t head = in_->head.load(std::memory_order_seq_cst);
  const uint64_t tail = out_->tail.load(std::memory_order_seq_cst);
  const bool nothing_to_receive = !receiving || head == in_tail_;
  const bool no_room = !sending || out_head_ - tail >= kFrames;
  if (nothing_to_receive && no_room) {
    if (both) {
      sleep_on(&out_->doorbell, bell, timeout_us);
    } else if (receiving) {
      sleep_on(&in_->head, head, timeout_us);
    } else {
      sleep_on(&out_->tail, tail, timeout_us);
    }
  }
  if (receiving) in_->consumer_sleeping.store(kAwake, std::memory_order_relaxed);
  if (sending) out_->producer_sleeping.store(kAwake, std::memory_order_relaxed);
}

void Endpoint::wake(uint32_t sleep, const std::atomic<uint64_t>* counter) {
  if (sleep == kAsleepOnCounter) {
    wake_sleepers(counter);
  } else if (sleep == kAsleepOnDoorbell) {
    // The peer's doorbell is on its outgoing queue, our incoming one.
    in_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    wake_sleepers(&in_->doorbell);
  }
}

}  // namespace tbcoll::shm
