// shm device: reaches the ranks of this host (equal host ids), one context per communicator (context.cc).
#include "transports/devices.h"
#include "transports/shm/context.h"
#include "transports/shm/fast_path.h"

namespace tbcoll::shm {
namespace {

class Device final : public transport::Device {
 public:
  std::string name() const override { return "shm"; }
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps;
    caps.latency_us = 0.3;
    caps.bandwidth_gbps = 8;
    caps.message_overhead_us = 0.1;  // a slot hand-off
    caps.same_host_only = true;
    return caps;
  }
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return self.host_id == peer.host_id;
  }
  std::vector<transport::FastPathAlgorithm> fast_path_algorithms() const override { return FastPath::catalogue(); }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return make_context(args);
  }
};

}  // namespace
}  // namespace tbcoll::shm

namespace tbcoll::transport {
std::shared_ptr<Device> make_shm_device() { return std::make_shared<shm::Device>(); }
}  // namespace tbcoll::transport
