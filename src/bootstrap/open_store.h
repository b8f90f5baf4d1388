// The rendezvous store a Config names, opened by a program that wants it for more than one communicator (or for
// something besides communicators): tbcoll-rdma-check and tbcoll-perf's verbs floors meet through it before and
// after their communicators exist. Rank 0 serves it (on the listening socket tbcoll-run passed in TBCOLL_ROOT_FD
// when there is one, else on TBCOLL_ROOT's port) and every rank connects, as Communicator::init does; pass the
// result on in Config::store and Config::server.
#pragma once

#include <memory>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::bootstrap {

struct OpenedStore {
  std::shared_ptr<Store> store;
  std::shared_ptr<TcpStoreServer> server;  ///< rank 0 only
};

/// The listening socket a launcher (tbcoll-run) bound for the store and passed in TBCOLL_ROOT_FD: taken once per
/// process, and only if it listens on the root's port; -1 otherwise (then rank 0 binds the port itself).
int take_inherited_listener(int port);

/// config.store when it is set; else the TCP store at config.root (InvalidArgument when there is none). Blocks
/// until connected or the deadline (TimeoutError).
OpenedStore open_store(const Config& config, Deadline deadline);

}  // namespace tbcoll::bootstrap
