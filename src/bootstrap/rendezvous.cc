// The rendezvous records (format in rendezvous.h).
#include "bootstrap/rendezvous.h"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/log.h"
#include "common/time.h"
#include "tbcoll/error.hpp"

namespace tbcoll::bootstrap {

std::string encode(const Published& p) {
  std::string out = fmt::format("host={}\npid={}\nkernel={}\ncpus={}\nworld={}\n", p.info.host_id, p.info.process_id,
                                p.kernel, format_cpus(p.cpus), p.world_size);
  for (const auto& [device, address] : p.addresses) out += fmt::format("dev.{}={}\n", device, address);
  return out;
}

uint64_t record_number(const std::string& value, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long parsed = std::strtoull(value.c_str(), &end, 10);
  // end must be the string's end: an embedded NUL would otherwise pass for it ("12\0junk" read as 12).
  if (value.empty() || value[0] < '0' || value[0] > '9' || end != value.c_str() + value.size() || errno == ERANGE) {
    throw IoError(fmt::format("{} is malformed ({:?}): another program wrote to the rendezvous store?", what, value));
  }
  return parsed;
}

Published decode(int rank, const std::string& text) {
  Published p;
  p.info.rank = rank;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "host") {
      p.info.host_id = value;
    } else if (key == "pid") {
      p.info.process_id = record_number(value, fmt::format("rendezvous record of rank {}: pid", rank));
    } else if (key == "kernel") {
      p.kernel = value;
    } else if (key == "world") {
      const uint64_t world = record_number(value, fmt::format("rendezvous record of rank {}: world size", rank));
      p.world_size = world > static_cast<uint64_t>(INT32_MAX) ? -1 : static_cast<int>(world);
    } else if (key == "cpus") {
      try {
        p.cpus = parse_cpus(value);
      } catch (const InvalidArgument&) {
        p.cpus.clear();  // unknown: treated as sharing every CPU
      }
    } else if (key.rfind("dev.", 0) == 0) {
      p.addresses[key.substr(4)] = value;
    }  // else: a key of a newer version, or another program's
  }
  return p;
}

uint64_t read_comm_id(Store& store, const std::string& prefix, int rank, int size, Deadline deadline,
                      const std::atomic<bool>* cancelled) {
  const std::string key = prefix + "/comm_id";
  for (;;) {
    const std::string text = text_of(store.get(key, deadline, cancelled));
    if (text.rfind(kFormedTombstone, 0) != 0) return record_number(text, "the communicator id rank 0 published");
    const uint64_t formed = record_number(text.substr(std::strlen(kFormedTombstone)), "a formed communicator's size");
    if (formed != static_cast<uint64_t>(size)) {
      throw InvalidUsage(
          fmt::format("rank {}: a communicator of {} ranks was already formed under rendezvous prefix "
                      "{:?}; this rank was started with world size {}",
                      rank, formed, prefix, size));
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(
          fmt::format("[store] key {:?} still names a communicator formed earlier at the deadline "
                      "(rank 0 of this one did not get this far)",
                      key));
    }
    check_cancelled(cancelled, fmt::format("[store] waiting for {:?}", key));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void forget_records(Store& store, const std::string& prefix, int rank, int size, Deadline deadline) {
  try {
    if (store.add(prefix + "/read", 1, deadline) != size) return;
    // The id stays as a tombstone with the size, so a rank started with another world size that comes late is
    // told at once (it would otherwise wait its whole timeout for an id nobody sets).
    store.set(prefix + "/comm_id", bytes_of(fmt::format("{}{}", kFormedTombstone, size)), deadline);
    for (int r = 0; r < size; ++r) store.erase(fmt::format("{}/peer/{}", prefix, r), deadline);
    store.erase(prefix + "/read", deadline);
  } catch (const Error& error) {
    log::warn("rank {}: could not remove the rendezvous records of {:?}: {}", rank, prefix, error.what());
  }
}

}  // namespace tbcoll::bootstrap
