// Non-blocking send and receive. isend/irecv post their messages on the peer's endpoint and return; the Work's
// test() and wait() drive them (State::drive), and so does every wait of a later call of the communicator
// (RequestTable::also_progress, the fast path's watch), so two ranks that both post a receive before their send
// meet instead of waiting for each other, and a peer that receives with blocking calls before it joins a later
// collective gets its message. They take their tags from the same per-pair counters as send and recv, so
// blocking and non-blocking calls of a pair match in call order.
//
// Only one thread drives the endpoints at a time: posting first drains the asynchronous queue, test() does
// nothing while the progress thread runs queued calls (which drive the pending ones), and wait() drains it
// before it drives.
#include "p2p_async.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/time.h"
#include "call_checks.h"
#include "communicator.h"

namespace tbcoll {
namespace {

// How long a receive from any peer, not matched yet and past its spin, sleeps between looks: it has no request
// to block in.
constexpr std::chrono::microseconds kAnyNap{200};

}  // namespace

P2pInFlight::~P2pInFlight() {
  for (auto& op : ops_) {
    op->chunks.clear();  // abandons what is unfinished: the endpoints stop touching the buffers
    op->state->complete(std::make_exception_ptr(
        InvalidUsage(fmt::format("{} failed: the communicator was destroyed first", describe(*op)))));
  }
}

std::string P2pInFlight::describe(const Op& op) const {
  if (op.any) {
    return fmt::format("rank {}: irecv_any(count={}, {}) from {}", impl_.rank, op.count, to_string(op.dtype),
                       op.peer < 0 ? std::string("any peer") : fmt::format("peer {}", op.peer));
  }
  const algo::CallInfo call{op.is_send ? "isend" : "irecv", op.count, op.dtype, ReduceOp::kSum, false, op.peer,
                            "peer"};
  return fmt::format("rank {}: {}", impl_.rank, call.describe());
}

std::shared_ptr<P2pInFlight::Op> P2pInFlight::make_op(bool is_send, void* buf, size_t bytes, size_t count,
                                                      DataType dtype, int peer) {
  auto op = std::make_shared<Op>();
  op->is_send = is_send;
  op->peer = peer;
  op->buf = buf;
  op->bytes = bytes;
  op->count = count;
  op->dtype = dtype;
  op->deadline = impl_.call_timeout.deadline();
  op->state = std::make_shared<Work::State>();
  if (!is_send) op->state->source = peer;
  std::weak_ptr<Op> weak = op;
  op->state->drive = [this, weak](bool block) {
    if (auto alive = weak.lock()) drive(alive, block);  // gone: completed (or failed) already
  };
  return op;
}

void P2pInFlight::post_chunks(Op& op, transport::Tag tag) {
  transport::Endpoint* endpoint = impl_.links.peers[static_cast<size_t>(op.peer)];
  const size_t most = std::max<size_t>(1, impl_.links.max_message[static_cast<size_t>(op.peer)]);
  auto* bytes_at = static_cast<uint8_t*>(op.buf);
  size_t offset = 0;
  do {  // a transfer larger than the transport's largest message goes as several, as Exec splits them
    const size_t part = std::min(most, op.bytes - offset);
    op.chunks.push_back(op.is_send ? endpoint->isend(bytes_at + offset, part, tag)
                                   : endpoint->irecv(bytes_at + offset, part, tag));
    offset += part;
  } while (offset < op.bytes);
}

Work P2pInFlight::post(bool is_send, void* buf, size_t bytes, size_t count, DataType dtype, int peer,
                       transport::Tag tag) {
  std::shared_ptr<Op> op = make_op(is_send, buf, bytes, count, dtype, peer);
  post_chunks(*op, tag);
  ops_.push_back(op);
  Work work(op->state);
  sweep();  // small messages often complete at once
  return work;
}

Work P2pInFlight::post_any(void* buf, size_t bytes, size_t count, DataType dtype) {
  std::shared_ptr<Op> op = make_op(false, buf, bytes, count, dtype, -1);
  op->any = true;
  ops_.push_back(op);
  Work work(op->state);
  sweep();
  return work;
}

bool P2pInFlight::match(Op& op) {
  const int size = impl_.size;
  for (int i = 0; i < size; ++i) {
    const int peer = (next_any_ + i) % size;
    if (peer == impl_.rank) continue;
    const std::optional<transport::Arrival> next = impl_.links.peers[static_cast<size_t>(peer)]->probe();
    // A collective's message first: the peer sent nothing to receive before that collective (messages keep
    // their order per pair).
    if (!next || !transport::is_p2p_tag(next->tag.tag)) continue;
    op.peer = peer;
    next_any_ = (peer + 1) % size;
    {
      std::lock_guard<std::mutex> lock(op.state->mutex);
      op.state->source = peer;
    }
    uint64_t& counter = impl_.calls.p2p_received[static_cast<size_t>(peer)];
    // As irecv(peer) would: the pair's next number and this call's signature (a sender's other count or dtype
    // fails the receive with MismatchError naming it).
    post_chunks(op, {transport::p2p_tag(counter++), make_meta(OpKind::kSendRecv, op.dtype, ReduceOp::kSum, 0, op.count)});
    return true;
  }
  return false;
}

bool P2pInFlight::advance(Op& op, Clock::time_point now) {
  try {
    if (op.peer < 0 && !match(op)) {
      if (now < op.deadline) return false;
      fail(op, std::make_exception_ptr(TimeoutError(fmt::format(
                   "timed out after {} s: no peer sent a message", impl_.config.timeout_s))));
      return true;
    }
    while (op.next < op.chunks.size() && op.chunks[op.next]->test()) op.chunks[op.next++].reset();
  } catch (const Error& error) {
    fail(op, std::make_exception_ptr(error));
    return true;
  }
  if (op.next < op.chunks.size()) {
    if (now < op.deadline) return false;
    // Whoever looks (test() polls included) sees the deadline pass: no poll loop waits forever.
    fail(op, std::make_exception_ptr(TimeoutError(
                 fmt::format("timed out after {} s waiting for peer {} ({} of {} B)", impl_.config.timeout_s,
                             op.peer, op.is_send ? "send" : "receive", op.bytes))));
    return true;
  }
  op.chunks.clear();
  op.state->complete(nullptr);
  return true;
}

void P2pInFlight::fail(Op& op, std::exception_ptr error) {
  std::string message;
  int code = tbcollInternalError;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    message = fmt::format("{} failed: {}", describe(op), e.what());
    code = e.code();
  }
  // The pair's message order is unknown from here on, as after a failed send: the communicator is broken.
  impl_.mark_broken(message);
  op.chunks.clear();
  switch (code) {
    case tbcollTimeout: op.state->complete(std::make_exception_ptr(TimeoutError(message))); break;
    case tbcollSystemError: op.state->complete(std::make_exception_ptr(IoError(message))); break;
    case tbcollRemoteError: op.state->complete(std::make_exception_ptr(RemoteError(message))); break;
    case tbcollInvalidArgument: op.state->complete(std::make_exception_ptr(InvalidArgument(message))); break;
    default: op.state->complete(std::make_exception_ptr(InvalidUsage(message))); break;
  }
}

void P2pInFlight::sweep() {
  if (ops_.empty()) return;
  const auto now = Clock::now();
  for (auto it = ops_.begin(); it != ops_.end();) {
    if (advance(**it, now)) {
      it = ops_.erase(it);
    } else {
      ++it;
    }
  }
}

void P2pInFlight::drive(const std::shared_ptr<Op>& op, bool block) {
  if (!block) {
    if (impl_.async.idle()) sweep();  // else the progress thread drives the endpoints now
    return;
  }
  impl_.async.drain();
  transport::WaitPolicy& wait = impl_.wait_policy;
  wait.begin(Clock::now());
  bool spinning = true;
  unsigned polls = 0;
  while (true) {
    sweep();  // every pending call, so one rank's waits never hold back what its peers wait for; fails it at
              // its deadline
    {
      std::lock_guard<std::mutex> lock(op->state->mutex);
      if (op->state->done) break;
    }
    const auto now = Clock::now();
    if (spinning && !wait.spinning(now)) spinning = false;
    if (!spinning && !wait.sleeps()) {  // TBCOLL_WAIT=spin (the sweep looks at the deadline)
      wait.begin(now);
      spinning = true;
    } else if (!spinning) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(op->deadline - now);
      if (op->peer < 0) {  // a receive from any peer, not matched: no request to block in
        std::this_thread::sleep_for(std::min(left, kAnyNap));
      } else {
        op->chunks[op->next]->block(std::min(left, std::chrono::microseconds(1000)));
      }
    } else if (yield_now(wait.yield(), ++polls, 256)) {
      sched_yield();
      wait.yielded();
    }
  }
}

namespace {

P2pInFlight& in_flight(Communicator::Impl& impl) {
  if (!impl.p2p_in_flight) {
    impl.p2p_in_flight = std::make_unique<P2pInFlight>(impl);
    // Every later call's waits move the pending ones too (a peer may wait for them before it joins that call).
    impl.request_table.also_progress = [&impl] {
      if (impl.p2p_in_flight) impl.p2p_in_flight->sweep();
    };
  }
  return *impl.p2p_in_flight;
}

Work post_p2p(Communicator::Impl& impl, bool is_send, void* buf, size_t count, DataType dtype, int peer) {
  impl.async.drain();  // queued calls first (call order), and nobody else drives the endpoints while we post
  const char* name = is_send ? "isend" : "irecv";
  impl.check_not_in_group(name);
  check_dtype(impl.rank, name, dtype);  // the checks of send and recv (call_checks.h)
  check_rank(impl.rank, impl.size, name, "peer", peer);
  if (peer == impl.rank) {
    throw InvalidArgument(fmt::format("rank {}: {}: peer {} is this rank (a group's send and recv may pair with "
                                      "themselves)", impl.rank, name, peer));
  }
  const size_t bytes = checked_bytes(impl.rank, name, count, dtype, 1);
  check_buffer(impl.rank, name, name, buf, count);
  const algo::CallInfo what{name, count, dtype, ReduceOp::kSum, false, peer, "peer"};
  impl.check_usable(what);
  P2pInFlight& pending = in_flight(impl);
  uint64_t& counter = is_send ? impl.calls.p2p_sent[static_cast<size_t>(peer)] : impl.calls.p2p_received[static_cast<size_t>(peer)];
  const transport::Tag tag{transport::p2p_tag(counter++),
                           make_meta(OpKind::kSendRecv, dtype, ReduceOp::kSum, 0, count)};
  return pending.post(is_send, buf, bytes, count, dtype, peer, tag);
}

}  // namespace

Work Communicator::isend(const void* buf, size_t count, DataType dtype, int peer) {
  return post_p2p(impl(), true, const_cast<void*>(buf), count, dtype, peer);  // only read
}

Work Communicator::irecv(void* buf, size_t count, DataType dtype, int peer) {
  return post_p2p(impl(), false, buf, count, dtype, peer);
}

Work Communicator::irecv_any(void* buf, size_t count, DataType dtype) {
  Impl& c = impl();
  c.async.drain();
  const char* name = "irecv_any";
  c.check_not_in_group(name);
  check_dtype(c.rank, name, dtype);
  if (c.size < 2) {
    throw InvalidArgument(fmt::format("rank {}: {}: a communicator of {} rank has no peer to receive from", c.rank,
                                      name, c.size));
  }
  const size_t bytes = checked_bytes(c.rank, name, count, dtype, 1);
  check_buffer(c.rank, name, name, buf, count);
  c.check_usable(algo::CallInfo{name, count, dtype, ReduceOp::kSum, false, -1, "peer"});
  return in_flight(c).post_any(buf, bytes, count, dtype);
}

int Communicator::recv_any(void* buf, size_t count, DataType dtype) {
  Work work = irecv_any(buf, count, dtype);
  work.wait();
  return work.source();
}

}  // namespace tbcoll
