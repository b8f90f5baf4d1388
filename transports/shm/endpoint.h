// shm endpoint: one single-producer/single-consumer frame queue per direction. The outgoing queue lives in
// this rank's segment, the incoming one in the peer's. Driven by the caller's thread; test() never blocks;
// block() sleeps on an address (platform::wait_on_address; the other side wakes it only when it announced it
// sleeps, so the fast path never makes a system call).
#pragma once

#include <deque>
#include <memory>

#include "tbcoll/transport.hpp"
#include "transports/queued_request.h"
#include "transports/shm/process_watch.h"
#include "transports/shm/segment.h"

namespace tbcoll::shm {

// done counts payload bytes copied.
struct Operation : transport::QueuedOperation {
  bool started = false;  ///< first frame written (sends) or matched (receives)
};

class Endpoint final : public transport::Endpoint {
 public:
  Endpoint(int rank, int peer, Queue* out, Queue* in, SegmentHeader* own, SegmentHeader* remote);
  ~Endpoint() override;

  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override;
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override;
  std::optional<transport::Arrival> probe() override;
  int peer() const override { return peer_; }

  void progress();
  void block(std::chrono::microseconds max_wait);
  void abandon(const std::shared_ptr<Operation>& op);

 private:
  bool progress_sends();
  bool progress_recvs();
  // Wakes the peer if it sleeps (a Sleep value read from one of its flags): on counter, or on its doorbell.
  void wake(uint32_t sleep, const std::atomic<uint64_t>* counter);
  void check_peer();
  void check_peer_call();
  [[noreturn]] void fail(const std::string& message);

  int rank_;
  int peer_;
  Queue* out_;
  Queue* in_;
  SegmentHeader* own_;
  SegmentHeader* remote_;
  uint64_t out_head_ = 0;        ///< our copy of out_->head (we are its only writer)
  uint64_t out_tail_cached_ = 0;  ///< last seen out_->tail
  uint64_t in_tail_ = 0;         ///< our copy of in_->tail
  std::deque<std::shared_ptr<Operation>> sends_;
  std::deque<std::shared_ptr<Operation>> recvs_;
  std::string broken_;
  unsigned idle_polls_ = 0;
  ProcessWatch peer_process_;
};

}  // namespace tbcoll::shm
