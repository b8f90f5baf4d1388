// ibverbs device: offered when the system's verbs library loads and a device has an active port with an
// IPv4-mapped GID; one port per rank and device (port.h), shared by the rank's communicators.
#include "transports/ibverbs/device.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "common/env.h"
#include "common/log.h"
#include "transports/ibverbs/context.h"
#include "transports/ibverbs/port.h"
#include "transports/ibverbs/wire.h"
#include "transports/registry.h"

namespace tbcoll::ibverbs {
namespace {

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Mode parse_mode(const std::string& text) {
  if (text == "uc" || text == "auto" || text.empty()) return Mode::kUc;  // auto: the subset every stack has
  if (text == "rc") return Mode::kRc;
  throw InvalidArgument(fmt::format("[env] TBCOLL_IB_MODE={:?}: use uc, rc or auto", text));
}

class Device final : public transport::Device {
 public:
  Device(const VerbsApi* verbs, std::string name, bool same_process_only)
      : verbs_(verbs), name_(std::move(name)), same_process_only_(same_process_only) {}

  std::string name() const override { return name_; }
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps;
    caps.latency_us = 5;      // Thunderbolt 5 UC SEND, one way (public figures: 4.2-4.6 us)
    caps.bandwidth_gbps = 9;  // one UC queue pair, 64 KiB messages (~75 Gb/s)
    caps.max_message_bytes = wire::kMaxMessageBytes;
    caps.needs_registered_memory = true;  // payloads go through the connection's registered frames
    caps.same_process_only = same_process_only_;
    return caps;
  }
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return !same_process_only_ || (self.host_id == peer.host_id && self.process_id == peer.process_id);
  }

  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    const env::Settings settings(args.knobs);
    PortOptions options;
    options.mode = parse_mode(settings.get("TBCOLL_IB_MODE"));
    options.devices = split_names(settings.get("TBCOLL_IB_DEVICES"));
    options.listen_host = settings.get("TBCOLL_SOCKET_ADDR");
    if (options.listen_host.empty()) options.listen_host = args.bind_host;
    options.token = args.token;
    options.secret = args.secret;
    const std::string presence = fmt::format("{:x}.{}", args.self.process_id, args.self.instance);
    return make_context(port_for(presence, options), args);
  }

 private:
  // The rank's port: the one its other communicators use, if any, else a new one.
  std::shared_ptr<Port> port_for(const std::string& presence, const PortOptions& options) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<Port> port = ports_[presence].lock();
    if (!port) {
      port = std::make_shared<Port>(*verbs_, presence, options);
      ports_[presence] = port;
    }
    return port;
  }

  const VerbsApi* verbs_;
  std::string name_;
  bool same_process_only_;
  std::mutex mutex_;
  std::map<std::string, std::weak_ptr<Port>> ports_;
};

}  // namespace

std::shared_ptr<transport::Device> make_device(const VerbsApi* verbs, std::string name, bool same_process_only) {
  return std::make_shared<Device>(verbs, std::move(name), same_process_only);
}

}  // namespace tbcoll::ibverbs

namespace tbcoll::transport {

std::shared_ptr<Device> make_ibverbs_device() {
  std::string why;
  const ibverbs::VerbsApi* verbs = ibverbs::system_verbs(&why);
  if (verbs == nullptr) {
    log::info("[ibverbs] {} (the ibverbs transport is not offered)", why);
    return nullptr;
  }
  try {
    ibverbs::probe(*verbs, ibverbs::split_names(env::get("TBCOLL_IB_DEVICES")));
  } catch (const Error& error) {
    log::info("{} (the ibverbs transport is not offered)", error.what());
    return nullptr;
  }
  return ibverbs::make_device(verbs, "ibverbs");
}

}  // namespace tbcoll::transport
