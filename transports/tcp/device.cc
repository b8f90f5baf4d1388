// tcp device: reaches any peer with an address; one context per communicator (context.cc).
#include "transports/devices.h"
#include "transports/tcp/context.h"

namespace tbcoll::tcp {
namespace {

class Device final : public transport::Device {
 public:
  std::string name() const override { return "tcp"; }
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps;
    caps.latency_us = 5;
    caps.bandwidth_gbps = 3;
    caps.message_overhead_us = 2.5;  // a send and a receive system call on loopback: 2-4 us each here
    return caps;
  }
  bool can_connect(const transport::PeerInfo&, const transport::PeerInfo&) const override { return true; }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return make_context(args);
  }
};

}  // namespace
}  // namespace tbcoll::tcp

namespace tbcoll::transport {
std::shared_ptr<Device> make_tcp_device() { return std::make_shared<tcp::Device>(); }
}  // namespace tbcoll::transport
