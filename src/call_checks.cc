// The argument checks (call_checks.h).
#include "call_checks.h"

#include <cstdint>

#include <fmt/format.h>

#include "signature.h"

namespace tbcoll {
namespace {

// Addresses below this are never a buffer: the first page (4 KiB, or the start of a larger one) is not mapped.
// Ports from MPI pass MPI_IN_PLACE there (the address 1 in Open MPI and MPICH).
constexpr uintptr_t kFirstPageEnd = 4096;

// No buffer is longer than the user address space a process can map: 2^47 bytes on x86-64 and arm64 (Linux and
// macOS). A larger size is a wrong count, refused before any pointer arithmetic on it.
constexpr size_t kMaxBufferBytes = size_t{1} << 47;

}  // namespace

void check_dtype(int rank, const char* op, DataType dtype) {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= kNumDataTypes) {
    throw InvalidArgument(fmt::format("rank {}: {}: invalid dtype {} (valid: 0..{})", rank, op,
                                      static_cast<int>(dtype), kNumDataTypes - 1));
  }
}

void check_op(int rank, const char* name, ReduceOp op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= kNumReduceOps) {
    throw InvalidArgument(fmt::format("rank {}: {}: invalid reduction op {} (valid: 0..{})", rank, name,
                                      static_cast<int>(op), kNumReduceOps - 1));
  }
}

// count * elem_size * factor in bytes, or InvalidArgument when it overflows.
size_t checked_bytes(int rank, const char* op, size_t count, DataType dtype, size_t factor) {
  // Overflow-checked multiplications: no 64-bit divisions on the path of every call.
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, dtype_size(dtype), &bytes) || __builtin_mul_overflow(bytes, factor, &bytes)) {
    throw InvalidArgument(fmt::format("rank {}: {}: count {} of {}{} overflows 64 bits of bytes", rank, op, count,
                                      to_string(dtype), factor > 1 ? fmt::format(" (x {} blocks)", factor) : ""));
  }
  if (bytes > kMaxBufferBytes) {
    throw InvalidArgument(fmt::format("rank {}: {}: count {} of {}{} is {} bytes, more than a process can map "
                                      "(2^47): not a buffer's size", rank, op, count, to_string(dtype),
                                      factor > 1 ? fmt::format(" (x {} blocks)", factor) : "", bytes));
  }
  return bytes;
}

void check_buffer(int rank, const char* op, const char* which, const void* buf, size_t count) {
  if (buf == nullptr && count > 0) {
    throw InvalidArgument(fmt::format("rank {}: {}: {} buffer is null with count {}", rank, op, which, count));
  }
  if (buf != nullptr && reinterpret_cast<uintptr_t>(buf) < kFirstPageEnd) {
    throw InvalidArgument(fmt::format(
        "rank {}: {}: {} buffer {} points into the first page: not a buffer (MPI_IN_PLACE? tbcoll has no such "
        "marker: in place means send == recv, for all_gather send == recv + rank * count, for reduce_scatter "
        "recv == send + rank * count)", rank, op, which, buf));
  }
}

// Buffers that overlap in any way other than the collective's in-place layout: the algorithms read inputs
// after writing outputs, and ranks would end with different, wrong results.
void check_overlap(int rank, const char* op, const void* send, size_t send_bytes, const void* recv,
                   size_t recv_bytes, bool in_place, const char* layout) {
  if (in_place || send == nullptr || recv == nullptr || send_bytes == 0 || recv_bytes == 0) return;
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  if (s < r + recv_bytes && r < s + send_bytes) {
    throw InvalidArgument(fmt::format("rank {}: {}: send and recv buffers overlap without being in place (in place "
                                      "means {})", rank, op, layout));
  }
}

void check_rank(int rank, int size, const char* op, const char* which, int value) {
  if (value < 0 || value >= size) {
    throw InvalidArgument(fmt::format("rank {}: {}: {} {} out of range for world size {}", rank, op, which, value, size));
  }
}

CheckedShape check_shape(const CollectiveTraits& traits, int rank, int size, int hosts, const CallArgs& args) {
  const char* name = traits.name;
  CheckedShape out;
  if (!traits.takes_count) {
    out.shape = {traits.kind, 0, size, DataType::kUint8, hosts};
    out.meta = make_meta(traits.kind, DataType::kUint8, ReduceOp::kSum, 0, 0);
    return out;
  }
  check_dtype(rank, name, args.dtype);
  if (traits.reduces) check_op(rank, name, args.op);
  if (traits.rooted) check_rank(rank, size, name, "root", args.root);
  out.bytes = checked_bytes(rank, name, args.count, args.dtype, traits.shape_blocks(size));
  out.shape = {traits.kind, out.bytes, size, args.dtype, hosts};
  out.meta = make_meta(traits.kind, args.dtype, traits.reduces ? args.op : ReduceOp::kSum,
                       traits.rooted ? args.root : 0, args.count);
  return out;
}

void check_buffers(const CollectiveTraits& traits, int rank, int size, const CallArgs& args, size_t bytes) {
  if (!traits.takes_count) return;
  const char* name = traits.name;
  const bool is_root = rank == args.root;
  const bool reads_send = traits.reads_send == Ranks::kEvery || is_root;
  const bool writes_recv = traits.writes_recv == Ranks::kEvery || is_root;
  if (reads_send) check_buffer(rank, name, "send", args.send, args.count);
  if (writes_recv) check_buffer(rank, name, "recv", args.recv, args.count);
  if (!reads_send || !writes_recv) return;
  const size_t block = bytes / traits.shape_blocks(size);  // one rank's part
  const size_t offset = block * static_cast<size_t>(traits.in_place_at_root ? args.root : rank);
  const auto* s = static_cast<const uint8_t*>(args.send);
  const auto* r = static_cast<const uint8_t*>(args.recv);
  const bool in_place = traits.in_place == InPlace::kSamePointer ? s == r
                        : traits.in_place == InPlace::kSendInRecv ? s == r + offset
                                                                  : r == s + offset;
  check_overlap(rank, name, s, traits.send_per_rank ? bytes : block, r, traits.recv_per_rank ? bytes : block,
                in_place, traits.in_place_rule);
}

}  // namespace tbcoll
