// ibverbs context: the address lists the rank's ports and routes (routes.h); connect() makes (or reuses) one
// connection per rail to each peer, the rank with the smaller port keys dialing first so no two ranks wait on each
// other, and puts this communicator's endpoint on them.
#include "transports/ibverbs/context.h"

#include <algorithm>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "common/time.h"
#include "transports/endpoint_list.h"
#include "transports/ibverbs/endpoint.h"
#include "transports/ibverbs/registry.h"

namespace tbcoll::ibverbs {
namespace {

class Context final : public transport::Context {
 public:
  Context(std::vector<std::shared_ptr<Port>> ports, ContextAddress self, size_t stripe_bytes,
          const transport::ContextArgs& args)
      : ports_(std::move(ports)), self_(std::move(self)), stripe_bytes_(stripe_bytes), args_(args) {
    bool apple = false;
    for (const auto& port : ports_) {
      self_.ports.push_back(port->address());
      apple = apple || port->local().apple;
    }
    pace_ = Pace::from(env::Settings(args.knobs), apple);
  }

  std::string address() const override { return encode(self_); }

  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline deadline) override {
    std::vector<Peer> dialed, awaited;
    std::map<std::string, int> peers_on;  // device -> peers over it
    for (const auto& peer : peers) {
      std::string why_not;
      Peer entry{peer.rank, rails_between(self_, decode_context_address(peer.address), &why_not), {}};
      if (entry.rails.empty()) {
        throw IoError(fmt::format("[ibverbs] rank {}: cannot reach peer {}: {}", args_.rank, peer.rank, why_not));
      }
      for (const Rail& rail : entry.rails) ++peers_on[rail.device];
      // A rank's port keys all compare alike with another rank's (port.h): it dials on every rail or on none.
      (port(entry.rails[0].device).key() < entry.rails[0].peer.key ? dialed : awaited).push_back(std::move(entry));
    }
    check_subnet_budgets(peers_on);
    for (const auto& port : ports_) {  // two queue pairs per peer where the device has room for them, else one
      auto limit = self_.budget.find(port->device());
      const int peers = peers_on.count(port->device()) != 0 ? peers_on.at(port->device()) : 0;
      port->set_bulk_lanes(limit == self_.budget.end() || limit->second == 0 ||
                           peers * kQueuePairsPerPeer <= limit->second);
    }
    // Dial the ranks with larger keys first, then wait for the smaller ones' calls, accepting on every port: waits
    // only ever point from a smaller key to a larger, so they cannot form a cycle.
    for (Peer& peer : dialed) {
      for (const Rail& rail : peer.rails) {
        peer.connections.push_back(port(rail.device).dial(rail.peer, deadline, args_.cancelled));
      }
    }
    for (;;) {
      bool all = true;
      for (Peer& peer : awaited) {
        peer.connections.clear();
        for (const Rail& rail : peer.rails) {
          auto connection = port(rail.device).find(rail.peer.key);
          if (!connection) {
            all = false;
            break;
          }
          peer.connections.push_back(std::move(connection));
        }
        if (!all) break;
      }
      if (all) break;
      if (Clock::now() >= deadline) throw TimeoutError(missing(awaited));
      check_cancelled(args_.cancelled, fmt::format("[ibverbs] rank {}: connecting", args_.rank));
      const auto wait = std::chrono::milliseconds(ports_.size() > 1 ? 2 : 10);
      for (const auto& port : ports_) port->accept_one(deadline, args_.cancelled, wait);
    }
    std::vector<std::unique_ptr<transport::Endpoint>> out;
    for (std::vector<Peer>* group : {&dialed, &awaited}) {
      for (Peer& peer : *group) {
        std::string rails;
        for (size_t k = 0; k < peer.rails.size(); ++k) {
          rails += fmt::format("{}{}-{}", k == 0 ? "" : " + ", peer.rails[k].device, peer.rails[k].peer.device);
        }
        log::info("[ibverbs] rank {}: peer {} over {} ({} queue pair{})", args_.rank, peer.rank, rails,
                  mode_name(peer.connections[0]->mode()), peer.rails.size() > 1 ? "s, striped" : "");
        out.push_back(endpoints_.add<transport::Endpoint>(std::make_unique<Endpoint>(
            std::move(peer.connections), args_.rank, peer.rank, args_.comm_id, stripe_bytes_, registry_, pace_)));
      }
    }
    return out;
  }

  void abort() override { endpoints_.abort_all(); }

  std::unique_ptr<transport::Registration> register_memory(const void* base, size_t bytes) override {
    return register_region(registry_, ports_, base, bytes);
  }

 private:
  Pace pace_;  // how the endpoints' waits pass the time (TBCOLL_IB_SPIN_US, TBCOLL_IB_NAP_US)
  struct Peer {
    int rank;
    std::vector<Rail> rails;
    std::vector<std::shared_ptr<Connection>> connections;
  };

  // By subnet, a device's budget is known to hold only once every peer's rails are: over it, init fails naming it.
  void check_subnet_budgets(const std::map<std::string, int>& peers_on) const {
    if (self_.kind != ContextAddress::Kind::kSubnets) return;
    for (const auto& [device, peers] : peers_on) {
      auto limit = self_.budget.find(device);
      if (limit == self_.budget.end() || limit->second == 0 || peers <= limit->second) continue;
      throw InvalidArgument(fmt::format(
          "[ibverbs] rank {}: {} would need {} queue pairs (one per peer at least, {} peers on its subnet), over its "
          "limit of {} (TBCOLL_IB_MAX_QPS; Apple's Thunderbolt allows about 10 per device): give the peers other "
          "cables, or a device matrix",
          args_.rank, device, peers, peers, limit->second));
    }
  }

  Port& port(const std::string& device) {
    for (const auto& port : ports_) {
      if (port->device() == device) return *port;
    }
    throw InvalidArgument(fmt::format("[ibverbs] rank {}: no port on {}", args_.rank, device));
  }

  std::string missing(const std::vector<Peer>& awaited) {
    std::string names;
    for (const Peer& peer : awaited) {
      for (const Rail& rail : peer.rails) {
        if (!port(rail.device).find(rail.peer.key)) {
          names += fmt::format("{}peer {} on {} (its {})", names.empty() ? "" : ", ", peer.rank, rail.device,
                               rail.peer.device);
        }
      }
    }
    return fmt::format("[ibverbs] rank {}: not connected before the deadline: {}", args_.rank, names);
  }

  std::vector<std::shared_ptr<Port>> ports_;
  ContextAddress self_;
  size_t stripe_bytes_;
  transport::ContextArgs args_;
  std::shared_ptr<Registry> registry_ = std::make_shared<Registry>();
  transport::EndpointList<Endpoint> endpoints_;
};

}  // namespace

std::unique_ptr<transport::Context> make_context(std::vector<std::shared_ptr<Port>> ports, ContextAddress self,
                                                 size_t stripe_bytes, const transport::ContextArgs& args) {
  return std::make_unique<Context>(std::move(ports), std::move(self), stripe_bytes, args);
}

}  // namespace tbcoll::ibverbs
