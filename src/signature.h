// The 64-bit signature every message of a call carries, so ranks that called different collectives,
// counts, dtypes, ops or roots are told so instead of exchanging garbage:
//   kind:8 | dtype:8 | schedule:4 | op:4 | root:8 (low bits) | count:32 (low bits)
// schedule is 0 in a call's own signature (what ranks announce); the messages of a point-to-point schedule carry
// theirs, so ranks tuned to different schedules are told, even where the messages happen to have the same sizes.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll {

enum class OpKind : uint8_t {
  kAllReduce = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kBarrier = 4,
  kSendRecv = 5,
  kReduceScatter = 6,
  kReduce = 7
};

inline const char* op_kind_name(unsigned kind) {
  switch (kind) {
    case 1: return "all_reduce";
    case 2: return "all_gather";
    case 3: return "broadcast";
    case 4: return "barrier";
    case 5: return "send/recv";
    case 6: return "reduce_scatter";
    case 7: return "reduce";
  }
  return "unknown";
}

inline uint64_t make_meta(OpKind kind, DataType dtype, ReduceOp op, int root, size_t count) {
  return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (uint64_t{static_cast<uint8_t>(dtype)} << 48) |
         (uint64_t{static_cast<uint8_t>(op)} << 40) | (uint64_t{static_cast<uint8_t>(root)} << 32) |
         (count & 0xffffffffu);
}

constexpr uint64_t kScheduleMask = uint64_t{0xf} << 44;

inline uint64_t with_schedule(uint64_t meta, unsigned schedule) {
  return (meta & ~kScheduleMask) | (uint64_t{schedule & 0xfu} << 44);
}
inline unsigned schedule_of(uint64_t meta) { return static_cast<unsigned>((meta & kScheduleMask) >> 44); }

/// "all_reduce(count=1024 mod 2^32, f32, sum)"-style description of a signature.
inline std::string describe_meta(uint64_t meta) {
  unsigned kind = static_cast<unsigned>(meta >> 56);
  auto dtype = static_cast<DataType>((meta >> 48) & 0xff);
  auto op = static_cast<ReduceOp>((meta >> 40) & 0xf);
  unsigned root = static_cast<unsigned>((meta >> 32) & 0xff);
  unsigned long long count = meta & 0xffffffffu;
  switch (static_cast<OpKind>(kind)) {
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      return fmt::format("{}(count={}, {}, {})", op_kind_name(kind), count, to_string(dtype), to_string(op));
    case OpKind::kReduce:
      return fmt::format("reduce(count={}, {}, {}, root={})", count, to_string(dtype), to_string(op), root);
    case OpKind::kBroadcast: return fmt::format("broadcast(count={}, {}, root={})", count, to_string(dtype), root);
    case OpKind::kBarrier: return "barrier()";
    case OpKind::kAllGather:
    case OpKind::kSendRecv: return fmt::format("{}(count={}, {})", op_kind_name(kind), count, to_string(dtype));
  }
  return fmt::format("unknown operation (signature {:#x})", meta);
}

}  // namespace tbcoll
