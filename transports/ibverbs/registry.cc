#include "transports/ibverbs/registry.h"

#include <errno.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/log.h"
#include "transports/ibverbs/memory.h"

namespace tbcoll::ibverbs {
namespace {

class RegionHandle final : public transport::Registration {
 public:
  RegionHandle(std::shared_ptr<Registry> registry, const Region* region)
      : registry_(std::move(registry)), region_(region) {}
  ~RegionHandle() override { registry_->remove(region_); }

 private:
  std::shared_ptr<Registry> registry_;
  const Region* region_;
};

}  // namespace

RegistrationLimits registration_limits(bool apple, bool librdma, int max_mr, uint64_t max_mr_size) {
  RegistrationLimits limits;
  if (max_mr > 0) {
    limits.count = std::max(1, max_mr - kLinkRegistrations);
  } else if (apple) {
    limits.count = kCallerRegistrationsOnApple;
  }
  limits.bytes = max_mr_size;
  if (librdma && (limits.bytes == 0 || limits.bytes > kMaxRegistrationOnLibrdma)) {
    limits.bytes = kMaxRegistrationOnLibrdma;
  }
  return limits;
}

Region::Region(const std::vector<std::shared_ptr<Port>>& ports, const void* base, size_t bytes)
    : begin_(static_cast<const uint8_t*>(base)), end_(static_cast<const uint8_t*>(base) + bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(begin_) / kRegistrationPage * kRegistrationPage;
  const uintptr_t last = reinterpret_cast<uintptr_t>(end_);
  const size_t rounded = whole_pages(static_cast<size_t>(last - first));
  for (const auto& port : ports) {
    const LocalPort& local = port->local();
    if (register_pieces(*port, first, rounded)) continue;
    // Off Apple the whole pages around the range may reach unmapped memory (4 KiB pages, memory from malloc): a
    // device that takes any address takes the range itself.
    if (!local.apple && (first != reinterpret_cast<uintptr_t>(begin_) || rounded != bytes) &&
        register_pieces(*port, reinterpret_cast<uintptr_t>(begin_), bytes)) {
      continue;
    }
    log::info("[ibverbs] {}: {} B at {} is not registered for zero-copy sends: it is copied when sent", local.device,
              bytes, base);
  }
}

bool Region::register_pieces(const Port& port, uintptr_t first, size_t bytes) {
  const LocalPort& local = port.local();
  OpenDevice& device = *port.open_device();
  // Pieces of whole pages, none longer than the device allows (which may say 2^64 - 1).
  const uint64_t most = device.max_registration_bytes > 0 ? std::min<uint64_t>(device.max_registration_bytes, bytes)
                                                          : bytes;
  const size_t piece_bytes = std::max<size_t>(kRegistrationPage, most / kRegistrationPage * kRegistrationPage);
  const size_t pieces = (bytes + piece_bytes - 1) / piece_bytes;
  if (device.registration_limit > 0 &&
      device.caller_registrations.load() + static_cast<int>(pieces) > device.registration_limit) {
    log::info("[ibverbs] {}: {} registrations of callers' memory already (the device's max_mr less {} for links): "
              "no room for {} more", local.device, device.caller_registrations.load(), kLinkRegistrations, pieces);
    return false;
  }
  // Apple's provider takes no registration without remote access, even for sends; elsewhere a send's source
  // needs none, and none is given (the page-rounded range holds the caller's neighbouring memory too).
  const int access = local.apple ? kAccessFlags : 0;
  const size_t kept = mrs_.size();
  for (size_t done = 0; done < bytes; done += piece_bytes) {
    const uintptr_t at = first + done;
    const size_t length = std::min(piece_bytes, bytes - done);
    errno = 0;
    ibv_mr* mr = local.verbs->reg_mr(local.pd, reinterpret_cast<void*>(at), length, access);
    if (mr == nullptr) {
      const int error = errno;
      log::info("[ibverbs] {}: cannot register {} B at {:#x} (errno {}: {})", local.device, length, at, error,
                std::strerror(error));
      while (mrs_.size() > kept) {
        local.verbs->dereg_mr(mrs_.back().mr);
        --device.caller_registrations;
        mrs_.pop_back();
      }
      return false;
    }
    ++device.caller_registrations;
    mrs_.push_back(Mr{port.open_device(), mr, at, at + length});
  }
  return true;
}

Region::~Region() {
  for (const Mr& entry : mrs_) {
    entry.device->verbs->dereg_mr(entry.mr);
    --entry.device->caller_registrations;
  }
}

Region::Piece Region::piece(const ibv_pd* pd, const uint8_t* at) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(at);
  for (const Mr& entry : mrs_) {
    if (entry.device->pd == pd && address >= entry.begin && address < entry.end) {
      return Piece{entry.mr->lkey, reinterpret_cast<const uint8_t*>(entry.end)};
    }
  }
  return Piece{};
}

size_t Region::registered() const {
  size_t devices = 0;
  for (size_t i = 0; i < mrs_.size(); ++i) {
    if (i == 0 || mrs_[i].device != mrs_[i - 1].device) ++devices;
  }
  return devices;
}

void Registry::add(std::shared_ptr<const Region> region) {
  std::lock_guard<std::mutex> lock(mutex_);
  regions_.push_back(std::move(region));
  count_.store(regions_.size(), std::memory_order_release);
}

void Registry::remove(const Region* region) {
  std::shared_ptr<const Region> last;  // deregistered (when no send holds it) after the lock is let go
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(regions_.begin(), regions_.end(), [region](const auto& r) { return r.get() == region; });
  if (it == regions_.end()) return;
  last = std::move(*it);
  regions_.erase(it);
  count_.store(regions_.size(), std::memory_order_release);
}

std::shared_ptr<const Region> Registry::find(const void* begin, size_t bytes) const {
  if (count_.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  // The latest first: a range registered again (memory freed and reused) is found in its new registration.
  for (auto it = regions_.rbegin(); it != regions_.rend(); ++it) {
    if ((*it)->contains(begin, bytes)) return *it;
  }
  return nullptr;
}

std::unique_ptr<transport::Registration> register_region(const std::shared_ptr<Registry>& registry,
                                                         const std::vector<std::shared_ptr<Port>>& ports,
                                                         const void* base, size_t bytes) {
  auto region = std::make_shared<const Region>(ports, base, bytes);
  if (region->registered() == 0) return nullptr;
  const Region* raw = region.get();
  registry->add(std::move(region));
  return std::make_unique<RegionHandle>(registry, raw);
}

}  // namespace tbcoll::ibverbs
