// The Request of transports whose endpoints keep FIFO queues of operations and make progress on demand
// (tcp, shm): test() drives the endpoint, block() sleeps in it, and dropping an unfinished request tells the
// endpoint its stream is out of sync.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "tbcoll/transport.hpp"

namespace tbcoll::transport {

/// What such endpoints queue: one send or receive of bytes at buf, matched by tag. Transports extend it.
struct QueuedOperation {
  uint8_t* buf = nullptr;
  size_t bytes = 0;
  Tag tag;
  size_t done = 0;  ///< progress, in the transport's own unit
  bool complete = false;
};


template <typename EndpointT, typename OperationT>
class QueuedRequest final : public Request {
 public:
  QueuedRequest(EndpointT* endpoint, std::shared_ptr<OperationT> op) : endpoint_(endpoint), op_(std::move(op)) {}
  ~QueuedRequest() override {
    if (!op_->complete) endpoint_->abandon(op_);
  }
  bool test() override {
    if (op_->complete) return true;
    endpoint_->progress();
    return op_->complete;
  }
  void block(std::chrono::microseconds max_wait) override {
    if (!op_->complete) endpoint_->block(max_wait);
  }

 private:
  EndpointT* endpoint_;
  std::shared_ptr<OperationT> op_;
};

/// An abandoned operation's buffer is no longer the caller's: nothing may be read or written there any more.
template <typename OperationT, typename... Queues>
void forget_buffer(const std::shared_ptr<OperationT>& op, Queues&... queues) {
  for (auto* queue : {&queues...}) {
    for (auto& queued : *queue) {
      if (queued == op) queued->buf = nullptr;
    }
  }
}

/// Queues a new operation on queue and returns it with its request (the buffer is only read for sends).
template <typename EndpointT, typename OperationT, typename Queue>
std::pair<std::unique_ptr<Request>, OperationT*> enqueue(EndpointT* endpoint, Queue& queue, const void* buf,
                                                         size_t bytes, Tag tag) {
  auto op = std::make_shared<OperationT>();
  op->buf = static_cast<uint8_t*>(const_cast<void*>(buf));
  op->bytes = bytes;
  op->tag = tag;
  queue.push_back(op);
  OperationT* raw = op.get();
  return {std::make_unique<QueuedRequest<EndpointT, OperationT>>(endpoint, std::move(op)), raw};
}

}  // namespace tbcoll::transport
