// The flight recorder's file: one per communicator and rank, a fixed binary layout that the rank writes in place
// (memory-mapped, so it costs no system call per call) and that tbcoll-doctor reads at any moment: while the rank
// runs, after it failed, while it is stopped (SIGSTOP) and after it died (the page cache keeps what it wrote).
//
//   Header          who wrote it (rank, size, communicator id, pid, host), its state and, once failed, why
//   PeerFigures[size]  per peer: its transport, bytes each way, messages, and the time this rank waited on it
//   CallRecord[capacity]  the last `capacity` calls, a ring indexed by the writer's call counter
//
// Single writer (the communicator's driving thread); readers in other processes see a consistent record through
// its stamp (odd while the writer changes it: a reader retries, or skips the record).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tbcoll::flight {

constexpr char kMagic[8] = {'t', 'b', 'c', 'o', 'l', 'l', 'F', 'R'};
constexpr uint32_t kVersion = 1;

/// What a file says about its rank as a whole.
enum class State : uint32_t {
  kLive = 1,      ///< the communicator exists (or its process died or stopped without a word)
  kFinished = 2,  ///< destroyed after its last call succeeded
  kFailed = 3,    ///< a call failed (reason says how); the communicator is broken
  kAborted = 4,   ///< abort() was called (reason: the one given)
};

/// A call's outcome.
enum class Outcome : uint32_t { kEmpty = 0, kRunning = 1, kOk = 2, kFailed = 3 };

/// Kinds of call the records name (a collective's name is in the record: these only sort them).
enum class CallKind : uint8_t { kCollective = 0, kSend = 1, kRecv = 2, kGroup = 3 };

struct alignas(64) CallRecord {
  std::atomic<uint64_t> stamp;  ///< odd while being written; the writer's call counter times 2 once written
  /// Collectives: their number, the same on every rank (1, 2, ...). Send, recv and groups: the number of
  /// collectives before them (they run between collectives seq and seq + 1); peer says with whom.
  uint64_t seq;
  uint64_t count;
  char name[24];       ///< "all_reduce", "send", ... NUL-padded
  char algorithm[24];  ///< the schedule or fast path that ran it ("" for send/recv), NUL-padded
  int32_t root;        ///< rooted collectives: the root; send/recv: the peer; else -1
  uint8_t dtype;       ///< tbcoll::DataType
  uint8_t op;          ///< tbcoll::ReduceOp
  uint8_t kind;        ///< CallKind
  uint8_t outcome;     ///< Outcome
  int64_t start_us;    ///< Unix time in microseconds, from a coarse clock (a few milliseconds' resolution)
  int64_t end_us;      ///< failed calls: when they failed; 0 otherwise (a call's end is read from no clock: the
                       ///< next call's start bounds it)
};
static_assert(sizeof(CallRecord) == 128, "padded to two cache lines");

struct PeerFigures {
  char transport[16];  ///< the transport that joins this rank to the peer ("" for this rank itself)
  std::atomic<uint64_t> sent_bytes;
  std::atomic<uint64_t> received_bytes;
  std::atomic<uint64_t> messages;  ///< sent and received
  /// Time this rank's scheduled calls spent waiting for a message to or from this peer after their first look
  /// (transfer and the peer's lateness alike), and how many such waits there were. Fast paths (whole collectives
  /// inside one transport) do not count here: their time is in the calls' own records.
  std::atomic<uint64_t> wait_us;
  std::atomic<uint64_t> waits;
  char pad[8];
};
static_assert(sizeof(PeerFigures) == 64, "one cache line per peer");

struct alignas(64) Header {  // a multiple of 64 bytes: the figures and records after it stay aligned
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  ///< sizeof(Header): PeerFigures start here
  int32_t rank;
  int32_t size;
  uint32_t capacity;  ///< CallRecords in the ring
  uint32_t pad0;
  uint64_t comm_id;      ///< the same on every rank of the communicator
  int64_t pid;
  int64_t created_us;    ///< Unix time in microseconds
  char host[64];
  std::atomic<uint32_t> state;   ///< State
  std::atomic<int32_t> stalled_on;  ///< the peer a wait was on when its deadline passed, else -1
  std::atomic<uint64_t> calls;   ///< calls begun so far (the ring's slot of call i is i % capacity)
  std::atomic<uint64_t> entered;    ///< the highest collective number entered
  std::atomic<uint64_t> completed;  ///< the highest collective number completed
  std::atomic<int64_t> updated_us;  ///< when the file was last written to (coarse)
  std::atomic<uint32_t> reason_length;  ///< bytes of reason (written before the state changes to failed/aborted)
  uint32_t pad1;
  char reason[1024];  ///< why the communicator failed or was aborted, NUL-terminated
};

static_assert(sizeof(Header) % 64 == 0, "the figures and the records after the header are 64-aligned");

/// Bytes of a file for a communicator of size ranks with capacity records.
inline size_t file_bytes(int size, uint32_t capacity) {
  return sizeof(Header) + sizeof(PeerFigures) * static_cast<size_t>(size) + sizeof(CallRecord) * capacity;
}

/// A file as read: plain values (read_file()).
struct Call {
  uint64_t seq = 0;
  std::string name;
  std::string algorithm;
  uint64_t count = 0;
  std::string dtype;  ///< "f32", ... (to_string of the DataType)
  std::string op;     ///< "sum", ...; "" for calls without one
  int root = -1;
  CallKind kind = CallKind::kCollective;
  Outcome outcome = Outcome::kEmpty;
  int64_t start_us = 0;
  int64_t end_us = 0;
  /// "all_reduce(count=1024, f32, sum)", "broadcast(count=8, i8, root=3)", "send(count=4, f32, peer=1)"
  std::string describe() const;
};

struct Peer {
  int rank = -1;
  std::string transport;
  uint64_t sent_bytes = 0, received_bytes = 0, messages = 0, wait_us = 0, waits = 0;
};

struct Dump {
  std::string path;
  int rank = -1;
  int size = 0;
  uint64_t comm_id = 0;
  int64_t pid = 0;
  std::string host;
  int64_t created_us = 0;
  int64_t updated_us = 0;
  State state = State::kLive;
  int stalled_on = -1;
  uint64_t calls = 0;  ///< begun in all (the ring holds the last `capacity` of them)
  uint64_t entered = 0;
  uint64_t completed = 0;
  std::string reason;
  std::vector<Peer> peers;  ///< by rank (this rank's own entry has no transport)
  std::vector<Call> records;  ///< the ring's calls, oldest first (records being written are left out)
};

/// Reads a flight file. Throws tbcoll::InvalidArgument naming the path and what is wrong (not a flight file,
/// another version, truncated).
Dump read_file(const std::string& path);

/// Where flight files go without TBCOLL_FLIGHT_DIR: ${TMPDIR:-/tmp}/tbcoll-flight-<uid>.
std::string default_dir();

/// The files of a directory that are flight files (by name: "*.flight"), sorted. Throws InvalidArgument for a
/// directory it cannot read.
std::vector<std::string> files_in(const std::string& dir);

}  // namespace tbcoll::flight
