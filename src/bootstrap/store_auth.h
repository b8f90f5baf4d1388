// Rendezvous records that authenticate themselves: with a job secret, every value a communicator sets carries an
// HMAC-SHA256 over the job token, its key and the value, and every value it gets is checked before use, whatever
// store carries them (tbcoll's TCP store, torch's TCPStore, a Python store, one in memory). A record written or
// rewritten by someone without the secret (a local user who reached an unauthenticated store and pointed a peer
// record at a relay) fails the set-up with an error naming the key, instead of being trusted. Counters (add) carry
// no MAC: rewriting one can stall a job, not redirect or alter its data.
#pragma once

#include <memory>
#include <string>

#include "tbcoll/store.hpp"

namespace tbcoll::bootstrap {

/// store itself when secret is empty or it authenticates its records already; else a store that seals every set
/// and opens every get with the secret (token binds the records to this job: one job's cannot be replayed in
/// another's).
std::shared_ptr<Store> authenticated(std::shared_ptr<Store> store, const std::string& secret, const std::string& token);

/// True for the stores tbcoll opens itself: make_in_memory_store()'s (threads of one process: no one else reaches
/// it) and the TCP store's clients (connect_tcp_store: its connections prove the job secret when there is one).
bool is_in_memory(const Store& store);
bool is_tcp_client(const Store& store);

}  // namespace tbcoll::bootstrap
