// ProcessGroupTbcoll: torch.distributed's backend "tbcoll" in C++ (c10d::ProcessGroup over a tbcoll::Communicator).
//
// Every call returns a WorkTbcoll at once. A large one is queued on the communicator at once (its progress thread
// runs it while the caller computes); a small one is held unstarted (deferred.h) and run on the thread that waits
// for it, torch's blocking form, or queued as soon as anything else happens first. send/recv are tbcoll's
// non-blocking isend/irecv. CPU tensors only, contiguous, of a dtype tbcoll has (complex ones move as their real
// pairs where the op allows it). One thread at a time calls into a process group (as into a Communicator).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::torch_pg {

class ProcessGroupTbcoll final : public c10d::ProcessGroup {
 public:
  /// Builds the communicator: rendezvous through store (under the "tbcoll" prefix), timeout for every call.
  /// Blocks until every rank joined or the timeout passed.
  ProcessGroupTbcoll(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupTbcoll() override;

  const std::string getBackendName() const override { return "tbcoll"; }
  /// The communicator underneath (transport_name(), algorithm(), ...).
  Communicator& communicator() { return *comm_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  /// Refused: tbcoll matches messages per pair of ranks (Communicator::irecv).
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  /// As gloo's: rank 0 hears from every rank within opts.timeout, else names the ranks it did not hear from
  /// (all of them with wait_all_ranks) and aborts the communicator; blocks.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  /// Every rank starts at 0; each collective and send/recv counts one (as gloo's).
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

 private:
  // inputs: what the profiler records (the op's input tensors and their shapes).
  c10::intrusive_ptr<c10d::Work> make_work(c10d::OpType type, const char* title, Work work,
                                           const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> keep, std::vector<at::Tensor> outputs,
                                           std::function<void()> after = nullptr, int source_rank = -1);
  // A collective: call(true) queues it, call(false) runs it blocking (it captures what it needs by value). Moving
  // up to deferred::kMostBytes (bytes) it is held unstarted (deferred.h), else queued at once; either way the call
  // held before is queued first. Refusals at queuing are torch's errors.
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, const char* title, size_t bytes,
                                       std::function<Work(bool queued)> call, const std::vector<at::Tensor>& inputs,
                                       std::vector<at::Tensor> keep, std::vector<at::Tensor> outputs,
                                       std::function<void()> after = nullptr);
  void count_call();
  // all_reduce (SUM) of a sparse COO tensor, in place; blocks, returns a completed Work.
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(at::Tensor& t, const c10d::AllreduceOptions& opts);

  std::unique_ptr<Communicator> comm_;
  double timeout_s_;
};

/// Backend.register_backend's creator: (store, rank, size, timeout) -> the process group.
c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                             const std::chrono::duration<float>& timeout);

}  // namespace tbcoll::torch_pg
