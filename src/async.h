// The progress thread behind Communicator's asynchronous calls (see async.cc).
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll {

class AsyncQueue {
 public:
  AsyncQueue();
  ~AsyncQueue();  // waits for queued calls
  /// Queues call for the progress thread (started on first use); the Work completes when it returned.
  Work submit(std::function<void()> call);
  /// Blocks until every queued call finished. Cheap when nothing was ever queued.
  void drain() {
    if (pending_.load(std::memory_order_acquire) != 0) wait_empty();
  }

 private:
  void wait_empty();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<int> pending_{0};
};

}  // namespace tbcoll
