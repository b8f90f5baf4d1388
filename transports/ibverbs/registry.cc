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
    OpenDevice& device = *port->open_device();
    if (device.registration_limit > 0 && device.caller_registrations.load() >= device.registration_limit) {
      log::info("[ibverbs] {}: {} registrations of callers' memory already (the device's max_mr less {} for links): "
                "{} B at {} is copied when sent", local.device, device.registration_limit, kLinkRegistrations, bytes,
                base);
      continue;
    }
    if (device.max_registration_bytes > 0 && rounded > device.max_registration_bytes) {
      log::info("[ibverbs] {}: {} B at {} is longer than a registration may be ({} B: the device's max_mr_size, "
                "1 GiB at most on Apple's librdma): it is copied when sent", local.device, bytes, base,
                device.max_registration_bytes);
      continue;
    }
    // Apple's provider takes no registration without remote access, even for sends; elsewhere a send's source
    // needs none, and none is given (the page-rounded range holds the caller's neighbouring memory too).
    const int access = local.apple ? kAccessFlags : 0;
    errno = 0;
    ibv_mr* mr = local.verbs->reg_mr(local.pd, reinterpret_cast<void*>(first), rounded, access);
    int error = errno;
    if (mr == nullptr && !local.apple && (first != reinterpret_cast<uintptr_t>(begin_) || rounded != bytes)) {
      // The whole pages around the range may reach unmapped memory (4 KiB pages, memory from malloc): a
      // device that takes any address (not Apple's) takes the range itself.
      errno = 0;
      mr = local.verbs->reg_mr(local.pd, const_cast<uint8_t*>(begin_), bytes, access);
      if (mr == nullptr) error = errno;
    }
    if (mr == nullptr) {
      log::info("[ibverbs] {}: cannot register {} B at {} for zero-copy sends (errno {}: {}): they are copied",
                local.device, bytes, base, error, std::strerror(error));
      continue;
    }
    ++device.caller_registrations;
    mrs_.push_back(Mr{port->open_device(), mr});
  }
}

Region::~Region() {
  for (const Mr& entry : mrs_) {
    entry.device->verbs->dereg_mr(entry.mr);
    --entry.device->caller_registrations;
  }
}

uint32_t Region::lkey(const ibv_pd* pd) const {
  for (const Mr& entry : mrs_) {
    if (entry.device->pd == pd) return entry.mr->lkey;
  }
  return 0;
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
