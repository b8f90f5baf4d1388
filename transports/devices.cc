#include "transports/devices.h"

#include <dlfcn.h>

#include <mutex>

#include <fmt/format.h>

#include "common/env.h"

namespace tbcoll::transport {
namespace {

// The built-in devices, and those registered at run time (register_device, plug-ins).
struct Devices {
  std::mutex mutex;
  std::vector<std::shared_ptr<Device>> list;

  Devices() {
    for (auto device : {make_loopback_device(), make_shm_device(), make_ibverbs_device(), make_tcp_device()}) {
      if (device) list.push_back(device);
    }
  }

  // Under mutex.
  void add(std::shared_ptr<Device> device, size_t position = SIZE_MAX) {
    for (const auto& existing : list) {
      if (existing->name() == device->name()) {
        throw InvalidArgument(fmt::format("a transport named {:?} is registered already", device->name()));
      }
    }
    list.insert(list.begin() + static_cast<std::ptrdiff_t>(std::min(position, list.size())), std::move(device));
  }
};

Devices& devices();

[[noreturn]] void refuse(void* handle, const std::string& path, const std::string& why) {
  if (handle != nullptr) dlclose(handle);
  throw InvalidArgument(fmt::format("transport plug-in {}: {}", path, why));
}

// Puts the library's own symbols in the process's global scope, where a plug-in's undefined references to them
// (the interface's type information) are looked up: a program that opened libtbcoll with RTLD_LOCAL (Python's
// extension modules) would otherwise leave them out of reach.
void share_library_symbols() {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&available_devices), &self) == 0 || self.dli_fname == nullptr) return;
  if (void* again = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL)) dlclose(again);
}

// Opens a plug-in and makes its device (null: it cannot run here). The shared object stays loaded while its
// device may be used (for the process's life); a refused one is closed.
std::shared_ptr<Device> open_plugin(const std::string& path) {
  share_library_symbols();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) refuse(nullptr, path, fmt::format("cannot be loaded: {}", dlerror()));
  using Entry = const Plugin* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kPluginSymbol));
  const Plugin* plugin = entry != nullptr ? entry() : nullptr;
  if (plugin == nullptr) {
    refuse(handle, path, fmt::format("exports no {}() giving a tbcoll::transport::Plugin", kPluginSymbol));
  }
  if (plugin->interface_version != kInterfaceVersion) {
    refuse(handle, path, fmt::format("was built for transport interface version {}; this library has version {}: "
                                     "rebuild it against this library's headers", plugin->interface_version,
                                     kInterfaceVersion));
  }
  const std::string name = plugin->name != nullptr ? plugin->name : "";
  if (name.empty() || plugin->create_device == nullptr) {
    refuse(handle, path, "its Plugin names no transport or no create_device");
  }
  std::shared_ptr<Device> device;
  try {
    device = plugin->create_device();
  } catch (const std::exception& error) {
    refuse(handle, path, fmt::format("create_device failed: {}", error.what()));
  }
  if (device && device->name() != name) {
    refuse(handle, path, fmt::format("its Plugin says {:?} but its device is named {:?}", name, device->name()));
  }
  return device;
}

// Registers a plug-in's device; a name that is taken is refused naming the file.
std::string register_plugin(const std::string& path, size_t position) {
  std::shared_ptr<Device> device = open_plugin(path);
  if (!device) return "";
  std::string name = device->name();
  Devices& all = devices();
  std::lock_guard<std::mutex> lock(all.mutex);
  try {
    all.add(std::move(device), position);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(fmt::format("transport plug-in {}: {}", path, error.what()));
  }
  return name;
}

// TBCOLL_TRANSPORT_PLUGINS, loaded at the first look at the devices (once; a refusal is thrown to that look and
// the next one tries again). Outside the registry's construction, so a plug-in's create_device may itself look
// at the devices (a wrapping transport): on the loading thread such a look sees the built-in ones.
void load_environment_plugins() {
  static std::mutex mutex;
  static bool loaded = false;
  thread_local bool loading = false;
  if (loading) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded) return;
  loading = true;
  try {
    const std::string plugins = env::get("TBCOLL_TRANSPORT_PLUGINS");
    for (size_t at = 0; at < plugins.size();) {
      const size_t end = std::min(plugins.find(':', at), plugins.size());
      if (end > at) register_plugin(plugins.substr(at, end - at), SIZE_MAX);
      at = end + 1;
    }
  } catch (...) {
    loading = false;
    throw;
  }
  loading = false;
  loaded = true;
}

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
  load_environment_plugins();
  Devices& all = devices();
  std::lock_guard<std::mutex> lock(all.mutex);
  return all.list;
}

void register_device(std::shared_ptr<Device> device, size_t position) {
  if (!device) throw InvalidArgument("register_device: no device");
  Devices& all = devices();
  std::lock_guard<std::mutex> lock(all.mutex);
  try {
    all.add(std::move(device), position);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(fmt::format("register_device: {}", error.what()));
  }
}

std::string load_plugin(const std::string& path, size_t position) { return register_plugin(path, position); }

}  // namespace tbcoll::transport
