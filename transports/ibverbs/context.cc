// ibverbs context: the address is the port's; connect() makes (or reuses) the port's connection to each peer's
// port, the smaller key dialing first so no two ports wait on each other, and puts this communicator's endpoint
// on it.
#include "transports/ibverbs/context.h"

#include <algorithm>

#include "transports/endpoint_list.h"
#include "transports/ibverbs/endpoint.h"

namespace tbcoll::ibverbs {
namespace {

class Context final : public transport::Context {
 public:
  Context(std::shared_ptr<Port> port, const transport::ContextArgs& args) : port_(std::move(port)), args_(args) {}

  std::string address() const override { return port_->address(); }

  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline deadline) override {
    // Dial the ports with larger keys first, then wait for the smaller ones' calls: waits only ever point from a
    // smaller key to a larger, so they cannot form a cycle.
    std::vector<const transport::PeerAddress*> order;
    for (const auto& peer : peers) order.push_back(&peer);
    auto dials = [&](const transport::PeerAddress* peer) {
      std::string key, side_channel, device;
      Port::parse(peer->address, &key, &side_channel, &device);
      return port_->key() < key;
    };
    std::stable_partition(order.begin(), order.end(), dials);
    std::map<int, std::shared_ptr<Connection>> connections;
    for (const transport::PeerAddress* peer : order) {
      connections[peer->rank] = port_->connect(peer->address, deadline, args_.cancelled);
    }
    std::vector<std::unique_ptr<transport::Endpoint>> out;
    for (const auto& peer : peers) {
      out.push_back(endpoints_.add<transport::Endpoint>(
          std::make_unique<Endpoint>(connections.at(peer.rank), args_.rank, peer.rank, args_.comm_id)));
    }
    return out;
  }

  void abort() override { endpoints_.abort_all(); }

 private:
  std::shared_ptr<Port> port_;
  transport::ContextArgs args_;
  transport::EndpointList<Endpoint> endpoints_;
};

}  // namespace

std::unique_ptr<transport::Context> make_context(std::shared_ptr<Port> port, const transport::ContextArgs& args) {
  return std::make_unique<Context>(std::move(port), args);
}

}  // namespace tbcoll::ibverbs
