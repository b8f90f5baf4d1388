// tbcoll C++ API: communicators and collectives for CPU clusters (shared memory, TCP, RDMA).
//
//   auto comm = tbcoll::Communicator::init(tbcoll::Config::from_env());
//   comm.all_reduce(send, recv, count, tbcoll::DataType::kFloat32, tbcoll::ReduceOp::kSum);
//
// Every collective takes (send, recv, count, dtype, op_or_root); send == recv means in place. Every call blocks
// until this rank's part is done or the communicator's timeout passes (TimeoutError). After an I/O error or a
// timeout the communicator is broken: further calls throw InvalidUsage until it is rebuilt.
// A Communicator is used by one thread at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tbcoll/error.hpp"
#include "tbcoll/export.h"
#include "tbcoll/store.hpp"
#include "tbcoll/types.h"

namespace tbcoll {

enum class DataType : int {
  kInt8 = tbcollInt8,
  kUint8 = tbcollUint8,
  kInt32 = tbcollInt32,
  kUint32 = tbcollUint32,
  kInt64 = tbcollInt64,
  kUint64 = tbcollUint64,
  kFloat16 = tbcollFloat16,
  kFloat32 = tbcollFloat32,
  kFloat64 = tbcollFloat64,
  kBfloat16 = tbcollBfloat16,
};
constexpr int kNumDataTypes = tbcollNumTypes;

enum class ReduceOp : int {
  kSum = tbcollSum,
  kProd = tbcollProd,
  kMax = tbcollMax,
  kMin = tbcollMin,
  kAvg = tbcollAvg,
};
constexpr int kNumReduceOps = tbcollNumOps;

/// Size of one element in bytes; throws InvalidArgument for an unknown dtype.
TBCOLL_API size_t dtype_size(DataType dtype);
/// f16, bf16, f32, f64.
TBCOLL_API bool is_floating_point(DataType dtype);
/// u8, u32, u64.
TBCOLL_API bool is_unsigned(DataType dtype);
/// "f32", "bf16", ...; "invalid(N)" for unknown values.
TBCOLL_API std::string to_string(DataType dtype);
/// "sum", "prod", ...
TBCOLL_API std::string to_string(ReduceOp op);
/// Parses "f32"/"float32"/"float", "bf16", "i8", ...; throws InvalidArgument.
TBCOLL_API DataType parse_dtype(const std::string& name);
/// Parses "sum", "prod", "max", "min", "avg"; throws InvalidArgument.
TBCOLL_API ReduceOp parse_op(const std::string& name);

/// How a communicator is built. Fields left at their defaults are taken from the environment by from_env().
struct TBCOLL_API Config {
  int rank = -1;
  int world_size = -1;
  /// host:port of the rendezvous store hosted by rank 0 (TBCOLL_ROOT).
  std::string root;
  /// Job token checked on every connection (TBCOLL_TOKEN).
  std::string token = "tbcoll";
  /// Deadline for every blocking call, in seconds (TBCOLL_TIMEOUT); 1e9 or more (or infinity) means none.
  double timeout_s = 60.0;
  /// Forces a transport for every peer pair: "tcp", "shm", "ibverbs", "loopback" (tbcoll-info lists those built and
  /// usable here); empty: the best per pair.
  std::string transport;
  /// Forces algorithms (TBCOLL_ALGO): a name ("ring") applies to every collective that has an algorithm of
  /// that name; "allreduce:ring,broadcast:chain" names them per collective (tbcoll-info lists them all). Empty:
  /// the tuner's choice. A name no collective has, or that a named collective lacks, fails init; a forced
  /// algorithm that cannot run a call (too large, say) fails that call, naming those that can.
  std::string algo;
  /// Tuning knobs for this communicator, by their TBCOLL_* names ({"TBCOLL_CHUNK_BYTES", "65536"}): they take
  /// precedence over the environment. Any knob tbcoll-info lists, except those with a field above or that act on
  /// the whole process (TBCOLL_DEBUG); others fail init with InvalidArgument. Splits inherit them.
  std::map<std::string, std::string> knobs;
  /// Optional store to rendezvous through instead of the TCP store (ranks as threads share an in-memory store).
  std::shared_ptr<Store> store;
  /// Optional: the server of that store, when this process hosts it. The communicator and those split from it
  /// keep it running (a split needs the store), so it stops when the last of them is destroyed.
  std::shared_ptr<TcpStoreServer> server;
  /// Key prefix in the store; communicators sharing a store need distinct prefixes.
  std::string prefix = "tbcoll";

  /// Reads TBCOLL_RANK/WORLD_SIZE/ROOT/TOKEN/TIMEOUT/TRANSPORT/ALGO, falling back to OpenMPI
  /// (OMPI_COMM_WORLD_RANK/SIZE), PMI (PMI_RANK/PMI_SIZE) and Slurm (SLURM_PROCID/SLURM_NTASKS).
  static Config from_env();
};

/// What the ranks of a new communicator need to meet, made by one of them and passed to the others out of band
/// (MPI_Bcast, a file, the command line), as NCCL's unique id: the address of a rendezvous store this process
/// serves, and a job token drawn at random.
class TBCOLL_API UniqueId {
 public:
  /// Starts a rendezvous store at a free port on TBCOLL_SOCKET_ADDR, else on the interface TBCOLL_SOCKET_IFNAME
  /// picks, else (as NCCL) on the first interface that is neither loopback nor docker (loopback where there is
  /// nothing else). It runs while this process holds a communicator made from the id or another process is
  /// connected to it; stores nobody needs any more are stopped by later create() calls. Throws IoError.
  static UniqueId create();
  /// The id as text ("host:port\ntoken"), shorter than 256 bytes (TBCOLL_UNIQUE_ID_BYTES): what to send to the other ranks.
  const std::string& to_string() const { return text_; }
  /// Reads an id made by to_string(). Throws InvalidArgument if it is malformed.
  static UniqueId from_string(const std::string& text);
  /// host:port of the store.
  std::string root() const;
  std::string token() const;

 private:
  explicit UniqueId(std::string text) : text_(std::move(text)) {}
  std::string text_;
};

/// A call as an observer sees it (Communicator::set_call_observer): told as it begins and as it ends, on the
/// thread that runs it (the caller's, or the progress thread for asynchronous calls).
struct CallEvent {
  enum class Phase { kBegin, kEnd };
  Phase phase = Phase::kBegin;
  /// Collectives: their number, the same on every rank (1, 2, ...); send, recv and groups: the number of
  /// collectives before them.
  uint64_t seq = 0;
  const char* name = "";  ///< "all_reduce", "send", "group_end", ...
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool has_op = false;  ///< op applies (reductions)
  int root = -1;  ///< rooted collectives: the root; send/recv: the peer; else -1
  const char* algorithm = "";  ///< the schedule or fast path that ran it ("" where there is none: send/recv)
  bool ok = true;       ///< kEnd: whether the call succeeded
  double seconds = 0;   ///< kEnd: how long it took
};

/// Handle of an asynchronous call (like c10d's Work). Copyable; every copy refers to the same call.
class TBCOLL_API Work {
 public:
  Work() = default;
  /// True once the call finished; never blocks. Throws the call's error, if it failed.
  bool test() const;
  /// Blocks until the call finished (each call has the communicator's deadline); throws the call's error.
  void wait() const;
  /// Runs callback(error) once the call finished (error null on success): at once on this thread if it has,
  /// else on the thread that finishes it (the progress thread, or the thread whose test() or wait() completed a
  /// non-blocking send/recv), before test() and wait() see it finished. The callback must not block nor call into
  /// the communicator. Copies share callbacks.
  void on_done(std::function<void(std::exception_ptr error)> callback) const;
  /// The rank a receive took its message from (irecv: its peer; irecv_any: the sender it matched), once the
  /// call finished; -1 before that and for every other call.
  int source() const;

  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

/// Memory registered with a communicator's transports (Communicator::register_memory), as ncclCommRegister
/// does: while the object lives, sends from inside the range may go without a copy. Destroying it (or reset())
/// deregisters; calls still using the memory keep their registration until they finish. Move-only; it may
/// outlive the communicator.
class TBCOLL_API MemoryRegistration {
 public:
  MemoryRegistration();
  MemoryRegistration(MemoryRegistration&&) noexcept;
  MemoryRegistration& operator=(MemoryRegistration&&) noexcept;
  ~MemoryRegistration();
  /// How many of the communicator's transports took the memory (0: none had anything to gain, or could; sends
  /// from it then copy, as from any memory).
  int transports() const;
  void reset();

  struct State;
  explicit MemoryRegistration(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

struct CommunicatorAccess;  // the library's own code and tests reach the internals through it (src/)

class TBCOLL_API Communicator {
 public:
  /// Builds a communicator: rendezvous through the store, transport choice per peer, connections.
  /// Collective over all ranks; blocks until every peer is connected or the timeout passes.
  static Communicator init(const Config& config);
  /// As init(config), with the whole set-up bounded by `deadline` instead of config.timeout_s from now: for a
  /// caller that already spent part of its time (connecting to the store, agreeing on a split).
  static Communicator init(const Config& config, Deadline deadline);
  /// Builds a communicator the NCCL way: rank `rank` of `size` ranks that all hold the same id. Settings other
  /// than rank, size, rendezvous and token come from `config` (default: from the environment).
  static Communicator init(const UniqueId& id, int rank, int size, Config config = Config::from_env());

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  int rank() const;
  int size() const;
  /// Name of the transport used to reach peer ("self" for this rank).
  std::string transport_name(int peer) const;
  /// Name of the algorithm the tuner picks for all_reduce of this many bytes (for tools and tests).
  std::string all_reduce_algorithm(size_t bytes) const;
  /// The same for collective "all_reduce", "all_gather" (bytes: the gathered total), "reduce_scatter", "reduce",
  /// "broadcast", "barrier", "all_to_all" (bytes: a rank's whole send buffer), "all_to_allv", "gather" or
  /// "scatter" (bytes: the root's whole buffer); throws InvalidArgument for another name.
  std::string algorithm(const std::string& collective, size_t bytes) const;
  /// The link emulation in effect (TBCOLL_LINK_EMULATION, TBCOLL_LINK_DELAY_US): "off", or what it emulates
  /// ("tb5-rdma: +5 us one way, 60 Gbit/s (7.50 GB/s) per direction per peer").
  std::string link_emulation() const;
  /// The cost model's view of one call, for tools (tbcoll-perf --explain): every algorithm of collective with
  /// its predicted time, whether it can run bytes (float32), the one the tuner picks, and the figures it used.
  struct AlgorithmEstimate {
    std::string name;
    double predicted_us = -1;  ///< < 0: no cost function (fast paths, rows without one)
    std::string cannot_run;    ///< why it cannot run this call, or ""
    bool fast_path = false;    ///< a transport's fast path: chosen by its own size range, not by the model
  };
  struct Explanation {
    std::vector<AlgorithmEstimate> algorithms;
    std::string chosen;
    std::string model;           ///< alpha, beta and where they came from
    bool model_decides = false;  ///< false: the size ranges (TBCOLL_TUNER) or a forced algorithm (TBCOLL_ALGO)
    /// TBCOLL_TUNER=measure, once the ranks decided for this size's octave: the shortlist's measured times
    /// ("tree 6101.2 us, ring 8020.7 us (measured, ...)"); chosen is then the measured pick. Empty otherwise.
    std::string measured;
    /// TBCOLL_TUNER=measure, not decided yet for this size's octave: the next calls of it are trials.
    bool measuring = false;
  };
  Explanation explain(const std::string& collective, size_t bytes) const;

  /// recv[i] = op over ranks of send[i], i < count. Every rank ends with bitwise identical results (one
  /// exception: where two NaNs meet in f16/bf16, which NaN payload survives may differ between ranks of
  /// different CPU kinds; ranks on one host agree).
  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  /// recv[r*count .. (r+1)*count) = send of rank r. In place when send points at element rank*count of recv.
  void all_gather(const void* send, void* recv, size_t count, DataType dtype);
  /// recv (count elements) = op over ranks of block `rank` of send (size * count elements): block r of every
  /// rank's send reduced onto rank r. In place when recv points at element rank*count of send, as in NCCL.
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  /// recv at root = op over ranks of send (reduced in rank order); recv is not touched (may be null) elsewhere.
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  /// recv = send of root on every rank (root copies send to recv when they differ).
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root);
  /// Returns once every rank has entered the barrier.
  void barrier();
  /// Block p of send (count elements at send + p*count; send holds size()*count) goes to rank p; block p of recv
  /// is what rank p sent this rank. In place when send == recv: each block p of recv is sent to rank p and
  /// replaced by rank p's block (staged through the communicator's scratch memory, as much as the buffer).
  void all_to_all(const void* send, void* recv, size_t count, DataType dtype);
  /// all_to_all with a count per peer, as MPI_Alltoallv: send_counts[p] elements at send + send_displs[p] go to
  /// rank p; recv_counts[p] elements from rank p land at recv + recv_displs[p]. Counts and displacements are in
  /// elements, arrays of size() entries (copied: they may go once the call returned, also for the async form);
  /// null displacements mean the blocks packed in rank order. Counts may be zero (one message per pair still
  /// goes: it checks the counts agree). Rank p's send_counts[q] must equal rank q's recv_counts[p]: a rank that
  /// receives a block of another size fails with InvalidUsage naming the peer and both counts' arrays, and
  /// breaks the communicator, as any mismatch (ranks waiting on it fail at the latest at the deadline). Checked
  /// here: send_counts[rank] == recv_counts[rank], received blocks not overlapping, no count overflow.
  /// In place when send == recv: block p of recv (recv_counts[p] at recv_displs[p]) goes to rank p and is
  /// replaced by rank p's block (staged through scratch); send_counts and send_displs are then null or equal to
  /// recv's, and the counts must be symmetric (rank p's recv_counts[q] == rank q's recv_counts[p]).
  /// The tuner cannot choose by size here (sizes differ between ranks): pairwise unless TBCOLL_ALGO says direct.
  void all_to_allv(const void* send, void* recv, const size_t* send_counts, const size_t* send_displs,
                   const size_t* recv_counts, const size_t* recv_displs, DataType dtype);
  /// At root: recv[p*count .. (p+1)*count) = send of rank p (recv holds size()*count elements); recv is not
  /// touched (may be null) elsewhere. In place at the root when send points at element root*count of recv, as
  /// MPI_IN_PLACE (the root's block is already there). Non-root ranks only send: a root or count they disagree on
  /// is reported by the ranks that receive it, and reaches them at a later call (see README).
  void gather(const void* send, void* recv, size_t count, DataType dtype, int root);
  /// recv (count elements) = block rank of root's send (send holds size()*count elements at the root; not read,
  /// may be null, elsewhere). In place at the root when recv points at element root*count of send (the root's
  /// block stays where it is).
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root);
  /// Sends count elements to peer. Matches the peer's recv with the same count and dtype, in call order.
  void send(const void* buf, size_t count, DataType dtype, int peer);
  /// Receives count elements from peer (see send).
  void recv(void* buf, size_t count, DataType dtype, int peer);
  /// Non-blocking send: posts the message and returns at once, whatever the peer does (so two ranks may both
  /// irecv, then isend). buf must stay valid and unchanged until the Work completed. Pairs with the peer's recv or
  /// irecv as send does: one order of messages per pair of ranks, in call order, collectives included (a
  /// collective between a pair's isend and the matching receive must be called in the same order on both). Queued
  /// asynchronous calls made before it finish first. It moves whenever this communicator waits: when the Work is
  /// tested or waited for, and while later calls wait (blocking ones on the caller's thread, queued ones on the
  /// progress thread). The Work's deadline counts from this call; failing, it breaks the communicator as a failed
  /// send does.
  Work isend(const void* buf, size_t count, DataType dtype, int peer);
  /// Non-blocking receive of count elements from peer into buf (see isend).
  Work irecv(void* buf, size_t count, DataType dtype, int peer);
  /// Non-blocking receive of count elements from whichever peer's send arrives first (MPI's ANY_SOURCE,
  /// gloo's recv from any rank); Work::source() names it once the call finished. It takes the next message of
  /// that peer, as irecv(peer) would have, and must match it in count and dtype (else MismatchError naming the
  /// peer). Peers are looked at in turn, so none is starved. While an irecv from some peer is still pending,
  /// that peer's next message is the irecv's, not this call's; and until it matched, a collective or receive
  /// posted meanwhile may take the next message of its peers, so wait for it first unless its sender sends only
  /// after that call (else that call may fail with MismatchError naming the peer). Refused inside a group, and
  /// where a transport cannot look for arrived messages (every built-in one can). Its deadline counts from this
  /// call.
  Work irecv_any(void* buf, size_t count, DataType dtype);
  /// Blocking irecv_any: returns the rank the message came from.
  int recv_any(void* buf, size_t count, DataType dtype);
  /// Asynchronous all_reduce: returns at once; a progress thread of this communicator runs the call, in order
  /// with the other calls. Buffers must stay valid until the Work completed. A blocking call made meanwhile
  /// first waits for the queued ones (calls keep their order on every rank). The thread spins like any wait,
  /// so overlap pays off when a core is free for it. Bad arguments throw here, before anything is queued; a
  /// queued call that fails breaks the communicator (the calls queued after it fail fast, never out of step).
  Work all_reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  /// The other collectives, asynchronous in the same way (same queue, same order rules).
  Work all_gather_async(const void* send, void* recv, size_t count, DataType dtype);
  Work reduce_scatter_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  Work reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  Work broadcast_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  Work barrier_async();
  Work all_to_all_async(const void* send, void* recv, size_t count, DataType dtype);
  Work all_to_allv_async(const void* send, void* recv, const size_t* send_counts, const size_t* send_displs,
                         const size_t* recv_counts, const size_t* recv_displs, DataType dtype);
  Work gather_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  Work scatter_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  /// Between group_start() and group_end(), send and recv only record the operation (buffers must stay valid);
  /// group_end() runs them all at once, so a rank can send to and receive from peers without ordering them
  /// (no deadlock), and may send to itself. Groups nest; the outermost group_end() runs them. Collectives
  /// inside a group are refused.
  void group_start();
  void group_end();

  /// Registers [base, base + bytes) with this communicator's transports (ibverbs: with each RDMA device, page-
  /// rounded), so that messages sent from it, point to point and in collectives, go without the copy into the
  /// transport's own buffers where they fill its large slots (ibverbs: 512 KiB or more; a ring's chunks,
  /// TBCOLL_CHUNK_BYTES, are smaller unless raised). The memory must stay mapped while the registration lives. Local: the other ranks
  /// need not register theirs. Throws InvalidArgument for a null base or zero bytes; memory a transport cannot
  /// register (a device's budget spent, an unmapped page) is not an error: transports() says who took it.
  MemoryRegistration register_memory(const void* base, size_t bytes);

  /// Collective: splits this communicator into one communicator per color (ranks ordered by key, then by rank).
  /// A negative color (kSplitNoColor) takes no part and gets std::nullopt. The new communicators rendezvous
  /// through this one's store and choose their transports afresh.
  std::optional<Communicator> split(int color, int key);
  static constexpr int kSplitNoColor = -1;

  /// Marks the communicator broken, tells the peers (through the store, waiting for it at most 200 ms) and closes
  /// its connections: a peer's call fails naming this rank and "aborted by the user", or the reason given, so a
  /// process that gives up on one communicator because another failed can pass the cause on to the peers that
  /// only share this one. Safe from any thread.
  void abort();
  void abort(const std::string& reason);
  /// True after abort() or an error that left the connections in an unknown state.
  bool broken() const;

  /// Calls observer(event) as each later call begins and ends (an engine's profiler puts them on its own
  /// timeline); an empty function stops it. The observer must be quick and must not call into the communicator.
  /// Not while calls are queued (InvalidUsage): set it from the thread that drives the communicator.
  void set_call_observer(std::function<void(const CallEvent& event)> observer);
  /// The flight recorder's file of this rank (TBCOLL_FLIGHT_DIR; tbcoll-doctor reads it), "" when it is off.
  std::string flight_file() const;

  struct Impl;
  friend struct CommunicatorAccess;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  // init(config, deadline) that gives up once *cancelled is set (a split whose parent is aborted); may be null.
  // instance: the rank this rank had in the communicator its set-up started from (a split passes its parent's;
  // -1: config.rank), so transports can tell one rank's communicators apart from another's in one process.
  static Communicator init(const Config& config, Deadline deadline, const std::atomic<bool>* cancelled,
                           int instance = -1);
  static Communicator connect(const Config& config, Deadline deadline, const std::atomic<bool>* cancelled,
                              int instance);  // init without the error context
  Impl& impl() const;  // InvalidUsage on a moved-from communicator
  std::unique_ptr<Impl> impl_;
};

}  // namespace tbcoll
