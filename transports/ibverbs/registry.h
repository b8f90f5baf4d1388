// Caller memory registered for zero-copy sends (transport::Context::register_memory): registrations per device the
// context uses, over the range rounded out to 16 KiB pages (Apple's provider takes nothing else; elsewhere the
// exact range is tried when the rounded one reaches unmapped pages), in pieces no longer than the device allows
// (max_mr_size; 1 GiB on Apple's librdma), each counted against its registration budget. A send whose bytes lie
// inside a region goes from there (wire.h, zero-copy slots) on every rail whose device took the region, each slot
// inside one piece.
//
// Lifetime: the context's registry lists a region while the caller's handle lives; a send holds the region (and
// through it the opened devices, whose protection domains the registrations belong to, not the ports: a port owns
// its connections, which hold the sends in flight) until its last zero-copy slot's send completed, so
// deregistering or destroying the communicator while a send is in flight is safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "tbcoll/transport.hpp"
#include "transports/ibverbs/port.h"

namespace tbcoll::ibverbs {

/// Registrations kept for the links (one each) out of a device's max_mr; callers get the rest.
constexpr int kLinkRegistrations = 36;
/// Callers' registrations an Apple device takes when it does not say its max_mr (Apple's is about 100).
constexpr int kCallerRegistrationsOnApple = 64;
/// The longest registration on Apple's librdma: a published measurement saw silent corruption past 2^32 bytes in
/// one, and MLX's JACCL registers 512 KiB at most.
constexpr uint64_t kMaxRegistrationOnLibrdma = uint64_t{1} << 30;

/// What callers may register on a device, from what it says (ibv_query_device: max_mr, max_mr_size; 0 when it did
/// not say): count (0: no limit of ours) and the longest one in bytes (0: none).
struct RegistrationLimits {
  int count = 0;
  uint64_t bytes = 0;
};
RegistrationLimits registration_limits(bool apple, bool librdma, int max_mr, uint64_t max_mr_size);

class Region {
 public:
  /// Registers [base, base + bytes) with each of ports' protection domains that takes it.
  Region(const std::vector<std::shared_ptr<Port>>& ports, const void* base, size_t bytes);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  bool contains(const void* begin, size_t bytes) const {
    const auto* b = static_cast<const uint8_t*>(begin);
    return b >= begin_ && b <= end_ && bytes <= static_cast<size_t>(end_ - b);
  }
  /// The piece of this region's registration on `pd`'s device that holds `at`: its local key and where it ends
  /// (lkey 0 where that device did not take the region).
  struct Piece {
    uint32_t lkey = 0;
    const uint8_t* end = nullptr;
  };
  Piece piece(const ibv_pd* pd, const uint8_t* at) const;
  /// Devices that took the region.
  size_t registered() const;

 private:
  struct Mr {
    std::shared_ptr<OpenDevice> device;
    ibv_mr* mr = nullptr;
    uintptr_t begin = 0, end = 0;  ///< what it covers
  };
  /// Registers [first, first + bytes) on port's device in pieces; false (none kept) if a piece fails or the
  /// budget runs out.
  bool register_pieces(const Port& port, uintptr_t first, size_t bytes);
  const uint8_t* begin_;
  const uint8_t* end_;
  std::vector<Mr> mrs_;
};

/// A context's regions. Any thread.
class Registry {
 public:
  void add(std::shared_ptr<const Region> region);
  void remove(const Region* region);
  /// The region holding [begin, begin + bytes), or null. Cheap when there are none.
  std::shared_ptr<const Region> find(const void* begin, size_t bytes) const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const Region>> regions_;
  std::atomic<size_t> count_{0};
};

/// Registers the range with the ports and lists it in the registry while the returned handle lives; null when
/// no device took it.
std::unique_ptr<transport::Registration> register_region(const std::shared_ptr<Registry>& registry,
                                                         const std::vector<std::shared_ptr<Port>>& ports,
                                                         const void* base, size_t bytes);

}  // namespace tbcoll::ibverbs
