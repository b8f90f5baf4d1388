// The progress thread behind Communicator's asynchronous calls (see async.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

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
  /// True when no queued call is waiting or running (the caller's thread may drive the endpoints).
  bool idle() const { return pending_.load(std::memory_order_acquire) == 0; }

  struct Impl;  // public for Work::State, which runs a call inline when it can

 private:
  void wait_empty();
  std::shared_ptr<Impl> impl_;  // shared with the Works, which may run their call inline (Work::wait)
  std::atomic<int> pending_{0};
};

/// What a Work refers to: one call, completed once by whoever finished it (the progress thread, a waiting thread
/// that ran it inline, or the driver of a non-blocking send/recv: p2p_async.h).
struct TBCOLL_LOCAL Work::State {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  bool completing = false;  ///< complete() runs the callbacks; done follows
  std::exception_ptr error;
  int source = -1;  ///< receives: the rank the message came from (Work::source)
  std::weak_ptr<AsyncQueue::Impl> queue;  // to run the call inline when it is next and not started
  /// Set for calls no thread runs (non-blocking send/recv): makes progress on the caller's thread, test() with
  /// block = false (never blocks), wait() with block = true until done (bounded by the call's deadline). It
  /// completes the state itself.
  std::function<void(bool block)> drive;
  /// Run once, by the thread that completes the state (Work::on_done).
  std::vector<std::function<void(std::exception_ptr)>> callbacks;

  /// Runs the callbacks, then marks the call finished with error (null: success) and wakes the waiters. Once.
  void complete(std::exception_ptr failure);
};

}  // namespace tbcoll
