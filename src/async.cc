// Asynchronous calls: a per-communicator progress thread runs queued calls in order.
//
// The thread starts with the first asynchronous call. Blocking calls drain the queue first, so the order of
// calls, which every rank must agree on, is the order the user made them in. Only one thread ever drives the
// communicator at a time: the progress thread while the queue is not empty, the caller's thread otherwise.
//
// A wait on a call that nobody started yet and that is next in line runs it on the waiting thread: a caller that
// queues a call and waits for it at once (torch.distributed's blocking calls go through Work objects, say) pays
// neither the wake-up of the progress thread nor its own (a futex wake each, ~25 us) but the call alone, while a
// call left to run in the background still overlaps with whatever the caller does meanwhile.
#include "async.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/cpu.h"
#include "communicator.h"
#include "platform/platform.h"

namespace tbcoll {

// The callbacks run before the call counts as finished, so a wait() that returns finds them done; one added while
// they run (on_done from another thread) runs here too.
void Work::State::complete(std::exception_ptr failure) {
  std::unique_lock<std::mutex> lock(mutex);
  if (done || completing) return;
  completing = true;
  error = failure;
  while (!callbacks.empty()) {
    std::vector<std::function<void(std::exception_ptr)>> run;
    run.swap(callbacks);
    lock.unlock();
    for (auto& callback : run) callback(failure);
    lock.lock();
  }
  done = true;
  lock.unlock();
  finished.notify_all();
}

struct AsyncQueue::Impl {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Work::State>>> queue;
  bool stop = false;
  bool running = false;  // a call is running, on the progress thread or inline on a waiting thread
  std::thread thread;
  std::atomic<int>* pending = nullptr;

  void loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return !running && (stop || !queue.empty()); });
      if (queue.empty()) return;  // stop requested and nothing left
      run_front(lock);
    }
  }

  /// Runs the call at the front of the queue if it belongs to state and no call is running; false otherwise.
  bool run_inline(const std::shared_ptr<Work::State>& state) {
    std::unique_lock<std::mutex> lock(mutex);
    if (running || queue.empty() || queue.front().second != state) return false;
    run_front(lock);
    return true;
  }

 private:
  // Pops the front call and runs it with the lock released; returns with the lock held.
  void run_front(std::unique_lock<std::mutex>& lock) {
    auto [call, state] = std::move(queue.front());
    queue.pop_front();
    running = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      call();
    } catch (...) {
      error = std::current_exception();
    }
    state->complete(error);
    lock.lock();
    running = false;
    pending->fetch_sub(1, std::memory_order_acq_rel);
    changed.notify_all();
  }
};

bool Work::test() const {
  if (!state_) return true;
  if (state_->drive) state_->drive(false);
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->done && state_->error) std::rethrow_exception(state_->error);
  return state_->done;
}

void Work::wait() const {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->done) {
      if (state_->error) std::rethrow_exception(state_->error);
      return;
    }
  }
  if (state_->drive) state_->drive(true);
  if (auto queue = state_->queue.lock()) queue->run_inline(state_);
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->finished.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

int Work::source() const {
  if (!state_) return -1;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done ? state_->source : -1;
}

void Work::on_done(std::function<void(std::exception_ptr error)> callback) const {
  if (!state_) {
    callback(nullptr);
    return;
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->done) {
      state_->callbacks.push_back(std::move(callback));
      return;
    }
    error = state_->error;
  }
  callback(error);
}

AsyncQueue::AsyncQueue() : impl_(std::make_shared<Impl>()) { impl_->pending = &pending_; }

AsyncQueue::~AsyncQueue() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->changed.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();  // queued calls finish first (each has a deadline)
  // A call a waiting thread runs inline holds the communicator too: wait for it (the thread may not have started).
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->changed.wait(lock, [&] { return !impl_->running && impl_->queue.empty(); });
}

Work AsyncQueue::submit(std::function<void()> call) {
  auto state = std::make_shared<Work::State>();
  state->queue = impl_;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (!impl_->thread.joinable()) {
      impl_->thread = std::thread([impl = impl_.get()] {
        mark_thread_sharing_cpu();  // it runs beside the caller's thread, on the caller's CPUs
        platform::prefer_fast_cores();
        impl->loop();
      });
    }
    impl_->queue.emplace_back(std::move(call), state);
    pending_.fetch_add(1, std::memory_order_acq_rel);
  }
  impl_->changed.notify_all();
  return Work(state);
}

void AsyncQueue::wait_empty() {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->changed.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
}

namespace {

// The queued form of a call. Arguments were checked before queuing, so a call that fails here failed midway or
// on the communicator's state; the calls queued after it would then run out of step with the peers' (which may
// not have failed at the same point): the communicator is broken, and they fail fast. The Impl is stable across
// moves of the Communicator.
template <typename Call>
std::function<void()> queued(Communicator::Impl* impl, Call call) {
  return [impl, call] {
    try {
      call();
    } catch (const Error& error) {
      impl->mark_broken(std::string("an earlier asynchronous call failed: ") + error.what());
      throw;
    }
  };
}

}  // namespace

// The one asynchronous path: bad arguments are reported by the call itself, before anything is queued (as a
// blocking call would, refusal notices included); the queued call runs the one call path.
Work Communicator::Impl::submit(OpKind kind, const CallArgs& args) {
  const CollectiveTraits& traits = *traits_of(kind);
  check_not_in_group(traits.name, "_async");
  try {
    prepare(traits, args);
  } catch (const InvalidArgument&) {
    if (traits.tells_refusals) refuse_call();
    throw;
  }
  return async.submit(queued(this, [this, &traits, args] { collective(traits, args); }));
}

Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  return impl().submit(OpKind::kAllReduce, {send, recv, count, dtype, op, 0});
}

Work Communicator::all_gather_async(const void* send, void* recv, size_t count, DataType dtype) {
  return impl().submit(OpKind::kAllGather, {send, recv, count, dtype, ReduceOp::kSum, 0});
}

Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  return impl().submit(OpKind::kReduceScatter, {send, recv, count, dtype, op, 0});
}

Work Communicator::reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
  return impl().submit(OpKind::kReduce, {send, recv, count, dtype, op, root});
}

Work Communicator::broadcast_async(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl().submit(OpKind::kBroadcast, {send, recv, count, dtype, ReduceOp::kSum, root});
}

Work Communicator::all_to_all_async(const void* send, void* recv, size_t count, DataType dtype) {
  return impl().submit(OpKind::kAllToAll, {send, recv, count, dtype, ReduceOp::kSum, 0});
}

Work Communicator::gather_async(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl().submit(OpKind::kGather, {send, recv, count, dtype, ReduceOp::kSum, root});
}

Work Communicator::scatter_async(const void* send, void* recv, size_t count, DataType dtype, int root) {
  return impl().submit(OpKind::kScatter, {send, recv, count, dtype, ReduceOp::kSum, root});
}

Work Communicator::barrier_async() { return impl().submit(OpKind::kBarrier, {}); }

// The counts and displacements are copied: the caller's arrays may go once the call returned.
Work Communicator::all_to_allv_async(const void* send, void* recv, const size_t* send_counts,
                                     const size_t* send_displs, const size_t* recv_counts, const size_t* recv_displs,
                                     DataType dtype) {
  Impl* impl = &this->impl();
  impl->check_not_in_group("all_to_allv", "_async");
  auto layout = std::make_shared<const Impl::AllToAllvLayout>(
      impl->check_all_to_allv(send, recv, send_counts, send_displs, recv_counts, recv_displs, dtype));
  return impl->async.submit(queued(impl, [=] { impl->all_to_allv(send, recv, *layout, dtype); }));
}

}  // namespace tbcoll
