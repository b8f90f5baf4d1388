// The transport plug-in boundary: point-to-point byte movement between two ranks.
//
//   Device   one per transport kind in the process; says whether it can reach a peer and how well.
//   Context  one per communicator and transport; owns listeners, registered memory, connection set-up.
//   Endpoint one per peer; ordered, reliable, tagged messages in both directions.
//   Request  one outstanding isend/irecv; test() never blocks, block() waits a bounded time.
//
// Matching rule: on one endpoint, messages are matched to receives in posting order (FIFO). Every message
// carries a tag and an opaque 64-bit signature (meta) chosen by the caller; a receive whose expected tag,
// meta or byte count differs from the arriving message fails with MismatchError (it never copies). Algorithms
// never know which transport they run on; transports never know which collective they serve.
//
// Threads: a Context and its Endpoints are driven by one thread at a time (the communicator's caller), except
// Context::abort(), which any thread may call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tbcoll/error.hpp"
#include "tbcoll/store.hpp"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::transport {

/// What the communicator publishes about a rank so devices can decide reachability.
struct PeerInfo {
  int rank = -1;
  std::string host_id;  ///< identity of the host (boot id + hostname); equal on the same machine
  uint64_t process_id = 0;  ///< pid plus a per-process nonce; equal for threads of one process
};

/// Hints and facts about a transport. Tests check that implementations honour them.
struct Capabilities {
  double latency_us = 0;        ///< typical one-way small-message latency
  double bandwidth_gbps = 0;    ///< typical single-peer bandwidth, GB/s
  bool same_process_only = false;
  bool same_host_only = false;
  size_t max_message_bytes = SIZE_MAX;  ///< largest single message; larger transfers must be split by the caller
};

/// Message identity: tag orders messages, meta is a signature the receiver checks (e.g. op, dtype, count).
/// The communicator's tags: collective calls count up from 1 (the same on every rank); send/recv tags have the
/// top bit set and count each direction of a pair on its own. Transports use this only to spot mismatched calls.
struct Tag {
  uint64_t tag = 0;
  uint64_t meta = 0;
};

class Request {
 public:
  virtual ~Request() = default;
  /// Makes progress; true once the operation is complete. Never blocks. Throws on I/O error or mismatch.
  /// After it returned true once, it keeps returning true without side effects.
  virtual bool test() = 0;
  /// Blocks at most max_wait until progress may be possible (data arrived, buffer space freed). May return
  /// early; the caller re-tests. Used after a spin phase so oversubscribed ranks don't burn their cores.
  virtual void block(std::chrono::microseconds max_wait) = 0;
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  /// Queues a send of bytes from buf. buf must stay valid and unchanged until the request completes.
  virtual std::unique_ptr<Request> isend(const void* buf, size_t bytes, Tag tag) = 0;
  /// Queues a receive of exactly bytes into buf, matched FIFO against arriving messages.
  virtual std::unique_ptr<Request> irecv(void* buf, size_t bytes, Tag tag) = 0;
  /// Rank of the peer.
  virtual int peer() const = 0;
};

struct ContextArgs {
  int rank = -1;
  int world_size = 0;
  std::string token;        ///< job token checked by the connection handshake
  std::string bind_host;    ///< local address that reached the rendezvous (where to listen)
  uint64_t comm_id = 0;     ///< identifies the communicator in handshakes
  double timeout_s = 60;
  /// When set (by another thread), connect() gives up within ~100 ms with InvalidUsage: a split's child set-up
  /// whose parent communicator was aborted. May be null. Outlives connect().
  const std::atomic<bool>* cancelled = nullptr;
};

struct PeerAddress {
  int rank = -1;
  std::string address;  ///< bytes the peer's Context::address() returned
};

/// A whole-collective fast path a transport may offer when it connects every rank of the communicator (all
/// ranks on one host sharing memory, say). The tuner picks it like any algorithm; the conformance and
/// collective suites test it like any algorithm.
class CollectiveFastPath {
 public:
  virtual ~CollectiveFastPath() = default;
  /// Tells the peers which collective this rank is in (tag and signature), so one waiting in a fast-path call
  /// for a rank that is in another call can report the mismatch instead of waiting for the deadline. The
  /// communicator calls it for collectives that do not go through the fast path; fast-path calls announce
  /// themselves. Cheap (a few stores to memory only this rank writes).
  virtual void announce(const Tag& tag) = 0;
  /// Largest all_reduce input, in bytes per rank, that all_reduce_one_shot() takes.
  virtual size_t max_one_shot_bytes() const = 0;
  /// Whether the direct collectives (peers read each other's buffers in place) are available.
  virtual bool has_direct() const = 0;
  /// Whether spinning waits hand the CPU over (sched_yield) now and then: the communicator's decision, from
  /// where all ranks run (src/common/cpu.h). Until called: yes.
  virtual void set_spin_yields(bool yields) = 0;

  // Every method is collective over every rank and called in the same order everywhere. tag is the call's
  // tag and signature: a peer in a different call gets MismatchError. They block: spin for `spin`, then
  // sleep; TimeoutError past the deadline, IoError when a peer died or aborted. Caller's thread only.
  // Reductions run in rank order, so every rank holds bitwise identical results. send == recv is in place.

  /// One-shot all_reduce for small inputs: inputs copied into shared slots, each rank reduces all of them.
  virtual void all_reduce_one_shot(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, Tag tag,
                                   Deadline deadline, std::chrono::microseconds spin) = 0;
  /// One-shot all_gather for small blocks (bytes_per_rank <= max_one_shot_bytes()), through the same slots.
  virtual void all_gather_one_shot(const void* send, void* recv, size_t bytes_per_rank, Tag tag, Deadline deadline,
                                   std::chrono::microseconds spin) = 0;
  /// Two-shot all_reduce through shared staging buffers, pipelined in rounds: each rank stages the slices its
  /// peers reduce, reduces its own slice of every rank's input, and copies the peers' reduced slices out.
  virtual void all_reduce_two_shot(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, Tag tag,
                                   Deadline deadline, std::chrono::microseconds spin) = 0;
  /// Two-shot all_reduce reading peers' buffers in place: each rank reduces its slice, then gathers the rest.
  virtual void all_reduce_direct(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, Tag tag,
                                 Deadline deadline, std::chrono::microseconds spin) = 0;
  /// all_gather reading every peer's block in place (recv as in Communicator::all_gather).
  virtual void all_gather_direct(const void* send, void* recv, size_t bytes_per_rank, Tag tag, Deadline deadline,
                                 std::chrono::microseconds spin) = 0;
  /// broadcast where every rank reads the root's buffer in place (root copies send to recv if they differ).
  virtual void broadcast_direct(const void* send, void* recv, size_t bytes, int root, Tag tag, Deadline deadline,
                                std::chrono::microseconds spin) = 0;
};

class Context {
 public:
  virtual ~Context() = default;
  /// Opaque address other ranks pass to connect() (e.g. "host:port"). Non-blocking.
  virtual std::string address() const = 0;
  /// Connects to every listed peer (each side lists the other). Blocks until all are connected or the
  /// deadline passes (TimeoutError naming the missing peers). Rejects handshakes with the wrong token,
  /// protocol version or communicator, logging them, and keeps waiting for the real peers.
  virtual std::vector<std::unique_ptr<Endpoint>> connect(const std::vector<PeerAddress>& peers,
                                                         Deadline deadline) = 0;
  /// Breaks every endpoint: pending and later requests fail, peers see the connection close. Any thread.
  virtual void abort() = 0;
  /// The fast path, if this transport offers one and connect() reached every other rank; else nullptr.
  /// Owned by the context.
  virtual CollectiveFastPath* fast_path() { return nullptr; }
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual Capabilities capabilities() const = 0;
  /// Whether this transport can connect self and peer. Must be symmetric.
  virtual bool can_connect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  virtual std::unique_ptr<Context> create_context(const ContextArgs& args) = 0;
};

/// Devices compiled into this build, best first (loopback, then tcp; shm and ibverbs plug in here).
std::vector<std::shared_ptr<Device>> available_devices();

}  // namespace tbcoll::transport
