// Reading a flight file (flight_file.h) from outside the rank that writes it: the file is mapped read-only and
// copied into plain values. Records are taken through their stamps (a seqlock): one the writer is changing, or
// changes while it is copied, is read again a few times and then left out.
// The stamp is read as an atomic; the other fields are copied by offset from a snapshot of the record's bytes.
#include "flight/flight_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "collective_traits.h"
#include "tbcoll/error.hpp"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::flight {
namespace {

constexpr int kStampRetries = 8;
// Far beyond any real communicator or ring: a larger value means the header is garbage, not a big job.
constexpr int32_t kMaxRanks = 1 << 20;
constexpr uint32_t kMaxCapacity = 1u << 24;

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw InvalidArgument(fmt::format("flight file {}: {}", path, what));
}

// A read-only mapping of a whole file, unmapped and closed on scope exit.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) refuse(path, fmt::format("cannot open it: {}", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) refuse(path, fmt::format("cannot stat it: {}", std::strerror(errno)));
    if (!S_ISREG(st.st_mode)) refuse(path, "not a flight file (not a regular file)");
    bytes_ = static_cast<size_t>(st.st_size);
    if (bytes_ == 0) return;
    void* base = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED) refuse(path, fmt::format("cannot map it: {}", std::strerror(errno)));
    base_ = static_cast<const unsigned char*>(base);
  }
  ~Mapping() {
    if (base_ != nullptr) ::munmap(const_cast<unsigned char*>(base_), bytes_);
    if (fd_ >= 0) ::close(fd_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const unsigned char* base() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  int fd_ = -1;
  const unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
};

std::string bounded_string(const char* text, size_t capacity) { return std::string(text, strnlen(text, capacity)); }

// Throws unless the header is this version's and the file holds everything it announces.
void check_header(const std::string& path, const Mapping& map) {
  if (map.bytes() < sizeof(kMagic) || std::memcmp(map.base(), kMagic, sizeof(kMagic)) != 0) {
    refuse(path, "not a flight file (it does not start with the tbcollFR magic)");
  }
  if (map.bytes() < offsetof(Header, version) + sizeof(uint32_t)) refuse(path, "truncated within its header");
  uint32_t version = 0;
  std::memcpy(&version, map.base() + offsetof(Header, version), sizeof(version));
  if (version != kVersion) {
    refuse(path, fmt::format("written in flight file version {}; this reader reads version {}", version, kVersion));
  }
  if (map.bytes() < sizeof(Header)) {
    refuse(path, fmt::format("truncated: {} bytes, less than its {}-byte header", map.bytes(), sizeof(Header)));
  }
  const auto& header = *reinterpret_cast<const Header*>(map.base());
  if (header.header_bytes != sizeof(Header)) {
    refuse(path, fmt::format("sizes inconsistent: its header says it has {} bytes, version {} has {}",
                             header.header_bytes, kVersion, sizeof(Header)));
  }
  if (header.size <= 0 || header.size > kMaxRanks || header.rank < 0 || header.rank >= header.size) {
    refuse(path, fmt::format("sizes inconsistent: rank {} of {} ranks", header.rank, header.size));
  }
  if (header.capacity == 0 || header.capacity > kMaxCapacity) {
    refuse(path, fmt::format("sizes inconsistent: a ring of {} records", header.capacity));
  }
  const size_t expected = file_bytes(header.size, header.capacity);
  if (map.bytes() < expected) {
    refuse(path, fmt::format("truncated: {} bytes, but {} ranks and {} records take {}", map.bytes(), header.size,
                             header.capacity, expected));
  }
}

std::string op_of(const std::string& name, uint8_t op) {
  const CollectiveTraits* traits = traits_named(name);
  return traits != nullptr && traits->reduces ? to_string(static_cast<ReduceOp>(op)) : "";
}

// The record at `at`, if it holds a finished write that stayed put while it was copied.
bool read_record(const unsigned char* at, Call& out, uint64_t& stamp) {
  const auto& stamp_word = *reinterpret_cast<const std::atomic<uint64_t>*>(at + offsetof(CallRecord, stamp));
  for (int attempt = 0; attempt < kStampRetries; ++attempt) {
    const uint64_t before = stamp_word.load(std::memory_order_acquire);
    if (before == 0 || before % 2 == 1) return false;
    unsigned char copy[sizeof(CallRecord)];
    std::memcpy(copy, at, sizeof(copy));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (stamp_word.load(std::memory_order_relaxed) != before) continue;
    auto field = [&copy](size_t offset, auto& value) { std::memcpy(&value, copy + offset, sizeof(value)); };
    char name[sizeof(CallRecord::name)], algorithm[sizeof(CallRecord::algorithm)];
    uint8_t dtype = 0, op = 0, kind = 0, outcome = 0;
    field(offsetof(CallRecord, seq), out.seq);
    field(offsetof(CallRecord, count), out.count);
    field(offsetof(CallRecord, name), name);
    field(offsetof(CallRecord, algorithm), algorithm);
    field(offsetof(CallRecord, root), out.root);
    field(offsetof(CallRecord, dtype), dtype);
    field(offsetof(CallRecord, op), op);
    field(offsetof(CallRecord, kind), kind);
    field(offsetof(CallRecord, outcome), outcome);
    field(offsetof(CallRecord, start_us), out.start_us);
    field(offsetof(CallRecord, end_us), out.end_us);
    out.name = bounded_string(name, sizeof(name));
    out.algorithm = bounded_string(algorithm, sizeof(algorithm));
    out.dtype = to_string(static_cast<DataType>(dtype));
    out.op = op_of(out.name, op);
    out.kind = static_cast<CallKind>(kind);
    out.outcome = static_cast<Outcome>(outcome);
    stamp = before;
    return true;
  }
  return false;
}

void read_header(const Header& header, Dump& dump) {
  dump.rank = header.rank;
  dump.size = header.size;
  dump.comm_id = header.comm_id;
  dump.pid = header.pid;
  dump.host = bounded_string(header.host, sizeof(header.host));
  dump.created_us = header.created_us;
  dump.updated_us = header.updated_us.load(std::memory_order_acquire);
  dump.calls = header.calls.load(std::memory_order_acquire);
  dump.entered = header.entered.load(std::memory_order_acquire);
  dump.completed = header.completed.load(std::memory_order_acquire);
  dump.stalled_on = header.stalled_on.load(std::memory_order_acquire);
  // The reason is written before the state says failed or aborted: read the state first.
  dump.state = static_cast<State>(header.state.load(std::memory_order_acquire));
  const uint32_t reason_bytes = header.reason_length.load(std::memory_order_acquire);
  dump.reason = bounded_string(header.reason, std::min<size_t>(reason_bytes, sizeof(header.reason) - 1));
}

}  // namespace

std::string Call::describe() const {
  const bool has_op = !op.empty();
  if (count == 0 && root < 0 && !has_op) return fmt::format("{}()", name);
  const char* count_name = name == "all_to_allv" ? "sent" : "count";
  std::string out = fmt::format("{}({}={}, {}", name, count_name, count, dtype);
  if (has_op) out += ", " + op;
  if (root >= 0) {
    const bool p2p = kind == CallKind::kSend || kind == CallKind::kRecv;
    out += fmt::format(", {}={}", p2p ? "peer" : "root", root);
  }
  return out + ")";
}

Dump read_file(const std::string& path) {
  Mapping map(path);
  check_header(path, map);
  const auto& header = *reinterpret_cast<const Header*>(map.base());
  Dump dump;
  dump.path = path;
  read_header(header, dump);
  const auto* peers = reinterpret_cast<const PeerFigures*>(map.base() + sizeof(Header));
  for (int r = 0; r < dump.size; ++r) {
    const PeerFigures& figures = peers[r];
    Peer peer;
    peer.rank = r;
    peer.transport = bounded_string(figures.transport, sizeof(figures.transport));
    peer.sent_bytes = figures.sent_bytes.load(std::memory_order_relaxed);
    peer.received_bytes = figures.received_bytes.load(std::memory_order_relaxed);
    peer.messages = figures.messages.load(std::memory_order_relaxed);
    peer.wait_us = figures.wait_us.load(std::memory_order_relaxed);
    peer.waits = figures.waits.load(std::memory_order_relaxed);
    dump.peers.push_back(std::move(peer));
  }
  const unsigned char* records = map.base() + sizeof(Header) + sizeof(PeerFigures) * static_cast<size_t>(dump.size);
  std::vector<std::pair<uint64_t, Call>> stamped;
  for (uint32_t slot = 0; slot < header.capacity; ++slot) {
    Call call;
    uint64_t stamp = 0;
    if (read_record(records + sizeof(CallRecord) * slot, call, stamp)) stamped.emplace_back(stamp, std::move(call));
  }
  // Oldest first: the stamp grows with the writer's call counter.
  std::sort(stamped.begin(), stamped.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [stamp, call] : stamped) dump.records.push_back(std::move(call));
  return dump;
}

std::vector<std::string> files_in(const std::string& dir) {
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) {
    throw InvalidArgument(fmt::format("flight files: cannot read directory {}: {}", dir, std::strerror(errno)));
  }
  std::vector<std::string> paths;
  const std::string suffix = ".flight";
  for (const dirent* entry; (entry = ::readdir(listing)) != nullptr;) {
    const std::string name = entry->d_name;
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      paths.push_back(dir + (!dir.empty() && dir.back() == '/' ? "" : "/") + name);
    }
  }
  ::closedir(listing);
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string default_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return fmt::format("{}/tbcoll-flight-{}", base, static_cast<unsigned>(getuid()));
}

}  // namespace tbcoll::flight
