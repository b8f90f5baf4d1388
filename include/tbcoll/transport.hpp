// The transport plug-in boundary: point-to-point byte movement between two ranks.
//
//   Device   one per transport kind in the process (available_devices() returns the same objects for the
//            process's life); says whether it can reach a peer and how well. It may own per-process resources
//            (a device handle, one connection per peer process) that the contexts of every communicator share.
//   Context  one per communicator and transport; listeners and connection set-up for that communicator.
//   Endpoint one per peer; ordered, reliable, tagged messages in both directions.
//   Request  one outstanding isend/irecv; test() never blocks, block() waits a bounded time.
//
// Matching rule: on one endpoint, messages are matched to receives in posting order (FIFO). Every message
// carries a tag and an opaque 64-bit signature (meta) chosen by the caller; a receive whose expected tag,
// meta or byte count differs from the arriving message fails with MismatchError (it never copies). Algorithms
// never know which transport they run on; transports never know which collective they serve.
//
// Set-up, per communicator: every rank creates a context per device and publishes address() (round 1); the
// ranks agree on one device per pair; a device whose capabilities say per_peer_addresses then gets a second
// round: address_for(peer) is delivered to that peer alone (an RDMA queue pair number made for it, say); then
// connect() with every peer's addresses.
//
// Sharing: several communicators of one process (a split and its parent, say) may connect the same pair of
// processes at once over the same device. A transport may give each its own connection, or multiplex one per
// pair of processes (where connections are scarce: Apple's Thunderbolt RDMA allows ~10 queue pairs per device in
// a process); either way the traffic of each context stays apart (ContextArgs::comm_id), and abort() or
// destruction of one context touches no other. The conformance suite checks this with two contexts at once.
//
// Threads: a Context and its Endpoints are driven by one thread at a time (the communicator's caller), except
// Context::abort(), which any thread may call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tbcoll/error.hpp"
#include "tbcoll/collective_fast_path.hpp"
#include "tbcoll/deadline.hpp"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::transport {

/// What the communicator publishes about a rank so devices can decide reachability.
struct PeerInfo {
  int rank = -1;
  std::string host_id;  ///< identity of the host (boot id + hostname); equal on the same machine
  uint64_t process_id = 0;  ///< pid plus a per-process nonce; equal for threads of one process
  /// The rank this rank had in the communicator its set-up started from (init; splits inherit it). With
  /// process_id it names one rank's presence across its communicators, also where ranks are threads of one
  /// process: what a transport that shares connections between communicators keys them by. Set for
  /// ContextArgs::self only.
  int instance = 0;
};

/// Hints and facts about a transport. The conformance suite checks the facts against what it does.
struct Capabilities {
  double latency_us = 0;        ///< hint: typical one-way small-message latency
  double bandwidth_gbps = 0;    ///< hint: typical single-peer bandwidth, GB/s
  /// hint: the bandwidth of each peer's link on its own, GB/s, where links to different peers are separate and
  /// slower than the transport stack (Thunderbolt cables, an emulated link); 0: the links are no bottleneck.
  double link_bandwidth_gbps = 0;
  /// hint: CPU time a rank spends per message it sends or receives (posting, completing, the system calls), in
  /// us: the cost model's per-message overhead (LogP's o), which makes many small messages dearer than a few.
  double message_overhead_us = 0;
  bool same_process_only = false;
  bool same_host_only = false;
  /// Largest single message an endpoint takes. The caller splits larger transfers (the algorithm executor
  /// sends them as consecutive messages of at most this size under the same tag); isend/irecv of more is
  /// refused with InvalidArgument.
  size_t max_message_bytes = SIZE_MAX;
  /// Every message arrives once and intact, or the request fails; a peer's death fails pending requests within
  /// the deadline. The core uses only reliable transports: one on lossy hardware (UC queue pairs) adds its own
  /// sequence numbers and loss detection before it may claim this.
  bool reliable = true;
  /// Messages of one endpoint and direction arrive in the order they were sent. The core needs it.
  bool ordered = true;
  /// False: isend/irecv use any user buffer as it is. True: the transport moves bytes only from memory it
  /// registered; it copies user buffers through its own registered buffers (one more copy per byte).
  bool needs_registered_memory = false;
  /// The transport wants a second set-up round: Context::address_for(peer), delivered to that peer alone.
  bool per_peer_addresses = false;
};

class TBCOLL_API Request {
 public:
  virtual ~Request() = default;
  /// Makes progress; true once the operation is complete. Never blocks. Throws on I/O error or mismatch.
  /// After it returned true once, it keeps returning true without side effects.
  virtual bool test() = 0;
  /// Blocks at most max_wait until progress may be possible (data arrived, buffer space freed). May return
  /// early; the caller re-tests. Used after a spin phase so oversubscribed ranks don't burn their cores.
  virtual void block(std::chrono::microseconds max_wait) = 0;
};

/// A message that arrived on an endpoint and no receive has taken yet (Endpoint::probe): its tag and size.
struct Arrival {
  Tag tag;
  size_t bytes = 0;
};

class TBCOLL_API Endpoint {
 public:
  virtual ~Endpoint() = default;
  /// Queues a send of bytes (at most Capabilities::max_message_bytes) from buf. buf must stay valid and
  /// unchanged until the request completes. Never blocks.
  virtual std::unique_ptr<Request> isend(const void* buf, size_t bytes, Tag tag) = 0;
  /// Queues a receive of exactly bytes into buf, matched FIFO against arriving messages. Never blocks.
  virtual std::unique_ptr<Request> irecv(void* buf, size_t bytes, Tag tag) = 0;
  /// Queues an empty message (its tag and signature only) that need not leave at once: with the endpoint's next
  /// send, at flush(), or when enough of them wait (where a send costs a system call, several then go in one).
  /// In order with the other sends. Never blocks. Default: isend(nullptr, 0, tag).
  virtual std::unique_ptr<Request> isend_later(Tag tag) { return isend(nullptr, 0, tag); }
  /// Sends what isend_later() left waiting (without blocking: what the connection does not take now leaves at the
  /// next progress). Default: nothing to do.
  virtual void flush() {}
  /// Makes progress without blocking, then tells the tag and size of the next message from the peer, without
  /// taking it, if its first bytes arrived and no receive is posted here (a posted receive takes the next message:
  /// there is nothing to tell then); nullopt otherwise. A receive from any source looks with it for the peer that
  /// sent first. Throws as a request's test() does once the endpoint failed. Default: refuses (InvalidUsage), so
  /// a transport that cannot look leaves receives from any source refused, and nothing else.
  virtual std::optional<Arrival> probe();
  /// Rank of the peer.
  virtual int peer() const = 0;
};

struct ContextArgs {
  int rank = -1;
  int world_size = 0;
  std::string token;        ///< job token checked by the connection handshake
  std::string bind_host;    ///< local address that reached the rendezvous (where to listen)
  uint64_t comm_id = 0;     ///< identifies the communicator in handshakes; unique per communicator in the job
  double timeout_s = 60;
  /// When set (by another thread), connect() gives up within ~100 ms with InvalidUsage: a split's child set-up
  /// whose parent communicator was aborted. May be null. Outlives connect().
  const std::atomic<bool>* cancelled = nullptr;
  /// The communicator's knob overrides (Config::knobs, TBCOLL_* name -> value): a transport reads its knobs
  /// there first, then in the environment.
  std::map<std::string, std::string> knobs;
  /// This rank's identity (PeerInfo::instance included).
  PeerInfo self;
  /// The job secret (TBCOLL_SECRET), "" for none: with one, every connection proves both ways that it knows it
  /// before anything else it sends is trusted (the built-in transports: src/common/auth.h). The public headers
  /// offer no helper for that yet: a plug-in proves it its own way, or keeps its connections where only the job's
  /// user can reach them (tests/plugin's unixsock: a socket in a 0700 directory), and its documentation says which.
  std::string secret;
};

struct PeerAddress {
  int rank = -1;
  std::string address;  ///< bytes the peer's Context::address() returned
  std::string for_me;   ///< what the peer's address_for(this rank) returned (per_peer_addresses), else empty
  PeerInfo info;        ///< the peer's identity: its process, to find a connection the device already has
};

/// A caller's memory made known to one transport (Context::register_memory). While it lives, the transport may
/// send from that memory without copying it first; destroying it ends that (sends in flight keep what they use).
class TBCOLL_API Registration {
 public:
  virtual ~Registration() = default;
};

class TBCOLL_API Context {
 public:
  virtual ~Context() = default;
  /// Opaque address published to every rank (e.g. "host:port"); the peers pass it to connect(). Non-blocking.
  virtual std::string address() const = 0;
  /// Second set-up round, for devices whose capabilities say per_peer_addresses: bytes for this one peer (made
  /// for it, e.g. a queue pair's number), delivered to it as PeerAddress::for_me. Called once per peer this
  /// context will connect, after address() reached everyone (peer.for_me is still empty). Non-blocking.
  virtual std::string address_for(const PeerAddress& peer) {
    (void)peer;
    return {};
  }
  /// Connects to every listed peer (each side lists the other). Blocks until all are connected or the
  /// deadline passes (TimeoutError naming the missing peers). Rejects handshakes with the wrong token,
  /// protocol version or communicator, logging them, and keeps waiting for the real peers.
  virtual std::vector<std::unique_ptr<Endpoint>> connect(const std::vector<PeerAddress>& peers,
                                                         Deadline deadline) = 0;
  /// Breaks every endpoint: pending and later requests fail, peers see the connection close. Any thread.
  virtual void abort() = 0;
  /// The whole-collective fast path (tbcoll/collective_fast_path.hpp), if this transport offers one and connect() reached
  /// every other rank; else nullptr. Owned by the context.
  virtual CollectiveFastPath* fast_path() { return nullptr; }
  /// Makes [base, base + bytes) known to the transport, which may then send from inside it without a copy (ibverbs
  /// registers it with each device, within the device's budget of registrations). The memory must stay mapped
  /// while the registration lives. nullptr: nothing to gain here, or the transport could not register it (then
  /// sends copy, as for any memory). Never throws for memory it cannot register.
  virtual std::unique_ptr<Registration> register_memory(const void* base, size_t bytes) {
    (void)base, (void)bytes;
    return nullptr;
  }
};

class TBCOLL_API Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual Capabilities capabilities() const = 0;
  /// Whether this transport can connect self and peer. Must be symmetric.
  virtual bool can_connect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  /// Asked after can_connect() said yes, with the addresses both contexts published (Context::address()): a
  /// transport that serves only some pairs (RDMA cables listed per pair, a queue pair budget per device) declines
  /// the others here, and they take the next transport. Must be symmetric. *why_not (may be null) says why, for
  /// the error when no transport is left for the pair.
  virtual bool can_connect_addresses(const PeerInfo& self, const std::string& self_address, const PeerInfo& peer,
                                     const std::string& peer_address, std::string* why_not) const {
    (void)self, (void)self_address, (void)peer, (void)peer_address, (void)why_not;
    return true;
  }
  /// The fast-path algorithms its contexts may offer (names, collectives, descriptions; sizes unset), for
  /// TBCOLL_ALGO's checks, errors and tbcoll-info. A context's fast_path() offers a subset.
  virtual std::vector<FastPathAlgorithm> fast_path_algorithms() const { return {}; }
  virtual std::unique_ptr<Context> create_context(const ContextArgs& args) = 0;
};

/// Devices compiled into this build that could start here, best first (loopback, shm, ibverbs, tcp), and those
/// registered. The same objects for the whole process.
TBCOLL_API std::vector<std::shared_ptr<Device>> available_devices();

/// Adds a transport built outside the library (a test's, a plug-in's) at `position` in the best-first order
/// (SIZE_MAX: last). Communicators created afterwards may use it; TBCOLL_TRANSPORT can name it. Throws
/// InvalidArgument if a device of that name exists. Thread-safe.
TBCOLL_API void register_device(std::shared_ptr<Device> device, size_t position = SIZE_MAX);

// ---- transport plug-ins ----------------------------------------------------------------------------------------

/// The version of the interface this header declares (Device, Context, Endpoint, Request, Registration and their
/// argument structs). It changes whenever any of them changes in a way a transport built against the old one would
/// misread. A plug-in states the version it was built with, and the library loads only its own (as NCCL's net
/// plug-ins name theirs, ncclNet_v8): C++ classes across a shared object's edge hold only between builds of one
/// interface, compiler and standard library.
constexpr int kInterfaceVersion = 1;

/// What a transport plug-in, a shared object built outside the library, exports under kPluginSymbol:
///
///   extern "C" const tbcoll::transport::Plugin* tbcoll_transport_plugin();
///
/// returning an object that lives as long as the process.
struct Plugin {
  int interface_version = kInterfaceVersion;  ///< the kInterfaceVersion the plug-in was built with
  const char* name = nullptr;  ///< its transport's name (its Device's name(); TBCOLL_TRANSPORT names it)
  /// Its device, or null when it cannot run on this machine (then it is left out, as a built-in transport whose
  /// hardware is missing). Called once per load.
  std::shared_ptr<Device> (*create_device)() = nullptr;
};
constexpr const char* kPluginSymbol = "tbcoll_transport_plugin";

/// Loads a transport plug-in and registers its device at `position` (as register_device). Returns the transport's
/// name, or "" when its device cannot run here. Throws InvalidArgument naming the file when it cannot be loaded,
/// exports no kPluginSymbol, states another interface version, names no transport, or names one that exists.
/// TBCOLL_TRANSPORT_PLUGINS (shared objects separated by ':') loads plug-ins the same way, last in the order,
/// before the first communicator's set-up.
TBCOLL_API std::string load_plugin(const std::string& path, size_t position = SIZE_MAX);

}  // namespace tbcoll::transport
