#include "transports/ibverbs/probe.h"

#include <errno.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"
#include "tbcoll/error.hpp"
#include "transports/ibverbs/hints.h"

namespace tbcoll::ibverbs {
namespace {

// The device list, freed on every path.
struct DeviceList {
  const VerbsApi& verbs;
  ibv_device** list = nullptr;
  int count = 0;
  explicit DeviceList(const VerbsApi& v) : verbs(v) { list = verbs.get_device_list(&count); }
  ~DeviceList() {
    if (list != nullptr) verbs.free_device_list(list);
  }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;
};

bool allowed(const std::vector<std::string>& names, const std::string& name) {
  return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
}

// A cabled, active port that cannot be used (no IPv4 address behind it) sends its traffic over tcp instead: worth a
// warning, once per device and process (its ports are queried again by every communicator's probe).
void warn_once_unaddressed(const std::string& why_not, const std::string& device) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(device).second) return;
  log::warn("[ibverbs] {} (its peers are reached another way, tcp if nothing else)", why_not);
}

// The process's opened devices, by (verbs table, scope, name). Never destroyed: at exit the OS closes the devices,
// and no static destructor runs verbs (the provider's own statics may be gone by then).
struct OpenedDevices {
  std::mutex mutex;
  std::map<std::tuple<const VerbsApi*, std::string, std::string>, std::shared_ptr<OpenDevice>> devices;
};

OpenedDevices& opened_devices() {
  static OpenedDevices* const devices = new OpenedDevices;  // NOLINT: leaked on purpose (see above)
  return *devices;
}

std::shared_ptr<OpenDevice> open_new(const VerbsApi& verbs, const std::string& name) {
  errno = 0;
  ibv_context* context = open_device_named(verbs, name);
  if (context == nullptr) {
    const int error = errno;
    throw IoError(fmt::format("[ibverbs] {}", error == ENODEV ? fmt::format("{}: no such RDMA device", name)
                                                              : hints::describe(hints::Verb::kOpenDevice, error,
                                                                                {name, false})));
  }
  return std::make_shared<OpenDevice>(&verbs, name, context);
}

}  // namespace

OpenDevice::~OpenDevice() {
  if (pd != nullptr) verbs->dealloc_pd(pd);
  verbs->close_device(context);
}

ibv_pd* OpenDevice::protection_domain() {
  std::lock_guard<std::mutex> lock(mutex);
  if (pd != nullptr) return pd;
  errno = 0;
  pd = verbs->alloc_pd(context);
  if (pd == nullptr) throw IoError(fmt::format("[ibverbs] {}", hints::describe(hints::Verb::kAllocPd, errno, {name})));
  return pd;
}

std::shared_ptr<OpenDevice> opened_device(const VerbsApi& verbs, const std::string& name) {
  std::string scope;
  if (verbs.open_scope != nullptr && !verbs.open_scope(&scope)) return open_new(verbs, name);
  OpenedDevices& opened = opened_devices();
  // Under the lock for the whole opening: two threads asking at once get one context.
  std::lock_guard<std::mutex> lock(opened.mutex);
  std::shared_ptr<OpenDevice>& device = opened.devices[{&verbs, scope, name}];
  if (!device) device = open_new(verbs, name);
  return device;
}

bool ipv4_mapped(const ibv_gid& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid.raw[i] != 0) return false;
  }
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

std::string ipv4_of(const ibv_gid& gid) {
  return fmt::format("{}.{}.{}.{}", gid.raw[12], gid.raw[13], gid.raw[14], gid.raw[15]);
}

ibv_context* open_device_named(const VerbsApi& verbs, const std::string& name) {
  DeviceList devices(verbs);
  for (int d = 0; devices.list != nullptr && d < devices.count; ++d) {
    if (name == verbs.get_device_name(devices.list[d])) return verbs.open_device(devices.list[d]);
  }
  errno = ENODEV;
  return nullptr;
}

uint8_t active_port(const VerbsApi& verbs, ibv_context* context, ibv_port_attr* attr, std::string* states) {
  ibv_device_attr device{};
  const int ports = verbs.query_device(context, &device) == 0 ? std::max<int>(1, device.phys_port_cnt) : 1;
  for (int port = 1; port <= std::min(ports, 255); ++port) {
    *attr = ibv_port_attr{};
    const bool queried = verbs.query_port(context, static_cast<uint8_t>(port), attr) == 0;
    if (queried && attr->state == IBV_PORT_ACTIVE) return static_cast<uint8_t>(port);
    *states += fmt::format("{}port {} {}", states->empty() ? "" : ", ", port,
                           queried ? port_state_name(attr->state, "not active") : "cannot be queried");
  }
  return 0;
}

Found inspect_port(const VerbsApi& verbs, ibv_context* context, const std::string& name, std::string* why_not) {
  Found found;
  found.name = name;
  ibv_port_attr attr{};
  std::string states;
  found.port = active_port(verbs, context, &attr, &states);
  if (found.port == 0) {
    *why_not = fmt::format("{}: no port is ACTIVE ({}): is the other end's RDMA enabled and the cable in?", name,
                           states);
    found.port = 1;
    return found;
  }
  found.active = true;
  found.lid = attr.lid;
  found.mtu = attr.active_mtu;
  found.max_msg_bytes = attr.max_msg_sz;
  for (int index = 0; index < std::max(1, attr.gid_tbl_len) && found.gid_index < 0; ++index) {
    ibv_gid gid{};
    if (verbs.query_gid(context, found.port, index, &gid) == 0 && ipv4_mapped(gid)) {
      found.gid_index = index;
      found.gid = gid;
    }
  }
  *why_not = found.gid_index >= 0 ? "" : fmt::format("{}: no IPv4-mapped GID: {}", name, hints::no_ipv4_gid_fix(name));
  return found;
}

const char* port_state_name(int state, const char* other) {
  switch (state) {
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
    default:
      return other;
  }
}

std::vector<Found> probe_all(const VerbsApi& verbs, const std::vector<std::string>& allowed_names) {
  errno = 0;
  DeviceList devices(verbs);
  if (devices.list == nullptr || devices.count == 0) {
    const int error = errno;
    throw IoError(fmt::format("[ibverbs] no RDMA device: {}", hints::fix(hints::Verb::kGetDeviceList, error, {})));
  }
  std::vector<std::string> seen;
  std::vector<Found> usable;
  for (int d = 0; d < devices.count; ++d) {
    const std::string name = verbs.get_device_name(devices.list[d]);
    if (!allowed(allowed_names, name)) continue;
    std::shared_ptr<OpenDevice> device;
    try {
      device = opened_device(verbs, name);
    } catch (const IoError& error) {
      std::string what = error.what();
      if (what.rfind("[ibverbs] ", 0) == 0) what.erase(0, 10);
      seen.push_back(fmt::format("{}: cannot open: {}", name, what));
      continue;
    }
    std::string why_not;
    const Found found = inspect_port(verbs, device->context, name, &why_not);
    if (!why_not.empty()) {
      if (found.active) warn_once_unaddressed(why_not, name);
      seen.push_back(why_not);
      continue;
    }
    usable.push_back(found);
  }
  if (!usable.empty()) return usable;
  if (seen.empty()) {
    throw IoError(fmt::format("[ibverbs] none of the RDMA devices is one of TBCOLL_IB_DEVICES={}",
                              fmt::join(allowed_names, ",")));
  }
  throw IoError(fmt::format("[ibverbs] no usable RDMA device: {}", fmt::join(seen, "; ")));
}

std::vector<std::string> device_names(const VerbsApi& verbs) {
  DeviceList devices(verbs);
  std::vector<std::string> names;
  for (int d = 0; devices.list != nullptr && d < devices.count; ++d) names.push_back(verbs.get_device_name(devices.list[d]));
  return names;
}

}  // namespace tbcoll::ibverbs
