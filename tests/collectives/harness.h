// Ranks as threads: run a body on n communicators built over one transport, plus reference data helpers.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "tbcoll/tbcoll.hpp"
#include "tbcoll/transport.hpp"

namespace tbcoll::test {

/// The transports every "for each transport" test runs over: the devices compiled into this build
/// (loopback, shm and tcp today; ibverbs joins by itself once its device is built), in available_devices()'
/// order, which fixes the parameter indices of the suites instantiated with ::testing::ValuesIn(test_transports())
/// (/0 loopback, /1 shm, /2 tcp). Tests that target one transport for a reason name it instead.
inline const std::vector<std::string>& test_transports() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& device : transport::available_devices()) out.push_back(device->name());
    return out;
  }();
  return names;
}

/// Those of test_transports() that connect separate processes (every one but loopback), for real-process tests.
inline const std::vector<std::string>& test_transports_between_processes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& device : transport::available_devices()) {
      if (!device->capabilities().same_process_only) out.push_back(device->name());
    }
    return out;
  }();
  return names;
}

/// The parameter of the sweeps over transports and world sizes.
struct TransportWorld {
  std::string transport;
  int world_size;
};

/// How gtest prints a TransportWorld, in failures and in --gtest_list_tests, from which ctest names the tests:
/// without it gtest prints the struct's raw bytes, a heap address among them, so the ctest names would change
/// with every build (and ctest's recorded durations, which order a -j run, would never match them again).
inline void PrintTo(const TransportWorld& param, std::ostream* os) {
  *os << param.transport << ", " << param.world_size << (param.world_size == 1 ? " rank" : " ranks");
}

/// A sweep's test name for the parameter: "tcp_3".
inline std::string name_of(const TransportWorld& param) {
  return param.transport + "_" + std::to_string(param.world_size);
}

struct RankOptions {
  std::string transport = "loopback";
  std::string algo;
  double timeout_s = 60;
  std::vector<std::string> algo_per_rank;  ///< when not empty, rank r uses algo_per_rank[r] instead of algo
  std::map<std::string, std::string> knobs;  ///< Config::knobs of every rank
  std::vector<std::map<std::string, std::string>> knobs_per_rank;  ///< when not empty, rank r's on top of knobs
};

/// Builds n communicators (one per thread) sharing an in-memory store and runs body on each. Failures in
/// any rank are reported as test failures naming the rank.
void run_ranks(int n, const RankOptions& options, const std::function<void(Communicator&)>& body);

/// Deterministic small-integer input of rank (exact in every dtype, so sums and products are exact).
std::vector<uint8_t> make_input(DataType dtype, int rank, size_t count, int salt = 0);

/// Reference all_reduce of make_input over n ranks, computed element by element in wide arithmetic.
std::vector<uint8_t> reference_all_reduce(DataType dtype, ReduceOp op, int n, size_t count, int salt = 0);

/// Number of elements of got that differ from want beyond the dtype's tolerance.
size_t count_wrong(DataType dtype, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want);

/// What fn throws (a tbcoll::Error's message), or "" when it returns.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

/// Every rank's error from Communicator::init (as error_of says it; "" where it succeeded): n ranks as threads of
/// this process over one in-memory store, rank r's Config from config_of(r) (its store set here).
std::vector<std::string> init_errors(int n, const std::function<Config(int rank)>& config_of);

/// Entries of a directory, 0 where it cannot be read: /proc/self/fd and /proc/self/task count this process's
/// descriptors and threads (Linux), to check that failed communicators leave none behind.
size_t entries_of(const char* dir);

/// All dtypes and ops, for sweeps.
std::vector<DataType> all_dtypes();
std::vector<ReduceOp> all_ops();

}  // namespace tbcoll::test
