// WorkTbcoll: a tbcoll call as torch's c10d sees it (c10d::Work), with a future that completes when the call does.
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::torch_pg {

/// torch's form of a tbcoll error: a c10::Error (Python RuntimeError) whose message starts with "[tbcoll]"; a
/// timeout says "Timed out" as gloo's do.
std::exception_ptr torch_error(const std::exception& error, double timeout_s);

class WorkTbcoll final : public c10d::Work {
 public:
  /// keep: the tensors the call reads and writes (alive until it completed); outputs: what result() and the
  /// future give; after: run once on success before the Work counts as complete (copies out of a staging
  /// buffer), on the thread that completes it.
  /// profiling_title and inputs: the profiler's record of the call ("tbcoll:all_reduce", its tensors' shapes).
  WorkTbcoll(int rank, c10d::OpType type, const char* profiling_title, const std::vector<at::Tensor>& inputs,
             tbcoll::Work work, std::vector<at::Tensor> keep,
             std::vector<at::Tensor> outputs, std::function<void()> after, double timeout_s, int source_rank = -1);
  /// A call not started yet (deferred.h): call(true) queues it and returns its Work, call(false) runs it on the
  /// calling thread (blocking). owner: its process group. Hold it with deferred::hold.
  WorkTbcoll(int rank, c10d::OpType type, const char* profiling_title, const std::vector<at::Tensor>& inputs,
             std::function<tbcoll::Work(bool queued)> call, const void* owner, std::vector<at::Tensor> keep,
             std::vector<at::Tensor> outputs, std::function<void()> after, double timeout_s);

  /// Never blocks (a test of the call).
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  /// Blocks until the call finished, within the communicator's deadline (torch's timeout argument is not a
  /// second deadline: the process group's is); throws its error.
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  /// Completes when the call does (on the thread that finishes it), with the outputs or the error.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  /// A held call: queues it (deferred.h, under the slot's lock; never calls back there). A refusal is kept for
  /// wait() and the future.
  void start_queued();
  const void* owner() const { return owner_; }

 private:
  // After work_ exists: keeps the tensors the call uses alive until it finished, even if this Work goes first.
  void hold_tensors_until_done();
  // Runs after (on success), marks the Work complete (ending its profiler range) and the future; once.
  void complete(std::exception_ptr error);

  tbcoll::Work work_;
  std::function<tbcoll::Work(bool queued)> call_;  // until started: the call (deferred.h)
  const void* owner_ = nullptr;
  std::exception_ptr start_error_;  // the queued form's refusal (torch's form), for whoever looks next
  std::vector<at::Tensor> keep_;
  std::vector<at::Tensor> outputs_;
  std::function<void()> after_;
  double timeout_s_;
  int source_rank_;
  std::mutex complete_mutex_;  // held while complete() runs: a second caller waits for the first
  bool completed_once_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace tbcoll::torch_pg
