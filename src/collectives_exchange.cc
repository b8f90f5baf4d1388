// all_to_allv: its counts and displacements per peer, checked (and null displacements made packed ones), and its
// call (the other collectives go through the one call path of collectives.cc; schedules in src/algorithms/).
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "call_checks.h"
#include "communicator.h"

namespace tbcoll {

namespace {

constexpr const char* kName = "all_to_allv";

// The given displacements, or (null) the blocks packed in rank order.
std::vector<size_t> displacements(const size_t* given, const std::vector<size_t>& counts) {
  const size_t n = counts.size();
  if (given != nullptr) return std::vector<size_t>(given, given + n);
  std::vector<size_t> out(n);
  size_t at = 0;
  for (size_t p = 0; p < n; ++p) {
    out[p] = at;
    at += counts[p];  // wraps only for counts that extent() then refuses
  }
  return out;
}

// A side's extent (from the buffer's start to the end of its last block) in bytes, overflow-checked; *elements:
// its blocks' elements in all.
size_t extent(int rank, const char* side, const std::vector<size_t>& counts, const std::vector<size_t>& displs,
              DataType dtype, size_t* elements) {
  size_t end = 0;
  *elements = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    size_t block_end = 0;
    if (__builtin_add_overflow(displs[p], counts[p], &block_end) ||
        __builtin_add_overflow(*elements, counts[p], elements)) {
      throw InvalidArgument(fmt::format("rank {}: {}: {}_displs[{}] + {}_counts[{}] overflows", rank, kName, side, p,
                                        side, p));
    }
    if (counts[p] > 0) end = std::max(end, block_end);
  }
  return checked_bytes(rank, kName, end, dtype, 1);
}

// Received blocks that overlap would leave whichever arrived last.
void check_recv_blocks_apart(int rank, const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  std::vector<std::pair<size_t, size_t>> blocks;  // (displacement, peer) of the non-empty ones
  for (size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] > 0) blocks.push_back({displs[p], p});
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    const size_t before = blocks[i - 1].second, after = blocks[i].second;
    if (blocks[i - 1].first + counts[before] > blocks[i].first) {
      throw InvalidArgument(fmt::format("rank {}: {}: the recv blocks of peers {} and {} overlap (recv_displs {} and "
                                        "{}, recv_counts {} and {})", rank, kName, before, after, displs[before],
                                        displs[after], counts[before], counts[after]));
    }
  }
}

}  // namespace

Communicator::Impl::AllToAllvLayout Communicator::Impl::check_all_to_allv(
    const void* send, const void* recv, const size_t* send_counts, const size_t* send_displs,
    const size_t* recv_counts, const size_t* recv_displs, DataType dtype) const {
  const char* name = "all_to_allv";
  check_dtype(rank, name, dtype);
  const bool in_place = send == recv;
  if (recv_counts == nullptr) throw InvalidArgument(fmt::format("rank {}: {}: recv_counts is null", rank, name));
  if (send_counts == nullptr && !in_place) {
    throw InvalidArgument(fmt::format("rank {}: {}: send_counts is null (allowed in place only, send == recv)", rank,
                                      name));
  }
  const size_t n = static_cast<size_t>(size);
  AllToAllvLayout layout;
  layout.recv_counts.assign(recv_counts, recv_counts + n);
  layout.recv_displs = displacements(recv_displs, layout.recv_counts);
  if (in_place) {
    // The recv counts and displacements serve both sides; send's, if given, must say the same.
    for (size_t p = 0; p < n; ++p) {
      if ((send_counts != nullptr && send_counts[p] != layout.recv_counts[p]) ||
          (send_displs != nullptr && send_displs[p] != layout.recv_displs[p])) {
        throw InvalidArgument(fmt::format("rank {}: {}: in place (send == recv), the recv counts and displacements "
                                          "serve both sides, but send_{}[{}] differs from recv's (pass null or the "
                                          "same)", rank, name, send_counts != nullptr && send_counts[p] !=
                                          layout.recv_counts[p] ? "counts" : "displs", p));
      }
    }
    layout.send_counts = layout.recv_counts;
    layout.send_displs = layout.recv_displs;
  } else {
    layout.send_counts.assign(send_counts, send_counts + n);
    layout.send_displs = displacements(send_displs, layout.send_counts);
  }
  if (layout.send_counts[rank] != layout.recv_counts[rank]) {
    throw InvalidArgument(fmt::format("rank {}: {}: send_counts[{}] = {} but recv_counts[{}] = {} (this rank's block "
                                      "to itself)", rank, name, rank, layout.send_counts[rank], rank,
                                      layout.recv_counts[rank]));
  }
  size_t received = 0;
  const size_t send_bytes = extent(rank, "send", layout.send_counts, layout.send_displs, dtype, &layout.sent);
  const size_t recv_bytes = extent(rank, "recv", layout.recv_counts, layout.recv_displs, dtype, &received);
  check_buffer(rank, name, "send", send, layout.sent);
  check_buffer(rank, name, "recv", recv, received);
  check_overlap(rank, name, send, send_bytes, recv, recv_bytes, in_place,
                "send == recv, the recv counts and displacements serving both sides");
  check_recv_blocks_apart(rank, layout.recv_counts, layout.recv_displs);
  layout.choice = nullptr;
  if (size == 1) return layout;
  try {
    layout.choice = &tuner.choose({OpKind::kAllToAllv, 0, size, dtype});
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(fmt::format("rank {}: {}: {}", rank, name, error.what()));
  }
  return layout;
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
  transport::Tag tag{++calls.collective_seq, make_meta(OpKind::kAllToAllv, dtype, ReduceOp::kSum, 0, 0)};
  algo::Args args{send, recv, 0, dtype, ReduceOp::kSum, 0, es};
  args.send_counts = layout.send_counts.data();
  args.send_displs = layout.send_displs.data();
  args.recv_counts = layout.recv_counts.data();
  args.recv_displs = layout.recv_displs.data();
  execute(what, tag, *layout.choice, args);
}

}  // namespace tbcoll
