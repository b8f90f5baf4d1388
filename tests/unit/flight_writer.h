// Flight files written by hand (src/flight/flight_file.h), as the library's writer lays them out: call i of a rank
// in slot i % capacity with stamp 2 * i + 2, later calls overwriting earlier ones. For the reader's and
// tbcoll-doctor's tests, which must not depend on a running job.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "flight/flight_file.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::test {

struct FlightCall {
  uint64_t seq = 0;
  std::string name = "all_reduce";
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  flight::CallKind kind = flight::CallKind::kCollective;
  flight::Outcome outcome = flight::Outcome::kOk;
  int64_t start_us = 0;
  int64_t end_us = 0;
  std::string algorithm = "ring";
};

struct FlightPeer {
  std::string transport;
  uint64_t sent_bytes = 0, received_bytes = 0, messages = 0, wait_us = 0, waits = 0;
};

struct FlightFile {
  int rank = 0;
  int size = 1;
  uint32_t capacity = 8;
  uint64_t comm_id = 0xab;
  int64_t pid = 4242;
  std::string host = "node";
  int64_t created_us = 0;
  int64_t updated_us = 0;
  flight::State state = flight::State::kLive;
  int stalled_on = -1;
  uint64_t entered = 0, completed = 0;
  std::string reason;
  std::vector<FlightPeer> peers;         ///< size entries, or none (all zero)
  std::vector<FlightCall> calls;         ///< every call the rank made, in order (call i is calls[i])
  bool last_call_being_written = false;  ///< the last call's stamp odd, as while the writer fills it
  uint32_t version = flight::kVersion;
};

inline void copy_string(char* to, size_t capacity, const std::string& text) {
  std::memset(to, 0, capacity);
  std::memcpy(to, text.data(), std::min(text.size(), capacity - 1));
}

inline std::vector<unsigned char> flight_bytes(const FlightFile& file) {
  std::vector<unsigned char> bytes(flight::file_bytes(file.size, file.capacity), 0);
  flight::Header header{};
  std::memcpy(header.magic, flight::kMagic, sizeof(header.magic));
  header.version = file.version;
  header.header_bytes = sizeof(flight::Header);
  header.rank = file.rank;
  header.size = file.size;
  header.capacity = file.capacity;
  header.comm_id = file.comm_id;
  header.pid = file.pid;
  header.created_us = file.created_us;
  copy_string(header.host, sizeof(header.host), file.host);
  header.state.store(static_cast<uint32_t>(file.state));
  header.stalled_on.store(file.stalled_on);
  header.calls.store(file.calls.size());
  header.entered.store(file.entered);
  header.completed.store(file.completed);
  header.updated_us.store(file.updated_us);
  header.reason_length.store(static_cast<uint32_t>(std::min(file.reason.size(), sizeof(header.reason) - 1)));
  copy_string(header.reason, sizeof(header.reason), file.reason);
  std::memcpy(bytes.data(), static_cast<const void*>(&header), sizeof(header));
  for (size_t r = 0; r < file.peers.size(); ++r) {
    flight::PeerFigures figures{};
    copy_string(figures.transport, sizeof(figures.transport), file.peers[r].transport);
    figures.sent_bytes.store(file.peers[r].sent_bytes);
    figures.received_bytes.store(file.peers[r].received_bytes);
    figures.messages.store(file.peers[r].messages);
    figures.wait_us.store(file.peers[r].wait_us);
    figures.waits.store(file.peers[r].waits);
    std::memcpy(bytes.data() + sizeof(flight::Header) + sizeof(figures) * r, static_cast<const void*>(&figures),
                sizeof(figures));
  }
  const size_t records = sizeof(flight::Header) + sizeof(flight::PeerFigures) * static_cast<size_t>(file.size);
  for (size_t i = 0; i < file.calls.size(); ++i) {
    const FlightCall& call = file.calls[i];
    flight::CallRecord record{};
    const bool writing = file.last_call_being_written && i + 1 == file.calls.size();
    record.stamp.store(writing ? 2 * i + 1 : 2 * i + 2);
    record.seq = call.seq;
    record.count = call.count;
    copy_string(record.name, sizeof(record.name), call.name);
    copy_string(record.algorithm, sizeof(record.algorithm), call.algorithm);
    record.root = call.root;
    record.dtype = static_cast<uint8_t>(call.dtype);
    record.op = static_cast<uint8_t>(call.op);
    record.kind = static_cast<uint8_t>(call.kind);
    record.outcome = static_cast<uint8_t>(call.outcome);
    record.start_us = call.start_us;
    record.end_us = call.end_us;
    std::memcpy(bytes.data() + records + sizeof(record) * (i % file.capacity), static_cast<const void*>(&record),
                sizeof(record));
  }
  return bytes;
}

/// "tbcoll-00000000000000ab-rank2.flight"
inline std::string flight_file_name(uint64_t comm_id, int rank) {
  char name[64];
  std::snprintf(name, sizeof(name), "tbcoll-%016llx-rank%d.flight", static_cast<unsigned long long>(comm_id), rank);
  return name;
}

/// Writes the first `bytes` bytes of the file's layout (all if npos); false if it cannot.
inline bool write_flight_file(const std::string& path, const FlightFile& file, size_t bytes = std::string::npos) {
  const std::vector<unsigned char> layout = flight_bytes(file);
  FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) return false;
  const size_t length = std::min(bytes, layout.size());
  const bool written = std::fwrite(layout.data(), 1, length, out) == length;
  return std::fclose(out) == 0 && written;
}

}  // namespace tbcoll::test
