// Loopback device and context: reachable when both ranks are threads of this process.
#include <mutex>

#include "transports/loopback/endpoint.h"
#include "transports/registry.h"

namespace tbcoll::loopback {
namespace {

class Context final : public transport::Context {
 public:
  explicit Context(const transport::ContextArgs& args) : args_(args) {}

  std::string address() const override { return "loopback"; }

  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline) override {
    std::vector<std::unique_ptr<transport::Endpoint>> out;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& peer : peers) {
      auto endpoint = std::make_unique<Endpoint>(args_.rank, peer.rank, args_.comm_id);
      endpoints_.push_back(endpoint.get());
      out.push_back(std::move(endpoint));
    }
    return out;
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Endpoint* endpoint : endpoints_) endpoint->abort();
  }

 private:
  transport::ContextArgs args_;
  std::mutex mutex_;
  std::vector<Endpoint*> endpoints_;  // owned by the communicator, which destroys the context last
};

class Device final : public transport::Device {
 public:
  std::string name() const override { return "loopback"; }
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps;
    caps.latency_us = 0.5;
    caps.bandwidth_gbps = 10;
    caps.same_process_only = true;
    caps.same_host_only = true;
    return caps;
  }
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return self.host_id == peer.host_id && self.process_id == peer.process_id;
  }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return std::make_unique<Context>(args);
  }
};

}  // namespace
}  // namespace tbcoll::loopback

namespace tbcoll::transport {
std::shared_ptr<Device> make_loopback_device() { return std::make_shared<loopback::Device>(); }
}  // namespace tbcoll::transport
