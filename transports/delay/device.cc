// The link emulation as a device wrapper (devices_for in common/set_up_devices.h): each device of the set-up wrapped
// so that its endpoints look like the emulated link (delay.h), its capabilities say what that link costs (the
// cost model prices it like any link), and its contexts offer no whole-collective fast path (a fast path would
// bypass the endpoints, and the emulation with them).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/env.h"
#include "common/set_up_devices.h"
#include "tbcoll/transport.hpp"
#include "transports/delay/delay.h"
#include "transports/delay/emulation.h"

namespace tbcoll::transport {
namespace {

using Waiting = std::shared_ptr<std::atomic<int>>;

class EmulatedContext final : public Context {
 public:
  EmulatedContext(std::unique_ptr<Context> inner, const LinkEmulation& link, Waiting waiting)
      : inner_(std::move(inner)), link_(link), waiting_(std::move(waiting)) {}
  std::string address() const override { return inner_->address(); }
  std::string address_for(const PeerAddress& peer) override { return inner_->address_for(peer); }
  std::vector<std::unique_ptr<Endpoint>> connect(const std::vector<PeerAddress>& peers, Deadline deadline) override {
    std::vector<std::unique_ptr<Endpoint>> endpoints = inner_->connect(peers, deadline);
    for (auto& endpoint : endpoints) {
      if (link_.applies_to(endpoint->peer())) endpoint = with_emulation(std::move(endpoint), link_, waiting_);
    }
    return endpoints;
  }
  void abort() override { inner_->abort(); }
  CollectiveFastPath* fast_path() override { return nullptr; }
  // Sends pass through to the inner endpoints unchanged, so the inner transport can send from registered memory.
  std::unique_ptr<Registration> register_memory(const void* base, size_t bytes) override {
    return inner_->register_memory(base, bytes);
  }

 private:
  std::unique_ptr<Context> inner_;
  LinkEmulation link_;
  Waiting waiting_;
};

class EmulatedDevice final : public Device {
 public:
  EmulatedDevice(std::shared_ptr<Device> inner, const LinkEmulation& link, Waiting waiting)
      : inner_(std::move(inner)), link_(link), waiting_(std::move(waiting)) {}
  std::string name() const override { return inner_->name(); }
  Capabilities capabilities() const override {
    Capabilities caps = inner_->capabilities();
    caps.latency_us += link_.one_way_seconds() * 1e6;  // added to the transport's own (delay.h)
    const double seconds_per_byte = link_.seconds_per_byte();
    if (seconds_per_byte > 0) caps.link_bandwidth_gbps = 1e-9 / seconds_per_byte;
    return caps;
  }
  bool can_connect(const PeerInfo& self, const PeerInfo& peer) const override {
    return inner_->can_connect(self, peer);
  }
  bool can_connect_addresses(const PeerInfo& self, const std::string& self_address, const PeerInfo& peer,
                             const std::string& peer_address, std::string* why_not) const override {
    return inner_->can_connect_addresses(self, self_address, peer, peer_address, why_not);
  }
  std::vector<FastPathAlgorithm> fast_path_algorithms() const override { return inner_->fast_path_algorithms(); }
  std::unique_ptr<Context> create_context(const ContextArgs& args) override {
    return std::make_unique<EmulatedContext>(inner_->create_context(args), link_, waiting_);
  }

 private:
  std::shared_ptr<Device> inner_;
  LinkEmulation link_;
  Waiting waiting_;
};

// The emulation's canonical text: what a tune file records of the links it was measured on.
std::string token_of(const LinkEmulation& link) {
  if (!link.on()) return "off";
  std::string token = fmt::format("latency_us={:g}", link.one_way_seconds() * 1e6);
  if (link.gbit_per_s > 0) token += fmt::format(",gbps={:g}", link.gbit_per_s / link.dilation);
  return token;
}

}  // namespace

SetUpDevices devices_for(const std::map<std::string, std::string>& knobs) {
  const env::Settings settings(knobs);
  const LinkEmulation link =
      parse_link_emulation(settings.get("TBCOLL_LINK_EMULATION"), settings.get_int("TBCOLL_LINK_DELAY_US"));
  SetUpDevices out;
  out.devices = available_devices();
  out.emulated = link.on();
  out.emulation = link.describe();
  out.emulation_token = token_of(link);
  if (!link.on()) return out;
  // One counter for every endpoint of the communicator (delay.h): while any receive waits for its bytes, waits
  // nap in short slices to stamp them on time, whichever transport they are on.
  auto waiting = std::make_shared<std::atomic<int>>(0);
  for (auto& device : out.devices) device = std::make_shared<EmulatedDevice>(device, link, waiting);
  return out;
}

}  // namespace tbcoll::transport
