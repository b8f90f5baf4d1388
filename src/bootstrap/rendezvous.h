// The rendezvous records: what each rank publishes in the store while a communicator forms, how it is written and
// read back, and how the records are removed once read. Everything under the communicator's prefix, as text:
//
//   <prefix>/comm_id    rank 0's communicator id, in decimal ("1234567890123"). Once every rank read the records:
//                       the tombstone "formed:<world size>", which a new communicator reusing the prefix overwrites
//   <prefix>/peer/<r>   rank r's record, one "key=value" line each, in this order:
//                         host=<host id>          ranks with equal ids may use shared memory (see host_id())
//                         pid=<process id>        decimal: pid << 32 ^ a per-process nonce
//                         kernel=<kernel id>      ranks on one kernel share the machine's CPUs
//                         cpus=<cpu list>         "0-3,6" style; empty or unreadable: unknown
//                         world=<world size>      decimal, the world size the rank was started with
//                         dev.<device>=<address>  one per transport the rank offers, by device name
//                       Readers ignore lines without '=' and keys they do not know (so a newer rank may add some).
//   <prefix>/read       how many ranks have read every record; the last one removes them (forget_records)
//
// Numbers that do not parse mean another program wrote to the store: IoError naming the record.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tbcoll/store.hpp"
#include "tbcoll/transport.hpp"

namespace tbcoll::bootstrap {

/// The largest world a communicator forms: every rank keeps a few words per peer and reads every peer's record, so a
/// mistyped TBCOLL_WORLD_SIZE (16777216) must fail at once, not after allocating gigabytes. (tbcoll-run starts at
/// most 1024 ranks.)
constexpr int kMaxWorldSize = 4096;

/// Store values are bytes; the records are text.
inline std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
inline std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

/// What a rank publishes under <prefix>/peer/<rank>.
struct Published {
  transport::PeerInfo info;  ///< rank (not written: the key says it), host id, process id
  std::string kernel;        ///< kernel_id()
  std::vector<int> cpus;     ///< CPUs the initialising thread may run on (empty: unknown)
  int world_size = 0;        ///< the world size the rank was started with (decoded beyond int: -1)
  /// Device name -> the address its context listens on.
  std::map<std::string, std::string> addresses;
};

/// The record's text (the format above).
std::string encode(const Published& published);
/// Reads rank's record. Throws IoError naming the record and the field when pid or world is not a decimal number.
Published decode(int rank, const std::string& text);

/// A decimal number of a rendezvous record (as the ranks write them); IoError naming `what` otherwise (empty,
/// a sign, trailing characters, beyond 64 bits).
uint64_t record_number(const std::string& value, const std::string& what);

/// What forget_records leaves under <prefix>/comm_id, followed by the world size: "formed:<size>".
constexpr const char* kFormedTombstone = "formed:";

/// The communicator id rank 0 published under prefix. Blocks until it is there (TimeoutError past the deadline;
/// InvalidUsage once *cancelled is set, see Store::get). A tombstone of a communicator already formed with this
/// world size means a new one reuses the prefix: its rank 0 overwrites it, so this waits for that; a tombstone of
/// another size is an error (InvalidUsage).
uint64_t read_comm_id(Store& store, const std::string& prefix, int rank, int size, Deadline deadline,
                      const std::atomic<bool>* cancelled);

/// Counts this rank as having read every record under prefix; the last of the size ranks replaces the id by a
/// tombstone and removes the rest, so a job creating communicators by the thousand (splits) does not grow rank 0's
/// store. Only cleaning: a store error is logged, not thrown. Blocks on the store calls (up to the deadline).
void forget_records(Store& store, const std::string& prefix, int rank, int size, Deadline deadline);

}  // namespace tbcoll::bootstrap
