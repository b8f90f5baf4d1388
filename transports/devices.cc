#include "transports/devices.h"

#include <mutex>

#include <fmt/format.h>

namespace tbcoll::transport {
namespace {

struct Devices {
  std::mutex mutex;
  std::vector<std::shared_ptr<Device>> list;

  Devices() {
    for (auto device : {make_loopback_device(), make_shm_device(), make_ibverbs_device(), make_tcp_device()}) {
      if (device) list.push_back(device);
    }
  }
};

Devices& devices() {
  static Devices instance;
  return instance;
}

}  // namespace

std::optional<Arrival> Endpoint::probe() {
  throw InvalidUsage(fmt::format("the transport to peer {} cannot look for arrived messages, so a receive from any "
                                 "source cannot use it: name the source rank", peer()));
}

std::vector<std::shared_ptr<Device>> available_devices() {
  Devices& all = devices();
  std::lock_guard<std::mutex> lock(all.mutex);
  return all.list;
}

void register_device(std::shared_ptr<Device> device, size_t position) {
  if (!device) throw InvalidArgument("register_device: no device");
  Devices& all = devices();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (const auto& existing : all.list) {
    if (existing->name() == device->name()) {
      throw InvalidArgument(fmt::format("register_device: a transport named {:?} is registered already", device->name()));
    }
  }
  all.list.insert(all.list.begin() + static_cast<std::ptrdiff_t>(std::min(position, all.list.size())),
                  std::move(device));
}

}  // namespace tbcoll::transport
