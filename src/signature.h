// The 64-bit signature every message of a call carries, so ranks that called different collectives,
// counts, dtypes, ops or roots are told so instead of exchanging garbage:
//   kind:8 | dtype:8 | schedule:4 | op:4 | root:8 (low bits) | count:32 (low bits)
// schedule is 0 in a call's own signature (what ranks announce); the messages of a point-to-point schedule carry
// theirs (the algorithm's number in its collective's table, plus one), so ranks tuned to different schedules are
// told, even where the messages happen to have the same sizes. Transports see only transport::same_call and
// transport::describe_signature (tbcoll/collective_fast_path.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "tbcoll/collective_fast_path.hpp"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll {

inline uint64_t make_meta(OpKind kind, DataType dtype, ReduceOp op, int root, size_t count) {
  return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (uint64_t{static_cast<uint8_t>(dtype)} << 48) |
         (uint64_t{static_cast<uint8_t>(op)} << 40) | (uint64_t{static_cast<uint8_t>(root)} << 32) |
         (count & 0xffffffffu);
}

constexpr uint64_t kScheduleMask = uint64_t{0xf} << 44;
constexpr unsigned kMaxSchedules = 15;  ///< schedule numbers 1..15 fit the field

inline uint64_t with_schedule(uint64_t meta, unsigned schedule) {
  return (meta & ~kScheduleMask) | (uint64_t{schedule & 0xfu} << 44);
}
inline unsigned schedule_of(uint64_t meta) { return static_cast<unsigned>((meta & kScheduleMask) >> 44); }
inline OpKind kind_of(uint64_t meta) { return static_cast<OpKind>(meta >> 56); }

/// "all_reduce(count=1024 mod 2^32, f32, sum)"-style description of a signature.
std::string describe_meta(uint64_t meta);

}  // namespace tbcoll
