// tbcoll-doctor's readable text for one flight file (show) and a communicator's live figures (live): plain
// functions from dumps to text, so tests can check them on made-up dumps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flight/flight_file.h"

namespace tbcoll::doctor {

/// "16:57:02.123" (UTC), from Unix microseconds.
std::string clock_time(int64_t unix_us);
/// "850 us", "12.3 ms", "30.0 s".
std::string duration(int64_t us);
/// "512 B", "1.5 KiB", "3.0 MiB", "1.1 GiB".
std::string byte_size(uint64_t bytes);
/// "live", "finished", "failed", "aborted".
std::string state_name(flight::State state);
/// "communicator 00000000000000ab (4 ranks)"
std::string communicator_title(uint64_t comm_id, int size);

/// The file's header, state and reason, per-peer figures and its last `last_calls` records (all if 0), each with its
/// number, signature, algorithm, outcome, start and duration. Ends with a newline.
std::string show(const flight::Dump& dump, size_t last_calls);

/// One communicator's live figures (its dumps, one per rank): per rank its calls and state, per peer the bytes each
/// way, messages and time waited, then the slowest link. Ends with a newline.
std::string live(const std::vector<flight::Dump>& dumps);

}  // namespace tbcoll::doctor
