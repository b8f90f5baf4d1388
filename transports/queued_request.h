// The Request of transports whose endpoints keep FIFO queues of operations and make progress on demand
// (tcp, shm): test() drives the endpoint, block() sleeps in it, and dropping an unfinished request tells the
// endpoint its stream is out of sync.
#pragma once

#include <memory>

#include "tbcoll/transport.h"

namespace tbcoll::transport {

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

}  // namespace tbcoll::transport
