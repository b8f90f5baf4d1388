#include "transports/devices.h"

#include <dlfcn.h>

#include <mutex>

#include <fmt/format.h>

#include "common/env.h"

namespace tbcoll::transport {
namespace {

// The built-in devices, then the plug-ins TBCOLL_TRANSPORT_PLUGINS names (a plug-in that cannot be loaded fails
// the first look at the devices, so a communicator's set-up names it; the next look tries again).
struct Devices {
  std::mutex mutex;
  std::vector<std::shared_ptr<Device>> list;

  Devices() {
    for (auto device : {make_loopback_device(), make_shm_device(), make_ibverbs_device(), make_tcp_device()}) {
      if (device) list.push_back(device);
    }
    const std::string plugins = env::get("TBCOLL_TRANSPORT_PLUGINS");
    for (size_t at = 0; at < plugins.size();) {
      const size_t end = std::min(plugins.find(':', at), plugins.size());
      if (end > at) add(load(plugins.substr(at, end - at)));
      at = end + 1;
    }
  }

  void add(std::shared_ptr<Device> device, size_t position = SIZE_MAX) {
    if (!device) return;
    for (const auto& existing : list) {
      if (existing->name() == device->name()) {
        throw InvalidArgument(fmt::format("a transport named {:?} is registered already", device->name()));
      }
    }
    list.insert(list.begin() + static_cast<std::ptrdiff_t>(std::min(position, list.size())), std::move(device));
  }

  // Opens a plug-in and makes its device (null: it cannot run here). The shared object stays loaded: its code
  // runs for as long as the process may use the device.
  static std::shared_ptr<Device> load(const std::string& path) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw InvalidArgument(fmt::format("transport plug-in {}: cannot be loaded: {}", path, dlerror()));
    }
    using Entry = const Plugin* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, kPluginSymbol));
    const Plugin* plugin = entry != nullptr ? entry() : nullptr;
    if (plugin == nullptr) {
      throw InvalidArgument(fmt::format("transport plug-in {}: exports no {}() giving a tbcoll::transport::Plugin",
                                        path, kPluginSymbol));
    }
    const std::string name = plugin->name != nullptr ? plugin->name : "";
    if (plugin->interface_version != kInterfaceVersion) {
      throw InvalidArgument(fmt::format("transport plug-in {} ({:?}) was built for transport interface version {}; "
                                        "this library has version {}: rebuild it against this library's headers",
                                        path, name, plugin->interface_version, kInterfaceVersion));
    }
    if (name.empty() || plugin->create_device == nullptr) {
      throw InvalidArgument(fmt::format("transport plug-in {}: its Plugin names no transport or no create_device",
                                        path));
    }
    std::shared_ptr<Device> device = plugin->create_device();
    if (device && device->name() != name) {
      throw InvalidArgument(fmt::format("transport plug-in {}: its Plugin says {:?} but its device is named {:?}",
                                        path, name, device->name()));
    }
    return device;
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
  all.add(std::move(device), position);
}

std::string load_plugin(const std::string& path, size_t position) {
  Devices& all = devices();
  std::shared_ptr<Device> device = Devices::load(path);
  if (!device) return "";
  std::string name = device->name();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.add(std::move(device), position);
  return name;
}

}  // namespace tbcoll::transport
