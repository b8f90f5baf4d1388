// Loopback device: reachable when both ranks are threads of this process (context.cc).
#include "transports/loopback/context.h"
#include "transports/devices.h"

namespace tbcoll::loopback {
namespace {

class Device final : public transport::Device {
 public:
  std::string name() const override { return "loopback"; }
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps;
    caps.latency_us = 0.5;
    caps.bandwidth_gbps = 10;
    caps.message_overhead_us = 0.1;  // a queue hand-off
    caps.same_process_only = true;
    caps.same_host_only = true;
    return caps;
  }
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return self.host_id == peer.host_id && self.process_id == peer.process_id;
  }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return make_context(args);
  }
};

}  // namespace
}  // namespace tbcoll::loopback

namespace tbcoll::transport {
std::shared_ptr<Device> make_loopback_device() { return std::make_shared<loopback::Device>(); }
}  // namespace tbcoll::transport
