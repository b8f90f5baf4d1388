// The collectives that move blocks without reducing them, rank to rank: all_to_all, all_to_allv, gather,
// scatter (argument checks in collectives.cc, schedules in src/algorithms/).
#include <cstring>
#include <vector>

#include "communicator.h"

namespace tbcoll {

void Communicator::all_to_all(const void* send, void* recv, size_t count, DataType dtype) {
  impl().async.drain();
  impl().all_to_all(send, recv, count, dtype);
}

void Communicator::Impl::all_to_all(const void* send, void* recv, size_t count, DataType dtype) {
  const Checked checked = check_arguments(OpKind::kAllToAll, send, recv, count, dtype, ReduceOp::kSum, 0);
  algo::CallInfo what{"all_to_all", count, dtype};
  check_usable(what);
  if (count == 0) return;
  if (checked.choice == nullptr) {
    if (send != recv) std::memcpy(recv, send, checked.bytes);
    return;
  }
  transport::Tag tag{++collective_seq, make_meta(OpKind::kAllToAll, dtype, ReduceOp::kSum, 0, count)};
  execute_checked(what, tag, checked, {send, recv, count, dtype, ReduceOp::kSum, 0, dtype_size(dtype)});
}

void Communicator::all_to_allv(const void* send, void* recv, const size_t* send_counts, const size_t* send_displs,
                               const size_t* recv_counts, const size_t* recv_displs, DataType dtype) {
  impl().async.drain();
  const Impl::AllToAllvLayout layout =
      impl().check_all_to_allv(send, recv, send_counts, send_displs, recv_counts, recv_displs, dtype);
  impl().all_to_allv(send, recv, layout, dtype);
}

void Communicator::Impl::all_to_allv(const void* send, void* recv, const AllToAllvLayout& layout, DataType dtype) {
  algo::CallInfo what{"all_to_allv", layout.sent, dtype};
  what.count_name = "sent";
  check_usable(what);
  const size_t es = dtype_size(dtype);
  if (layout.choice == nullptr) {  // one rank: its block to itself
    const size_t bytes = layout.recv_counts[0] * es;
    auto* to = static_cast<uint8_t*>(recv) + layout.recv_displs[0] * es;
    const auto* from = static_cast<const uint8_t*>(send) + layout.send_displs[0] * es;
    if (bytes > 0 && to != from) std::memcpy(to, from, bytes);
    return;
  }
  // The counts are per peer, so the signature carries none (0); a peer's count that disagrees with this rank's
  // shows as a message of another size.
  transport::Tag tag{++collective_seq, make_meta(OpKind::kAllToAllv, dtype, ReduceOp::kSum, 0, 0)};
  algo::Args args{send, recv, 0, dtype, ReduceOp::kSum, 0, es};
  args.send_counts = layout.send_counts.data();
  args.send_displs = layout.send_displs.data();
  args.recv_counts = layout.recv_counts.data();
  args.recv_displs = layout.recv_displs.data();
  execute(what, tag, *layout.choice, args);
}

void Communicator::gather(const void* send, void* recv, size_t count, DataType dtype, int root) {
  impl().async.drain();
  impl().gather(send, recv, count, dtype, root);
}

void Communicator::Impl::gather(const void* send, void* recv, size_t count, DataType dtype, int root) {
  const Checked checked = check_arguments(OpKind::kGather, send, recv, count, dtype, ReduceOp::kSum, root);
  algo::CallInfo what{"gather", count, dtype, ReduceOp::kSum, false, root};
  check_usable(what);
  if (count == 0) return;
  if (checked.choice == nullptr) {
    if (send != recv) std::memcpy(recv, send, checked.bytes);
    return;
  }
  // Non-root ranks only send, so a root or count they disagree on is seen by the receivers (see README: "A call
  // in which some ranks only send").
  transport::Tag tag{++collective_seq, make_meta(OpKind::kGather, dtype, ReduceOp::kSum, root, count)};
  execute_checked(what, tag, checked, {send, recv, count, dtype, ReduceOp::kSum, root, dtype_size(dtype)});
}

void Communicator::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  impl().async.drain();
  impl().scatter(send, recv, count, dtype, root);
}

void Communicator::Impl::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  const Checked checked = check_arguments(OpKind::kScatter, send, recv, count, dtype, ReduceOp::kSum, root);
  algo::CallInfo what{"scatter", count, dtype, ReduceOp::kSum, false, root};
  check_usable(what);
  if (count == 0) return;
  if (checked.choice == nullptr) {
    if (send != recv) std::memcpy(recv, send, checked.bytes);
    return;
  }
  transport::Tag tag{++collective_seq, make_meta(OpKind::kScatter, dtype, ReduceOp::kSum, root, count)};
  execute_checked(what, tag, checked, {send, recv, count, dtype, ReduceOp::kSum, root, dtype_size(dtype)});
}

}  // namespace tbcoll
