// The endpoints a context handed out, kept so that Context::abort() (from any thread) can break them all. The
// communicator owns the endpoints and destroys them before the context, so the pointers stay valid.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

namespace tbcoll::transport {

template <typename EndpointT>
class EndpointList {
 public:
  /// Remembers endpoint and hands it out as the interface type.
  template <typename Base>
  std::unique_ptr<Base> add(std::unique_ptr<EndpointT> endpoint) {
    std::lock_guard<std::mutex> lock(mutex_);
    endpoints_.push_back(endpoint.get());
    return endpoint;
  }
  /// Calls abort() on every endpoint handed out. Any thread.
  void abort_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (EndpointT* endpoint : endpoints_) endpoint->abort();
  }

 private:
  std::mutex mutex_;
  std::vector<EndpointT*> endpoints_;
};

}  // namespace tbcoll::transport
