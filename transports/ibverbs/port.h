// A rank's presence on one RDMA device: the opened device, its protection domain, a TCP listener for the side
// channels, and the connections to other ports. Every communicator of that rank (a world and its splits) shares
// them, so splitting never opens more queue pairs than there are peers: Apple allows about 10 per device in a
// process, and a second context on one device has deadlocked its driver.
//
// A port lives while a context uses it (the device keeps a weak reference). Its key names the presence (process
// and PeerInfo::instance) and a random nonce, so a port opened later by the same rank is a new peer to everyone.
// Connections are made through the side channel: the port with the smaller key dials, the other accepts. The keys
// of one rank's ports (one per device it uses) differ only after the presence, so every pair of ranks compares
// alike on every device: a rank dials another on all rails or on none (context.cc relies on it).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tbcoll/store.hpp"
#include "transports/ibverbs/connection.h"
#include "transports/ibverbs/probe.h"

namespace tbcoll::ibverbs {

struct PortOptions {
  Mode mode = Mode::kUc;
  bool auto_mode = false;   ///< TBCOLL_IB_MODE=auto: RC if the device creates an RC queue pair, else UC
  int post_batch = 0;       ///< TBCOLL_IB_POST_BATCH (0: 1 on Apple's librdma, 16 elsewhere)
  size_t slot_bytes = 0;    ///< TBCOLL_IB_SLOT_BYTES (0: wire::slot_bytes_for the provider and macOS version)
  bool payload_sum = false; ///< TBCOLL_IB_PAYLOAD_SUM
  int zero_copy = -1;       ///< TBCOLL_IB_ZERO_COPY: 1 on, 0 off, -1 auto (off on Apple's librdma)
  std::string listen_host;  ///< where the side-channel listener binds (the interface reaching the root)
  std::string token;        ///< job token, checked in every handshake
  std::string secret;       ///< job secret ("" for none): proved both ways after the dialer's hello, over both ports'
                            ///< keys (common/auth.h, wire::side_channel_context)
};

/// What a port publishes (Port::address()), parsed.
struct PortAddress {
  std::string key;
  std::string side_channel;  ///< host:port of its listener
  std::string device;
  Mode mode = Mode::kUc;
  bool auto_mode = false;
};

class Port {
 public:
  /// Takes the process's opened `device` (probe.h opened_device: opened once, shared by every port of the process)
  /// for the rank `presence`; it must be usable (probe_all). With options.auto_mode, creates an RC queue pair once
  /// to learn whether the device has RC (Apple's refuses it).
  Port(const VerbsApi& verbs, const std::string& presence, const std::string& device, const PortOptions& options);
  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  const std::string& key() const { return key_; }
  const std::string& device() const { return local_.device; }
  Mode mode() const { return local_.mode; }
  bool auto_mode() const { return local_.auto_mode; }
  /// The opened device, its protection domain and settings (what its connections are made with).
  const LocalPort& local() const { return local_; }
  const std::shared_ptr<OpenDevice>& open_device() const { return device_; }
  /// The device's max_qp (ibv_query_device; 0 when it says nothing): the queue pair budget's ceiling (device.cc).
  int max_qp() const { return max_qp_; }
  /// What peers need to reach this port: "<key>|<host>:<port>|<device>|<mode>", mode "uc", "rc", "uc+auto"...
  std::string address() const;
  /// Splits an address; InvalidArgument if malformed.
  static PortAddress parse(const std::string& address);

  /// Whether connections made from now on get a bulk lane (a second queue pair): false where the device has no
  /// room for two queue pairs per peer (Context::connect decides, from the peers over it). Any thread.
  void set_bulk_lanes(bool bulk) { bulk_lanes_ = bulk && !frames_only_; }

  /// The live connection to the port keyed peer_key, or null.
  std::shared_ptr<Connection> find(const std::string& peer_key);
  /// The connection to `peer` (whose key is larger than this port's), dialed unless there is one. Blocks until it
  /// is established or the deadline (TimeoutError), *cancelled (InvalidUsage); IoError if the port there is not
  /// the one published.
  std::shared_ptr<Connection> dial(const PortAddress& peer, Deadline deadline, const std::atomic<bool>* cancelled);
  /// Accepts one caller if one is waiting (polling up to `wait`) and files its connection (find() then returns it):
  /// what a rank waiting for its peers' calls does, on each of its ports in turn.
  void accept_one(Deadline deadline, const std::atomic<bool>* cancelled, std::chrono::milliseconds wait);

 private:
  std::shared_ptr<Connection> dial_locked(const PortAddress& peer, Deadline deadline,
                                          const std::atomic<bool>* cancelled);
  void send_hello(int fd, const Connection& connection, Deadline deadline, const std::atomic<bool>* cancelled);
  /// Reads a hello and the token after it; "" if it is not one of ours (token, magic, meant for another port).
  bool read_hello(int fd, wire::Hello* hello, Deadline deadline, const std::atomic<bool>* cancelled);
  bool admit(int fd, wire::Hello* theirs, Deadline limit, const std::atomic<bool>* cancelled);

  const VerbsApi& verbs_;
  PortOptions options_;
  LocalPort local_;
  std::shared_ptr<OpenDevice> device_;  // local_.context and pd: the process's (kept open), or this port's alone
  std::string key_;
  int listen_fd_ = -1;
  std::string listen_address_;
  std::atomic<bool> bulk_lanes_{true};
  int max_qp_ = 0;
  bool frames_only_ = false;  ///< no bulk slots on this port (Apple before macOS 26.3, or a small max_msg_sz)
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Connection>> connections_;  // by peer key
};

}  // namespace tbcoll::ibverbs
