#include "work.h"

#include <fmt/format.h>

#include <ATen/core/jit_type.h>

#include "deferred.h"

namespace tbcoll::torch_pg {

std::exception_ptr torch_error(const std::exception& error, double timeout_s) {
  if (dynamic_cast<const TimeoutError*>(&error) != nullptr) {
    return std::make_exception_ptr(
        c10::Error(fmt::format("[tbcoll] Timed out after {} s: {}", timeout_s, error.what()), ""));
  }
  return std::make_exception_ptr(c10::Error(fmt::format("[tbcoll] {}", error.what()), ""));
}

WorkTbcoll::WorkTbcoll(int rank, c10d::OpType type, const char* profiling_title,
                       const std::vector<at::Tensor>& inputs, tbcoll::Work work, std::vector<at::Tensor> keep,
                       std::vector<at::Tensor> outputs, std::function<void()> after, double timeout_s,
                       int source_rank)
    : c10d::Work(rank, type, profiling_title, inputs),
      work_(std::move(work)),
      keep_(std::move(keep)),
      outputs_(std::move(outputs)),
      after_(std::move(after)),
      timeout_s_(timeout_s),
      source_rank_(source_rank) {
  hold_tensors_until_done();
}

WorkTbcoll::WorkTbcoll(int rank, c10d::OpType type, const char* profiling_title,
                       const std::vector<at::Tensor>& inputs, std::function<tbcoll::Work(bool queued)> call,
                       const void* owner, std::vector<at::Tensor> keep, std::vector<at::Tensor> outputs,
                       std::function<void()> after, double timeout_s)
    : c10d::Work(rank, type, profiling_title, inputs),
      call_(std::move(call)),
      owner_(owner),
      keep_(std::move(keep)),
      outputs_(std::move(outputs)),
      after_(std::move(after)),
      timeout_s_(timeout_s),
      source_rank_(-1) {}

void WorkTbcoll::hold_tensors_until_done() {
  if (!keep_.empty()) work_.on_done([keep = std::move(keep_)](std::exception_ptr) {});  // the callback holds them now
}

void WorkTbcoll::start_queued() {
  std::function<tbcoll::Work(bool)> call = std::move(call_);
  call_ = nullptr;
  if (!call) return;
  try {
    work_ = call(true);
    hold_tensors_until_done();
  } catch (const std::exception& e) {
    start_error_ = torch_error(e, timeout_s_);
  }
}

void WorkTbcoll::complete(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(complete_mutex_);
  if (completed_once_) return;
  if (!error && after_) {
    try {
      after_();
    } catch (const std::exception& e) {
      error = torch_error(e, timeout_s_);
    }
  }
  after_ = nullptr;
  keep_.clear();
  error_ = error;
  completed_once_ = true;
  finish(error);  // c10d::Work: completed_, exception_, the profiler range's end
  if (future_) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }
}

bool WorkTbcoll::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(complete_mutex_);
    if (completed_once_) return true;
  }
  deferred::start(this);  // held: it starts now (someone is looking); else this orders after its start
  if (start_error_) {
    complete(start_error_);
    return true;
  }
  try {
    if (!work_.test()) return false;
  } catch (const std::exception& e) {
    complete(torch_error(e, timeout_s_));
    return true;
  }
  complete(nullptr);
  return true;
}

bool WorkTbcoll::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkTbcoll::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int WorkTbcoll::sourceRank() const {
  const int source = source_rank_ >= 0 ? source_rank_ : work_.source();  // a recv from any source: once finished
  TORCH_CHECK(source >= 0, "[tbcoll] sourceRank() is only known for a recv's Work (from any source: once finished)");
  return source;
}

std::vector<at::Tensor> WorkTbcoll::result() { return outputs_; }

bool WorkTbcoll::wait(std::chrono::milliseconds /*timeout*/) {
  if (deferred::take(this)) {  // not started: it runs here, blocking (deferred.h)
    std::function<tbcoll::Work(bool)> call = std::move(call_);
    call_ = nullptr;
    try {
      call(false);
      complete(nullptr);
    } catch (const std::exception& e) {
      complete(torch_error(e, timeout_s_));
    }
  } else if (start_error_) {
    complete(start_error_);
  } else {
    try {
      work_.wait();
      complete(nullptr);
    } catch (const std::exception& e) {
      complete(torch_error(e, timeout_s_));
    }
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(complete_mutex_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkTbcoll::getFuture() {
  deferred::start(this);  // a future completes by itself: the call must be going
  {
    std::lock_guard<std::mutex> lock(complete_mutex_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    if (completed_once_) {
      if (error_) {
        future_->setError(error_);
      } else {
        future_->markCompleted(c10::IValue(outputs_));
      }
      return future_;
    }
  }
  if (start_error_) {
    complete(start_error_);
    return future_;
  }
  // The callback holds this Work until the call finished (the thread that finishes it completes both).
  auto self = c10::intrusive_ptr<WorkTbcoll>::unsafe_reclaim_from_nonowning(this);
  work_.on_done([self](std::exception_ptr error) {
    if (!error) {
      self->complete(nullptr);
      return;
    }
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      self->complete(torch_error(e, self->timeout_s_));
    }
  });
  return future_;
}

}  // namespace tbcoll::torch_pg
