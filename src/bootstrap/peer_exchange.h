// The second set-up round (transport.h): contexts whose devices want per-peer addresses produce one for each
// peer they will connect, delivered through the store to that peer alone.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tbcoll/store.hpp"
#include "tbcoll/transport.hpp"

namespace tbcoll::bootstrap {

using Devices = std::vector<std::shared_ptr<transport::Device>>;

/// The device of that name among devices; Error if none (a programming error).
transport::Device& device_named(const Devices& devices, const std::string& name);

/// For every device in plan whose capabilities say per_peer_addresses: publishes contexts[device]->address_for(peer)
/// under "<prefix>/pair/<rank>/<peer>" for each planned peer, then reads "<prefix>/pair/<peer>/<rank>" into that
/// peer's PeerAddress::for_me (and erases it: each key has one reader). Blocks until every peer published or the
/// deadline (TimeoutError) or *cancelled (InvalidUsage, may be null).
void exchange_per_peer_addresses(Store& store, const std::string& prefix, int rank, const Devices& devices,
                                 const std::map<std::string, std::unique_ptr<transport::Context>>& contexts,
                                 std::map<std::string, std::vector<transport::PeerAddress>>& plan, Deadline deadline,
                                 const std::atomic<bool>* cancelled);

}  // namespace tbcoll::bootstrap
