// The process group's calls that run on the caller's thread before returning a completed Work: the monitored
// barrier (rank 0 hears from every rank within a timeout and names those it did not hear from) and the all-reduce
// of sparse tensors (their nonzeros gathered from every rank and summed).
#include <thread>

#include <fmt/format.h>

#include "deferred.h"
#include "process_group.h"
#include "tensors.h"
#include "work.h"

namespace tbcoll::torch_pg {

namespace {

// Waits for work until deadline, polling (test() drives a send or receive); false at the deadline.
bool wait_until(const Work& work, Clock::time_point deadline) {
  while (!work.test()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

}  // namespace

// As gloo's: every rank sends a token to rank 0 and waits for its answer; rank 0 waits for each rank's token within
// the timeout, then answers them all. A rank that fails leaves receives posted, so the communicator is aborted
// (its peers' waits then fail at once rather than at their deadline).
void ProcessGroupTbcoll::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const auto timeout = opts.timeout == c10d::kUnsetTimeout
                           ? std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000))
                           : opts.timeout;
  const auto deadline = Clock::now() + timeout;
  deferred::flush();  // calls made before it go first
  count_call();
  uint8_t token = 0;
  if (rank_ != 0) {
    try {
      Work sent = comm_->isend(&token, 1, DataType::kUint8, 0);
      Work answer = comm_->irecv(&token, 1, DataType::kUint8, 0);
      if (wait_until(sent, deadline) && wait_until(answer, deadline)) return;
    } catch (const Error&) {
    }
    comm_->abort();
    refuse("monitored_barrier", fmt::format("Rank {} successfully reached monitoredBarrier, but received errors "
                                            "while waiting for send/recv from rank 0. Please check rank 0 logs for "
                                            "faulty rank.", rank_));
  }
  std::vector<uint8_t> tokens(static_cast<size_t>(size_));
  std::vector<Work> receives;
  for (int r = 1; r < size_; ++r) receives.push_back(comm_->irecv(&tokens[static_cast<size_t>(r)], 1,
                                                                   DataType::kUint8, r));
  std::vector<int> failed;
  for (int r = 1; r < size_; ++r) {
    bool ok = false;
    try {
      ok = Clock::now() < deadline && wait_until(receives[static_cast<size_t>(r - 1)], deadline);
    } catch (const Error&) {
    }
    if (ok) continue;
    if (timeout.count() == 0) {
      comm_->abort();
      refuse("monitored_barrier", fmt::format("Rank 0 timed out in monitoredBarrier after {} ms", timeout.count()));
    }
    failed.push_back(r);
    if (!wait_all_ranks) break;
  }
  if (!failed.empty()) {
    comm_->abort();
    std::string ranks = fmt::format("{}", failed[0]);
    for (size_t i = 1; i < failed.size(); ++i) ranks += fmt::format(", {}", failed[i]);
    refuse("monitored_barrier", fmt::format("{} {} failed to pass monitoredBarrier in {} ms",
                                            failed.size() == 1 ? "Rank" : "Ranks", ranks, timeout.count()));
  }
  std::vector<Work> answers;
  for (int r = 1; r < size_; ++r) answers.push_back(comm_->isend(&token, 1, DataType::kUint8, r));
  for (Work& w : answers) w.wait();
}

// The sum of sparse (COO) tensors: every rank's nonzero count, then its indices and values padded to the largest
// count, gathered; rank r's part of each is a sparse tensor; their sum, coalesced, replaces the input.
c10::intrusive_ptr<c10d::Work> ProcessGroupTbcoll::sparse_allreduce(at::Tensor& t, const c10d::AllreduceOptions& opts) {
  if (opts.reduceOp.op_ != c10d::ReduceOp::SUM) refuse("allreduce", "sparse tensors take SUM only");
  deferred::flush();
  if (!t.device().is_cpu()) refuse("allreduce", "the sparse tensor is not on the CPU");
  const at::Tensor input = t.coalesce();
  at::Tensor counts = at::empty({size_}, at::kLong);
  at::Tensor mine = at::full({1}, input._nnz(), at::kLong);
  comm_->all_gather(mine.data_ptr(), counts.data_ptr(), 1, DataType::kInt64);
  const int64_t most = counts.max().item<int64_t>();
  at::Tensor indices = at::zeros({input.sparse_dim(), most}, at::kLong);
  indices.narrow(1, 0, input._nnz()).copy_(input._indices());
  std::vector<int64_t> value_shape = input._values().sizes().vec();
  value_shape[0] = most;
  at::Tensor values = at::zeros(value_shape, input._values().options());
  values.narrow(0, 0, input._nnz()).copy_(input._values());
  at::Tensor all_indices = at::empty({size_, input.sparse_dim(), most}, at::kLong);
  std::vector<int64_t> all_shape = value_shape;
  all_shape.insert(all_shape.begin(), size_);
  at::Tensor all_values = at::empty(all_shape, values.options());
  const Buffer v = buffer_of(values, "allreduce", "the sparse tensor's values");
  comm_->all_gather(indices.data_ptr(), all_indices.data_ptr(), static_cast<size_t>(indices.numel()),
                    DataType::kInt64);
  comm_->all_gather(v.data, all_values.data_ptr(), v.count, v.dtype);
  at::Tensor sum;
  for (int r = 0; r < size_; ++r) {
    const int64_t n = counts[r].item<int64_t>();
    at::Tensor part = at::sparse_coo_tensor(all_indices[r].narrow(1, 0, n), all_values[r].narrow(0, 0, n),
                                            input.sizes(), input.options());
    sum = r == 0 ? part : sum + part;
  }
  t.copy_(sum.coalesce());
  count_call();
  auto work = c10::make_intrusive<WorkTbcoll>(rank_, c10d::OpType::ALLREDUCE, "tbcoll:all_reduce",
                                              std::vector<at::Tensor>{}, tbcoll::Work(), std::vector<at::Tensor>{},
                                              std::vector<at::Tensor>{t}, nullptr, timeout_s_);
  return work;
}

}  // namespace tbcoll::torch_pg
