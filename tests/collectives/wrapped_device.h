// A test transport made of another one: WrappedDevice forwards everything to an inner device (loopback), and a
// test overrides what it examines (capabilities, how contexts and endpoints behave). register_wrapped() adds it
// to the process's transports once, last, so only communicators that name it use it.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tbcoll/transport.hpp"

namespace tbcoll::test {

class WrappedDevice : public transport::Device {
 public:
  WrappedDevice(std::string name, std::shared_ptr<transport::Device> inner)
      : name_(std::move(name)), inner_(std::move(inner)) {}
  std::string name() const override { return name_; }
  transport::Capabilities capabilities() const override { return inner_->capabilities(); }
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return inner_->can_connect(self, peer);
  }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return inner_->create_context(args);
  }

 protected:
  std::string name_;
  std::shared_ptr<transport::Device> inner_;
};

/// A context made of another one: forwards address, connect and abort; a test overrides what it examines, and
/// wraps each endpoint that connect() hands out (wrap_endpoint).
class WrappedContext : public transport::Context {
 public:
  explicit WrappedContext(std::unique_ptr<transport::Context> inner) : inner_(std::move(inner)) {}
  std::string address() const override { return inner_->address(); }
  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline deadline) override {
    auto endpoints = inner_->connect(peers, deadline);
    for (auto& endpoint : endpoints) endpoint = wrap_endpoint(std::move(endpoint));
    return endpoints;
  }
  void abort() override { inner_->abort(); }

 protected:
  /// The endpoint connect() hands out for one the inner context made: that one itself unless overridden.
  virtual std::unique_ptr<transport::Endpoint> wrap_endpoint(std::unique_ptr<transport::Endpoint> endpoint) {
    return endpoint;
  }

  std::unique_ptr<transport::Context> inner_;
};

/// Registers DeviceT(loopback) once per process (DeviceT's constructor takes the inner device).
template <typename DeviceT>
void register_wrapped() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const auto& device : transport::available_devices()) {
      if (device->name() == "loopback") transport::register_device(std::make_shared<DeviceT>(device));
    }
  });
}

}  // namespace tbcoll::test
