#include "process_group.h"

#include <fmt/format.h>

#include "deferred.h"
#include "store.h"
#include "tensors.h"
#include "work.h"

namespace tbcoll::torch_pg {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

namespace {

// Runs a tbcoll call that may refuse its arguments; its errors become torch's (c10::Error, "[tbcoll] ...").
template <typename F>
auto guarded(double timeout_s, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const Error& error) {
    std::rethrow_exception(torch_error(error, timeout_s));
  }
}

size_t bytes_of(const Buffer& b) { return b.count * dtype_size(b.dtype); }

// The two forms of a call (ProcessGroupTbcoll::issue): queued, or run here.
std::function<Work(bool)> all_reduce_call(Communicator* comm, Buffer b, ReduceOp op) {
  return [comm, b, op](bool queued) {
    if (queued) return comm->all_reduce_async(b.data, b.data, b.count, b.dtype, op);
    comm->all_reduce(b.data, b.data, b.count, b.dtype, op);
    return Work();
  };
}

std::function<Work(bool)> all_gather_call(Communicator* comm, Buffer in, void* out) {
  return [comm, in, out](bool queued) {
    if (queued) return comm->all_gather_async(in.data, out, in.count, in.dtype);
    comm->all_gather(in.data, out, in.count, in.dtype);
    return Work();
  };
}

std::function<Work(bool)> gather_call(Communicator* comm, Buffer in, void* out, int root) {
  return [comm, in, out, root](bool queued) {
    if (queued) return comm->gather_async(in.data, out, in.count, in.dtype, root);
    comm->gather(in.data, out, in.count, in.dtype, root);
    return Work();
  };
}

std::function<Work(bool)> scatter_call(Communicator* comm, const void* in, Buffer out, int root) {
  return [comm, in, out, root](bool queued) {
    if (queued) return comm->scatter_async(in, out.data, out.count, out.dtype, root);
    comm->scatter(in, out.data, out.count, out.dtype, root);
    return Work();
  };
}

std::function<Work(bool)> reduce_scatter_call(Communicator* comm, const void* in, Buffer out, ReduceOp op) {
  return [comm, in, out, op](bool queued) {
    if (queued) return comm->reduce_scatter_async(in, out.data, out.count, out.dtype, op);
    comm->reduce_scatter(in, out.data, out.count, out.dtype, op);
    return Work();
  };
}

// all_to_allv with per-peer counts (owned by the call).
std::function<Work(bool)> all_to_allv_call(Communicator* comm, const void* in, void* out, DataType dtype,
                                           std::vector<size_t> send_counts, std::vector<size_t> recv_counts) {
  return [comm, in, out, dtype, send = std::move(send_counts), recv = std::move(recv_counts)](bool queued) {
    if (queued) return comm->all_to_allv_async(in, out, send.data(), nullptr, recv.data(), nullptr, dtype);
    comm->all_to_allv(in, out, send.data(), nullptr, recv.data(), nullptr, dtype);
    return Work();
  };
}

}  // namespace

ProcessGroupTbcoll::ProcessGroupTbcoll(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), timeout_s_(static_cast<double>(timeout.count()) / 1000.0) {
  Config config = guarded(timeout_s_, [] { return Config::from_env(); });
  config.rank = rank;
  config.world_size = size;
  config.timeout_s = timeout_s_;
  config.store = wrap_store(store);
  config.prefix = "tbcoll";
  comm_ = std::make_unique<Communicator>(guarded(timeout_s_, [&] { return Communicator::init(config); }));
  init();  // c10d::ProcessGroup's logging set-up
}

ProcessGroupTbcoll::~ProcessGroupTbcoll() { deferred::flush_owned_by(this); }

void ProcessGroupTbcoll::count_call() {
  if (sequenceNum_) sequenceNum_->increment();
}

void ProcessGroupTbcoll::setSequenceNumberForGroup() { sequenceNum_ = c10d::SequenceNum(0); }

uint64_t ProcessGroupTbcoll::getSequenceNumberForGroup() {
  if (!sequenceNum_) return 0;
  return sequenceNum_->get();
}

WorkPtr ProcessGroupTbcoll::make_work(OpType type, const char* title, Work work, const std::vector<at::Tensor>& inputs,
                                      std::vector<at::Tensor> keep, std::vector<at::Tensor> outputs,
                                      std::function<void()> after, int source_rank) {
  count_call();
  return c10::make_intrusive<WorkTbcoll>(rank_, type, title, inputs, std::move(work), std::move(keep),
                                         std::move(outputs), std::move(after), timeout_s_, source_rank);
}

WorkPtr ProcessGroupTbcoll::issue(OpType type, const char* title, size_t bytes, std::function<Work(bool)> call,
                                  const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> keep,
                                  std::vector<at::Tensor> outputs, std::function<void()> after) {
  if (bytes > deferred::kMostBytes) {
    deferred::flush();
    Work work = guarded(timeout_s_, [&] { return call(true); });
    return make_work(type, title, std::move(work), inputs, std::move(keep), std::move(outputs), std::move(after));
  }
  count_call();
  auto work = c10::make_intrusive<WorkTbcoll>(rank_, type, title, inputs, std::move(call), this, std::move(keep),
                                              std::move(outputs), std::move(after), timeout_s_);
  deferred::hold(work);  // queues the one held before
  return work;
}

WorkPtr ProcessGroupTbcoll::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const Buffer b = buffer_of(one(tensors, "broadcast"), "broadcast", "the tensor");
  Communicator* comm = comm_.get();
  const int root = static_cast<int>(opts.rootRank);
  return issue(OpType::BROADCAST, "tbcoll:broadcast", bytes_of(b), [comm, b, root](bool queued) {
    if (queued) return comm->broadcast_async(b.data, b.data, b.count, b.dtype, root);
    comm->broadcast(b.data, b.data, b.count, b.dtype, root);
    return Work();
  }, tensors, tensors, tensors);
}

WorkPtr ProcessGroupTbcoll::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  at::Tensor& t = one(tensors, "allreduce");
  if (t.is_sparse()) return guarded(timeout_s_, [&] { return sparse_allreduce(t, opts); });
  const Buffer b = buffer_of(t, "allreduce", "the tensor");
  const ReduceOp op = reduce_op(opts.reduceOp, "allreduce", t);
  premul_scaled(opts.reduceOp, t, /*in_place=*/true);
  return issue(OpType::ALLREDUCE, "tbcoll:all_reduce", bytes_of(b), all_reduce_call(comm_.get(), b, op), tensors,
               tensors, tensors);
}

// One all_reduce of the tensors laid end to end (one dtype), copied back at completion.
WorkPtr ProcessGroupTbcoll::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) refuse("allreduce_coalesced", "no tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    buffer_of(tensors[i], "allreduce_coalesced", fmt::format("tensor {}", i));
    if (tensors[i].scalar_type() != tensors[0].scalar_type()) {
      refuse("allreduce_coalesced", fmt::format("tensor {} is {} but tensor 0 is {}: one dtype for all", i,
                                                c10::toString(tensors[i].scalar_type()),
                                                c10::toString(tensors[0].scalar_type())));
    }
  }
  at::Tensor flat = flatten(tensors);
  const Buffer b = buffer_of(flat, "allreduce_coalesced", "the tensors");
  const ReduceOp op = reduce_op(opts.reduceOp, "allreduce_coalesced", flat);
  premul_scaled(opts.reduceOp, flat, /*in_place=*/true);  // flat is a copy
  std::vector<at::Tensor> outputs = tensors;
  std::function<void()> after = [flat, outputs] { unflatten(flat, outputs); };
  return issue(OpType::ALLREDUCE_COALESCED, "tbcoll:all_reduce", bytes_of(b), all_reduce_call(comm_.get(), b, op),
               tensors, {flat}, std::move(outputs), std::move(after));
}

WorkPtr ProcessGroupTbcoll::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  at::Tensor& t = one(tensors, "reduce");
  const Buffer b = buffer_of(t, "reduce", "the tensor");
  const ReduceOp op = reduce_op(opts.reduceOp, "reduce", t);
  premul_scaled(opts.reduceOp, t, /*in_place=*/true);
  Communicator* comm = comm_.get();
  const int root = static_cast<int>(opts.rootRank);
  return issue(OpType::REDUCE, "tbcoll:reduce", bytes_of(b), [comm, b, op, root](bool queued) {
    if (queued) return comm->reduce_async(b.data, b.data, b.count, b.dtype, op, root);
    comm->reduce(b.data, b.data, b.count, b.dtype, op, root);
    return Work();
  }, tensors, tensors, tensors);
}

WorkPtr ProcessGroupTbcoll::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  const Buffer in = buffer_of(input, "_allgather_base", "the input");
  const Buffer out = buffer_of(output, "_allgather_base", "the output");
  if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * size_) {
    refuse("_allgather_base", fmt::format("the output has {} elements of {}; it needs {} ({} ranks x {}) of {}",
                                          output.numel(), c10::toString(output.scalar_type()),
                                          input.numel() * size_, size_, input.numel(),
                                          c10::toString(input.scalar_type())));
  }
  return issue(OpType::_ALLGATHER_BASE, "tbcoll:all_gather_into_tensor", bytes_of(out),
               all_gather_call(comm_.get(), in, out.data), {input}, {output, input}, {output});
}

WorkPtr ProcessGroupTbcoll::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                      const c10d::AllgatherOptions&) {
  at::Tensor& t = one(inputs, "allgather");
  if (outputs.size() != 1) refuse("allgather", fmt::format("takes one output list, got {}", outputs.size()));
  std::vector<at::Tensor>& list = outputs[0];
  const Buffer in = buffer_of(t, "allgather", "the input");
  if (static_cast<int>(list.size()) != size_) {
    refuse("allgather", fmt::format("the output list has {} tensors for {} ranks", list.size(), size_));
  }
  check_like(list, t, "allgather", "output");
  if (consecutive(list) && !t.is_complex()) {  // views of one buffer: gathered in place
    std::vector<at::Tensor> keep = list;
    keep.push_back(t);
    return issue(OpType::ALLGATHER, "tbcoll:all_gather", bytes_of(in) * static_cast<size_t>(size_),
                 all_gather_call(comm_.get(), in, list[0].data_ptr()), inputs, keep, list);
  }
  at::Tensor flat = at::empty({t.numel() * size_}, t.options());
  const Buffer out = buffer_of(flat, "allgather", "the output");
  return issue(OpType::ALLGATHER, "tbcoll:all_gather", bytes_of(out), all_gather_call(comm_.get(), in, out.data),
               inputs, {flat, t}, list, [flat, list] { unflatten(flat, list); });
}

// Rank r's inputs laid end to end are block r of one all_gather; each block is copied to output_lists[r].
WorkPtr ProcessGroupTbcoll::allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                                std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  if (static_cast<int>(output_lists.size()) != size_) {
    refuse("allgather_coalesced", fmt::format("{} output lists for {} ranks", output_lists.size(), size_));
  }
  if (inputs.empty()) refuse("allgather_coalesced", "no input tensors");
  for (size_t r = 0; r < output_lists.size(); ++r) {
    if (output_lists[r].size() != inputs.size()) {
      refuse("allgather_coalesced", fmt::format("output list {} has {} tensors for {} inputs", r,
                                                output_lists[r].size(), inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) check_like({output_lists[r][i]}, inputs[i], "allgather_coalesced",
                                                         "output");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    buffer_of(inputs[i], "allgather_coalesced", fmt::format("input {}", i));
    if (inputs[i].scalar_type() != inputs[0].scalar_type()) {
      refuse("allgather_coalesced", fmt::format("input {} is {} but input 0 is {}: one dtype for all", i,
                                                c10::toString(inputs[i].scalar_type()),
                                                c10::toString(inputs[0].scalar_type())));
    }
  }
  at::Tensor flat_in = flatten(inputs);
  at::Tensor flat_out = at::empty({flat_in.numel() * size_}, flat_in.options());
  const Buffer in = buffer_of(flat_in, "allgather_coalesced", "the inputs");
  const Buffer out = buffer_of(flat_out, "allgather_coalesced", "the outputs");
  std::vector<at::Tensor> all;
  for (const auto& list : output_lists) all.insert(all.end(), list.begin(), list.end());
  return issue(OpType::ALLGATHER_COALESCED, "tbcoll:all_gather", bytes_of(out),
               all_gather_call(comm_.get(), in, out.data), inputs, {flat_in, flat_out}, all,
               [flat_out, all] { unflatten(flat_out, all); });
}

WorkPtr ProcessGroupTbcoll::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                   const c10d::GatherOptions& opts) {
  at::Tensor& t = one(inputs, "gather");
  const Buffer in = buffer_of(t, "gather", "the input");
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ != root) {
    if (!outputs.empty()) refuse("gather", "only the root passes output tensors");
    return issue(OpType::GATHER, "tbcoll:gather", bytes_of(in), gather_call(comm_.get(), in, nullptr, root), inputs,
                 {t}, {});
  }
  if (outputs.size() != 1) refuse("gather", fmt::format("the root takes one output list, got {}", outputs.size()));
  std::vector<at::Tensor>& list = outputs[0];
  if (static_cast<int>(list.size()) != size_) {
    refuse("gather", fmt::format("the output list has {} tensors for {} ranks", list.size(), size_));
  }
  check_like(list, t, "gather", "output");
  at::Tensor flat = at::empty({t.numel() * size_}, t.options());
  const Buffer out = buffer_of(flat, "gather", "the output");
  return issue(OpType::GATHER, "tbcoll:gather", bytes_of(out), gather_call(comm_.get(), in, out.data, root), inputs,
               {flat, t}, list, [flat, list] { unflatten(flat, list); });
}

WorkPtr ProcessGroupTbcoll::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                    const c10d::ScatterOptions& opts) {
  at::Tensor& t = one(outputs, "scatter");
  const Buffer out = buffer_of(t, "scatter", "the output");
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ != root) {
    if (!inputs.empty()) refuse("scatter", "only the root passes input tensors");
    return issue(OpType::SCATTER, "tbcoll:scatter", bytes_of(out), scatter_call(comm_.get(), nullptr, out, root), {},
                 {t}, outputs);
  }
  if (inputs.size() != 1) refuse("scatter", fmt::format("the root takes one input list, got {}", inputs.size()));
  if (static_cast<int>(inputs[0].size()) != size_) {
    refuse("scatter", fmt::format("the input list has {} tensors for {} ranks", inputs[0].size(), size_));
  }
  check_like(inputs[0], t, "scatter", "input");
  at::Tensor flat = flatten(inputs[0]);
  const Buffer in = buffer_of(flat, "scatter", "the input");
  return issue(OpType::SCATTER, "tbcoll:scatter", bytes_of(in), scatter_call(comm_.get(), in.data, out, root),
               inputs[0], {flat, t}, outputs);
}

WorkPtr ProcessGroupTbcoll::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::ReduceScatterOptions& opts) {
  at::Tensor scaled = premul_scaled(opts.reduceOp, input, /*in_place=*/false);  // the input itself stays
  const Buffer in = buffer_of(scaled, "_reduce_scatter_base", "the input");
  const Buffer out = buffer_of(output, "_reduce_scatter_base", "the output");
  if (input.scalar_type() != output.scalar_type() || input.numel() != output.numel() * size_) {
    refuse("_reduce_scatter_base", fmt::format("the input has {} elements; it needs {} x {} (the output's)",
                                               input.numel(), size_, output.numel()));
  }
  const ReduceOp op = reduce_op(opts.reduceOp, "_reduce_scatter_base", output);
  return issue(OpType::_REDUCE_SCATTER_BASE, "tbcoll:reduce_scatter_tensor", bytes_of(in),
               reduce_scatter_call(comm_.get(), in.data, out, op), {input}, {output, scaled}, {output});
}

WorkPtr ProcessGroupTbcoll::reduce_scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const c10d::ReduceScatterOptions& opts) {
  at::Tensor& t = one(outputs, "reduce_scatter");
  const Buffer out = buffer_of(t, "reduce_scatter", "the output");
  if (inputs.size() != 1) refuse("reduce_scatter", fmt::format("takes one input list, got {}", inputs.size()));
  if (static_cast<int>(inputs[0].size()) != size_) {
    refuse("reduce_scatter", fmt::format("the input list has {} tensors for {} ranks", inputs[0].size(), size_));
  }
  check_like(inputs[0], t, "reduce_scatter", "input");
  at::Tensor flat = flatten(inputs[0]);
  premul_scaled(opts.reduceOp, flat, /*in_place=*/true);  // flat is a copy
  const Buffer in = buffer_of(flat, "reduce_scatter", "the input");
  const ReduceOp op = reduce_op(opts.reduceOp, "reduce_scatter", t);
  return issue(OpType::REDUCE_SCATTER, "tbcoll:reduce_scatter", bytes_of(in),
               reduce_scatter_call(comm_.get(), in.data, out, op), inputs[0], {flat, t}, outputs);
}

namespace {

// Elements per block of t's first dimension split by sizes (empty: equal blocks), or a refusal.
std::vector<size_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& sizes, int ranks,
                                 const char* what) {
  const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  const int64_t row = rows > 0 ? t.numel() / rows : 0;
  std::vector<int64_t> split = sizes;
  if (split.empty()) {
    if (rows % ranks != 0) refuse("alltoall_base", fmt::format("the {} has {} rows, not a multiple of {} ranks",
                                                               what, rows, ranks));
    split.assign(static_cast<size_t>(ranks), rows / ranks);
  }
  int64_t total = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    if (split[i] < 0) {
      refuse("alltoall_base", fmt::format("the {} split size {} is {}: sizes are not negative", what, i, split[i]));
    }
    total += split[i];
  }
  if (static_cast<int>(split.size()) != ranks || total != rows) {
    refuse("alltoall_base", fmt::format("the {} split sizes ({} of them, {} rows) do not cover its {} rows in {} "
                                        "blocks", what, split.size(), total, rows, ranks));
  }
  std::vector<size_t> counts;
  for (int64_t s : split) counts.push_back(static_cast<size_t>(s * row) * (t.is_complex() ? 2 : 1));
  return counts;
}

}  // namespace

WorkPtr ProcessGroupTbcoll::alltoall_base(at::Tensor& output, at::Tensor& input,
                                          std::vector<int64_t>& output_split_sizes,
                                          std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  const Buffer in = buffer_of(input, "alltoall_base", "the input");
  const Buffer out = buffer_of(output, "alltoall_base", "the output");
  if (input.scalar_type() != output.scalar_type()) {
    refuse("alltoall_base", fmt::format("the input is {} but the output is {}", c10::toString(input.scalar_type()),
                                        c10::toString(output.scalar_type())));
  }
  const std::vector<size_t> send_counts = split_counts(input, input_split_sizes, size_, "input");
  const std::vector<size_t> recv_counts = split_counts(output, output_split_sizes, size_, "output");
  std::function<Work(bool)> call;
  Communicator* comm = comm_.get();
  if (input_split_sizes.empty() && output_split_sizes.empty()) {
    const size_t each = in.count / static_cast<size_t>(size_);
    call = [comm, in, out, each](bool queued) {
      if (queued) return comm->all_to_all_async(in.data, out.data, each, in.dtype);
      comm->all_to_all(in.data, out.data, each, in.dtype);
      return Work();
    };
  } else {
    call = all_to_allv_call(comm, in.data, out.data, in.dtype, send_counts, recv_counts);
  }
  return issue(OpType::ALLTOALL_BASE, "tbcoll:all_to_all", bytes_of(in), std::move(call), {input}, {output, input},
               {output});
}

WorkPtr ProcessGroupTbcoll::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                     const c10d::AllToAllOptions&) {
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_) {
    refuse("alltoall", fmt::format("takes {} input and output tensors, got {} and {}", size_, inputs.size(),
                                   outputs.size()));
  }
  std::vector<size_t> send_counts, recv_counts;
  for (int p = 0; p < size_; ++p) {
    send_counts.push_back(buffer_of(inputs[p], "alltoall", fmt::format("input {}", p)).count);
    recv_counts.push_back(buffer_of(outputs[p], "alltoall", fmt::format("output {}", p)).count);
    if (inputs[p].scalar_type() != inputs[0].scalar_type() || outputs[p].scalar_type() != inputs[0].scalar_type()) {
      refuse("alltoall", "every input and output tensor needs one dtype");
    }
  }
  at::Tensor flat_in = flatten(inputs);
  at::Tensor flat_out = at::empty({flatten(outputs).numel()}, flat_in.options());
  const Buffer in = buffer_of(flat_in, "alltoall", "the inputs");
  const Buffer out = buffer_of(flat_out, "alltoall", "the outputs");
  return issue(OpType::ALLTOALL, "tbcoll:all_to_all", bytes_of(in),
               all_to_allv_call(comm_.get(), in.data, out.data, in.dtype, send_counts, recv_counts), inputs,
               {flat_in, flat_out}, outputs, [flat_out, outputs] { unflatten(flat_out, outputs); });
}

WorkPtr ProcessGroupTbcoll::send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) {
  const Buffer b = buffer_of(one(tensors, "send"), "send", "the tensor");
  deferred::flush();  // calls made before it go first
  Work work = guarded(timeout_s_, [&] { return comm_->isend(b.data, b.count, b.dtype, dst); });
  return make_work(OpType::SEND, "tbcoll:send", std::move(work), tensors, tensors, tensors);
}

WorkPtr ProcessGroupTbcoll::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  const Buffer b = buffer_of(one(tensors, "recv"), "recv", "the tensor");
  deferred::flush();
  Work work = guarded(timeout_s_, [&] { return comm_->irecv(b.data, b.count, b.dtype, src); });
  return make_work(OpType::RECV, "tbcoll:recv", std::move(work), tensors, tensors, tensors, nullptr, src);
}

WorkPtr ProcessGroupTbcoll::recvAnysource(std::vector<at::Tensor>& tensors, int /*tag*/) {
  const Buffer b = buffer_of(one(tensors, "recv"), "recv", "the tensor");
  deferred::flush();
  Work work = guarded(timeout_s_, [&] { return comm_->irecv_any(b.data, b.count, b.dtype); });
  return make_work(OpType::RECVANYSOURCE, "tbcoll:recvAnySource", std::move(work), tensors, tensors, tensors);
}

WorkPtr ProcessGroupTbcoll::barrier(const c10d::BarrierOptions&) {
  Communicator* comm = comm_.get();
  return issue(OpType::BARRIER, "tbcoll:barrier", 0, [comm](bool queued) {
    if (queued) return comm->barrier_async();
    comm->barrier();
    return Work();
  }, {}, {}, {});
}

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                             const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<ProcessGroupTbcoll>(
      store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

}  // namespace tbcoll::torch_pg
