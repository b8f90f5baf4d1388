// A communicator's set-up, in named phases. Communicator::connect (communicator.cc) runs them in this order; each
// is a function of plain data, the pure ones (plan_links, link_costs) testable without a store or a transport.
//
//   1. open_rendezvous   the store (Config::store, or the TCP store rank 0 serves at TBCOLL_ROOT) and the
//                        communicator id rank 0 draws for the handshakes
//   2. publish_identity  a context per usable device, and this rank's record: host, process, CPUs, addresses
//   3. read_records      every rank's record; plan_links: the transport of every pair (the first device both
//                        offer that joins them, alike on every rank), the hosts, the machine's crowding
//   4. connect_links     the per-peer address round, the connections, the endpoints by rank
//   5. fast_path_of      a whole-collective fast path, where one transport joins every pair of ranks
//   6. make_tuner        the tuner, once: the knobs, the forced algorithms, the fast path's algorithms and the
//                        cost model's figures of the links (link_costs)
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/cost.h"
#include "bootstrap/rendezvous.h"
#include "common/env.h"
#include "tbcoll/tbcoll.hpp"
#include "tbcoll/transport.hpp"
#include "tuner.h"

namespace tbcoll::setup {

/// 64 random bits from std::random_device: ids of communicators and processes.
uint64_t random_u64();

using Devices = std::vector<std::shared_ptr<transport::Device>>;

/// Phase 1's result.
struct Rendezvous {
  std::shared_ptr<Store> store;           ///< null for a communicator of one rank
  std::shared_ptr<TcpStoreServer> server;  ///< hosted here (rank 0), shared with the splits; may be null
  uint64_t comm_id = 0;
  std::string bind_host;  ///< the local address that reached the store: where transports listen
};
Rendezvous open_rendezvous(const Config& config, const env::Settings& settings, const std::string& secret,
                           Deadline deadline, const std::atomic<bool>* cancelled);

/// Phase 2's result: this rank's record, published, and its contexts by device name.
struct Identity {
  bootstrap::Published self;
  std::map<std::string, std::unique_ptr<transport::Context>> contexts;
};
/// instance: PeerInfo::instance (the rank this rank had where its set-up started).
Identity publish_identity(const Config& config, const env::Settings& settings, const Devices& devices,
                          const Rendezvous& rendezvous, const std::string& secret, int instance, Deadline deadline,
                          const std::atomic<bool>* cancelled);
/// This host's identity (PeerInfo::host_id): ranks with equal ids talk through shared memory.
std::string host_id(const env::Settings& settings);

/// Phase 3: every rank's record (self's is given), checked to have the same world size.
std::vector<bootstrap::Published> read_records(Store& store, const std::string& prefix, int rank,
                                               const bootstrap::Published& self, Deadline deadline,
                                               const std::atomic<bool>* cancelled);
/// What the records decide, alike on every rank.
struct LinkPlan {
  std::map<std::string, std::vector<transport::PeerAddress>> peers_by_transport;  ///< this rank's peers
  std::vector<std::string> transport_names;  ///< by rank; "self" for this rank
  std::vector<int> host_of;  ///< by rank: hosts numbered 0.. in the order of their lowest rank
  int hosts = 1;
  double crowding = 1;  ///< ranks per CPU on the most crowded machine (machine_crowding)
  transport::SpinYield spin_yield = transport::SpinYield::kNowAndThen;
  int same_machine_peers = 0;
};
/// forced: TBCOLL_TRANSPORT ("" for none), named in the error when no transport reaches a peer.
LinkPlan plan_links(const Devices& devices, const std::vector<bootstrap::Published>& everyone, int rank,
                    const std::string& forced);
/// The transport ranks a and b pick for each other ("" if none; *why_not, may be null, says why). Symmetric.
std::string transport_between(const Devices& devices, const bootstrap::Published& a, const bootstrap::Published& b,
                              std::string* why_not = nullptr);

/// Phase 4's result: the communicator's links, fixed for its life.
struct Links {
  // Contexts are declared before endpoints so endpoints are destroyed first.
  std::vector<std::unique_ptr<transport::Context>> contexts;
  std::vector<std::unique_ptr<transport::Endpoint>> owned_endpoints;
  std::vector<transport::Endpoint*> peers;  ///< by rank; nullptr for this rank
  std::vector<size_t> max_message;          ///< by rank: the largest message its transport takes
  std::vector<std::string> transport_names;
  std::vector<int> host_of;
  int hosts = 1;
  transport::SpinYield spin_yield = transport::SpinYield::kNowAndThen;
  transport::CollectiveFastPath* fast_path = nullptr;  ///< owned by one of contexts; phase 5
};
/// The links of a communicator of one rank.
Links links_of_one();
/// plan's per-peer addresses are filled in on the way (Context::address_for).
Links connect_links(Identity identity, LinkPlan& plan, const Devices& devices, Store& store,
                    const std::string& prefix, int rank, int size, Deadline deadline,
                    const std::atomic<bool>* cancelled);

/// Phase 5: the fast path of the one transport that reached every peer, if it also joins every other pair of
/// ranks (decided from everyone's records, so every rank decides alike); else null.
transport::CollectiveFastPath* fast_path_of(const Links& links, const LinkPlan& plan, const Devices& devices,
                                            const std::vector<bootstrap::Published>& everyone);

/// Phase 6: the cost model's figures, the same on every rank: from every pair's transport capabilities, the
/// machines' crowding, then the knobs (TBCOLL_LINK_ALPHA_US, TBCOLL_LINK_GBPS). emulation: what the devices
/// emulate ("" or "off" for nothing), for the figures' source.
algo::CostParams link_costs(const Devices& devices, const std::vector<bootstrap::Published>& everyone,
                            double crowding, const std::string& emulation, const env::Settings& settings);
/// The algorithms the build's devices may offer as fast paths (TBCOLL_ALGO's names).
std::vector<KnownFastPath> known_fast_paths(const Devices& devices);

}  // namespace tbcoll::setup
