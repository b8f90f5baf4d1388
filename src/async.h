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
  /// Queues call for the progress thread (started on first use); the Work completes when it returned. A wait on
  /// the Work runs the call on the waiting thread if it is next in line and nobody started it yet.
  Work submit(std::function<void()> call);
  /// Blocks until every queued call finished. Cheap when nothing was ever queued.
  void drain() {
    if (pending_.load(std::memory_order_acquire) != 0) wait_empty();
  }

  struct Impl;  // public for Work::State, which runs a call inline when it can

 private:
  void wait_empty();
  std::shared_ptr<Impl> impl_;  // shared with the Works, which may run their call inline (Work::wait)
  std::atomic<int> pending_{0};
};

}  // namespace tbcoll
