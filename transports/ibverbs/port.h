// A rank's presence on one RDMA device: the opened device, its protection domain, a TCP listener for the side
// channels, and the connections to other ports. Every communicator of that rank (a world and its splits) shares
// them, so splitting never opens more queue pairs than there are peers: Apple allows about 10 per device in a
// process, and a second context on one device has deadlocked its driver.
//
// A port lives while a context uses it (the device keeps a weak reference). Its key names the presence (process
// and PeerInfo::instance) and a random nonce, so a port opened later by the same rank is a new peer to everyone.
// Connections are made through the side channel: the port with the smaller key dials, the other accepts.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tbcoll/store.hpp"
#include "transports/ibverbs/connection.h"

namespace tbcoll::ibverbs {

struct PortOptions {
  Mode mode = Mode::kUc;
  std::vector<std::string> devices;  ///< allowed device names (TBCOLL_IB_DEVICES); empty: any
  std::string listen_host;           ///< where the side-channel listener binds (the interface reaching the root)
  std::string token;                 ///< job token, checked in every handshake
  std::string secret;                ///< job secret ("" for none): proved both ways first thing (common/auth.h)
};

/// A usable device and port, as found by probe().
struct Found {
  std::string name;
  uint8_t port = 1;
  int gid_index = -1;
  ibv_gid gid{};
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;
};

/// The first device (among allowed, if any) with an active port and an IPv4-mapped GID. Throws IoError with what
/// was found instead and how to fix it (no devices, ports down, no IPv4 address behind the GID).
Found probe(const VerbsApi& verbs, const std::vector<std::string>& allowed);

class Port {
 public:
  Port(const VerbsApi& verbs, const std::string& presence, const PortOptions& options);
  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  const std::string& key() const { return key_; }
  /// What peers need to reach this port: "<key>|<host>:<port>|<device>".
  std::string address() const;
  /// The connection to the port published as `address` (address() of a peer), made if there is none yet (this
  /// port dials when its key is the smaller, else waits for the peer's call). Blocks until it is established or
  /// the deadline (TimeoutError), *cancelled (InvalidUsage). Throws IoError for a malformed address.
  std::shared_ptr<Connection> connect(const std::string& address, Deadline deadline,
                                      const std::atomic<bool>* cancelled);
  /// Splits an address into key, side-channel host:port and device name; InvalidArgument if malformed.
  static void parse(const std::string& address, std::string* key, std::string* side_channel, std::string* device);

 private:
  std::shared_ptr<Connection> dial(const std::string& peer_key, const std::string& side_channel, Deadline deadline,
                                   const std::atomic<bool>* cancelled);
  /// Accepts one caller if one is waiting (up to ~10 ms); returns the key it connected, or "".
  std::string accept_one(Deadline deadline, const std::atomic<bool>* cancelled);
  void send_hello(int fd, const Connection& connection, Deadline deadline, const std::atomic<bool>* cancelled);
  /// Reads a hello and the token after it; "" if it is not one of ours (token, magic, meant for another port).
  bool read_hello(int fd, wire::Hello* hello, Deadline deadline, const std::atomic<bool>* cancelled);

  const VerbsApi& verbs_;
  PortOptions options_;
  LocalPort local_;
  std::string key_;
  int listen_fd_ = -1;
  std::string listen_address_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Connection>> connections_;  // by peer key
};

}  // namespace tbcoll::ibverbs
