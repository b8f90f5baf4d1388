// all_to_all, all_to_allv, gather and scatter: every algorithm x world sizes 1-8 x dtypes x counts, in place and
// out of place, on each transport; all_to_allv with uneven and zero counts; ranks whose counts disagree; bad
// arguments; the C API and the asynchronous forms.
//
// Inputs are bytes that depend on the rank and the byte's offset (a hash of both), so a block from the wrong rank
// or the wrong place shows; nothing is reduced, so only the element size of a dtype matters here. Every output
// buffer has guard bytes (past the end, and in the gaps between all_to_allv's blocks) that must stay untouched.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "collectives/harness.h"
#include "tbcoll/tbcoll.h"

namespace tbcoll::test {
namespace {

constexpr uint8_t kGuard = 0xEE;

uint8_t pattern(int rank, size_t offset) {
  uint64_t x = (static_cast<uint64_t>(rank + 1) << 40) ^ offset;  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint8_t>(x ^ (x >> 31));
}

std::vector<uint8_t> input_of(int rank, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = pattern(rank, i);
  return out;
}

// Byte ranges of got that differ from want, as text ("" when equal), naming the first few.
std::string differences(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return fmt::format("size {} instead of {}", got.size(), want.size());
  std::string out;
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++wrong <= 3) out += fmt::format("byte {}: {:#x} instead of {:#x}; ", i, got[i], want[i]);
  }
  return wrong == 0 ? "" : fmt::format("{} bytes differ: {}", wrong, out);
}

void check_all_to_all(Communicator& comm, DataType dtype, size_t count) {
  SCOPED_TRACE(fmt::format("all_to_all count={} {} n={} rank {}", count, to_string(dtype), comm.size(), comm.rank()));
  const int n = comm.size(), r = comm.rank();
  const size_t block = count * dtype_size(dtype), total = block * static_cast<size_t>(n);
  const std::vector<uint8_t> input = input_of(r, total);
  std::vector<uint8_t> want(total);
  for (int p = 0; p < n; ++p) {
    for (size_t i = 0; i < block; ++i) want[p * block + i] = pattern(p, r * block + i);
  }
  std::vector<uint8_t> out(total + 1, kGuard);
  comm.all_to_all(input.data(), out.data(), count, dtype);
  EXPECT_EQ(out[total], kGuard) << "wrote past the end";
  out.resize(total);
  EXPECT_EQ(differences(out, want), "") << "out of place";
  std::vector<uint8_t> in_place = input;
  comm.all_to_all(in_place.data(), in_place.data(), count, dtype);
  EXPECT_EQ(differences(in_place, want), "") << "in place";
}

// Who sends how much to whom. Zero counts come from the formula, from a rank that sends nothing and one that
// receives nothing; symmetric counts (from+to) for in place, where a rank's recv counts are its send counts.
struct Counts {
  int salt = 0;
  size_t scale = 1;
  int silent = -1;  ///< sends nothing
  int deaf = -1;    ///< receives nothing
  bool symmetric = false;
  int isolated = -1;  ///< neither sends nor receives (keeps symmetric counts symmetric)

  size_t operator()(int from, int to) const {
    if (scale == 0 || from == silent || to == deaf || from == isolated || to == isolated) return 0;
    const int mix = symmetric ? from + to : from * 3 + to * 5;
    const size_t c = static_cast<size_t>(mix + salt) % 4;  // a quarter of the pairs exchange nothing
    return c == 0 ? 0 : c * scale + static_cast<size_t>((from + to) % 2);  // odd counts too
  }
};

// Rank `rank`'s layout: blocks in reverse rank order with a gap of one element between them (recv side), in rank
// order with a gap of two (send side), or packed in rank order.
struct Layout {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  size_t send_elems = 0, recv_elems = 0;  ///< extents
};

Layout layout_of(const Counts& counts, int n, int rank, bool packed) {
  Layout l;
  for (int p = 0; p < n; ++p) {
    l.send_counts.push_back(counts(rank, p));
    l.recv_counts.push_back(counts(p, rank));
  }
  l.send_displs.resize(n);
  l.recv_displs.resize(n);
  for (int p = 0; p < n; ++p) {
    l.send_displs[p] = l.send_elems;
    l.send_elems += l.send_counts[p] + (packed ? 0 : 2);
  }
  for (int k = 0; k < n; ++k) {
    const int p = packed ? k : n - 1 - k;
    l.recv_displs[p] = l.recv_elems;
    l.recv_elems += l.recv_counts[p] + (packed ? 0 : 1);
  }
  return l;
}

// Out of place (with null displacements when packed) and, for symmetric counts, in place.
void check_all_to_allv(Communicator& comm, DataType dtype, const Counts& counts, bool packed) {
  SCOPED_TRACE(fmt::format("all_to_allv {} salt={} scale={} silent={} deaf={} isolated={}{} n={} rank {}",
                           to_string(dtype), counts.salt, counts.scale, counts.silent, counts.deaf, counts.isolated,
                           packed ? " packed" : "", comm.size(), comm.rank()));
  const int n = comm.size(), r = comm.rank();
  const size_t es = dtype_size(dtype);
  const Layout mine = layout_of(counts, n, r, packed);
  // What lands here: block p is rank p's send block for this rank.
  std::vector<uint8_t> want(mine.recv_elems * es, kGuard);
  for (int p = 0; p < n; ++p) {
    const Layout theirs = layout_of(counts, n, p, packed);
    for (size_t i = 0; i < mine.recv_counts[p] * es; ++i) {
      want[mine.recv_displs[p] * es + i] = pattern(p, theirs.send_displs[r] * es + i);
    }
  }
  const std::vector<uint8_t> input = input_of(r, mine.send_elems * es);
  std::vector<uint8_t> out(mine.recv_elems * es + 1, kGuard);
  comm.all_to_allv(input.data(), out.data(), mine.send_counts.data(), packed ? nullptr : mine.send_displs.data(),
                   mine.recv_counts.data(), packed ? nullptr : mine.recv_displs.data(), dtype);
  EXPECT_EQ(out.back(), kGuard) << "wrote past the end";
  out.pop_back();
  EXPECT_EQ(differences(out, want), "") << "out of place";
  if (!counts.symmetric) return;
  // In place the recv layout serves both sides: block p holds what goes to p, and then what came from p.
  std::vector<uint8_t> buf = input_of(r, mine.recv_elems * es);
  std::vector<uint8_t> want_in_place = buf;
  for (int p = 0; p < n; ++p) {
    const Layout theirs = layout_of(counts, n, p, packed);
    for (size_t i = 0; i < mine.recv_counts[p] * es; ++i) {
      want_in_place[mine.recv_displs[p] * es + i] = pattern(p, theirs.recv_displs[r] * es + i);
    }
  }
  comm.all_to_allv(buf.data(), buf.data(), nullptr, nullptr, mine.recv_counts.data(),
                   packed ? nullptr : mine.recv_displs.data(), dtype);
  EXPECT_EQ(differences(buf, want_in_place), "") << "in place (gaps untouched)";
}

void check_gather(Communicator& comm, DataType dtype, size_t count, int root) {
  SCOPED_TRACE(fmt::format("gather count={} {} root={} n={} rank {}", count, to_string(dtype), root, comm.size(),
                           comm.rank()));
  const int n = comm.size(), r = comm.rank();
  const size_t block = count * dtype_size(dtype), total = block * static_cast<size_t>(n);
  const std::vector<uint8_t> input = input_of(r, block);
  std::vector<uint8_t> want;
  for (int p = 0; p < n; ++p) {
    const std::vector<uint8_t> theirs = input_of(p, block);
    want.insert(want.end(), theirs.begin(), theirs.end());
  }
  std::vector<uint8_t> out(total + 1, kGuard);
  comm.gather(input.data(), r == root ? out.data() : nullptr, count, dtype, root);  // recv unused elsewhere
  EXPECT_EQ(out[total], kGuard) << "wrote past the end";
  out.resize(total);
  if (r == root) {
    EXPECT_EQ(differences(out, want), "") << "out of place";
  }
  if (r != root) {
    EXPECT_EQ(out, std::vector<uint8_t>(total, kGuard)) << "recv touched off the root";
  }
  std::vector<uint8_t> in_place(total, 0);
  if (r == root && block > 0) std::memcpy(in_place.data() + root * block, input.data(), block);
  comm.gather(r == root ? in_place.data() + root * block : input.data(), r == root ? in_place.data() : nullptr, count,
              dtype, root);
  if (r == root) {
    EXPECT_EQ(differences(in_place, want), "") << "in place";
  }
}

void check_scatter(Communicator& comm, DataType dtype, size_t count, int root) {
  SCOPED_TRACE(fmt::format("scatter count={} {} root={} n={} rank {}", count, to_string(dtype), root, comm.size(),
                           comm.rank()));
  const int n = comm.size(), r = comm.rank();
  const size_t block = count * dtype_size(dtype), total = block * static_cast<size_t>(n);
  const std::vector<uint8_t> input = input_of(root, total);  // only read at the root
  const std::vector<uint8_t> want(input.begin() + r * block, input.begin() + (r + 1) * block);
  std::vector<uint8_t> out(block + 1, kGuard);
  comm.scatter(r == root ? input.data() : nullptr, out.data(), count, dtype, root);  // send unused elsewhere
  EXPECT_EQ(out[block], kGuard) << "wrote past the end";
  out.resize(block);
  EXPECT_EQ(differences(out, want), "") << "out of place";
  std::vector<uint8_t> in_place = r == root ? input : std::vector<uint8_t>(block, 0);
  comm.scatter(r == root ? in_place.data() : nullptr, r == root ? in_place.data() + root * block : in_place.data(),
               count, dtype, root);
  if (r == root) {
    EXPECT_EQ(differences(in_place, input), "") << "in place leaves the root's send as it was";
  }
  if (r != root) {
    EXPECT_EQ(differences(in_place, want), "") << "in place (off the root: as out of place)";
  }
}

// Every check over the counts given, with dtypes of each element size rotating through the counts and roots at
// both ends and in the middle.
void check_everything(Communicator& comm, const std::vector<size_t>& counts) {
  const int n = comm.size();
  const DataType dtypes[] = {DataType::kInt8, DataType::kBfloat16, DataType::kFloat32, DataType::kFloat64};
  for (size_t i = 0; i < counts.size(); ++i) {
    const size_t count = counts[i];
    const DataType dtype = count > 10000 ? DataType::kFloat32 : dtypes[i % 4];
    const int root = static_cast<int>(i % 3 == 0 ? 0 : i % 3 == 1 ? n - 1 : n / 2);
    check_all_to_all(comm, dtype, count);
    check_gather(comm, dtype, count, root);
    check_scatter(comm, dtype, count, (root + 1) % n);
    const size_t scale = std::max<size_t>(1, count / 2);
    check_all_to_allv(comm, dtype, Counts{static_cast<int>(i), scale, n > 1 ? 1 : -1, n - 1}, false);
    check_all_to_allv(comm, dtypes[(i + 1) % 4], Counts{static_cast<int>(i) + 1, scale, -1, -1, true, n / 2},
                      i % 2 == 0);
  }
  check_all_to_allv(comm, DataType::kInt32, Counts{0, 5, -1, -1, true, -1}, true);  // every pair, in place, packed
  Counts none;
  none.scale = 0;  // every count zero: still one (empty) message per pair
  check_all_to_allv(comm, DataType::kFloat32, none, false);
}

// The three ways every new collective can run: forced to one algorithm or the other, or the tuner's choice.
const char* const kAlgorithmSets[] = {
    "all_to_all:direct,all_to_allv:direct,gather:direct,scatter:direct",
    "all_to_all:pairwise,all_to_allv:pairwise,gather:binomial,scatter:binomial",
    "",
};

struct ExchangeParam {
  std::string transport;
  int world_size;
  bool large;  ///< the counts of the slow sweep (odd, large)
};

void PrintTo(const ExchangeParam& param, std::ostream* os) {
  *os << param.transport << ", " << param.world_size << (param.world_size == 1 ? " rank" : " ranks")
      << (param.large ? ", large" : "");
}

class ExchangeSweep : public ::testing::TestWithParam<ExchangeParam> {};

TEST_P(ExchangeSweep, EveryAlgorithmInPlaceAndOut) {
  const ExchangeParam& param = GetParam();
  const std::vector<size_t> counts = param.large ? std::vector<size_t>{0, 1, 7, 4097, (size_t{1} << 17) + 3}
                                                 : std::vector<size_t>{0, 1, 7, 1001};
  for (const char* algo : kAlgorithmSets) {
    SCOPED_TRACE(std::string("algo=") + algo);
    run_ranks(param.world_size, {param.transport, algo}, [&](Communicator& comm) {
      check_everything(comm, counts);
      comm.barrier();
    });
  }
}

std::vector<ExchangeParam> exchange_params() {
  std::vector<ExchangeParam> out;
  for (const std::string& transport : test_transports()) {
    for (int n = 1; n <= 8; ++n) {
      if (transport == "shm" && n != 2 && n != 4 && n != 7) continue;  // shm: a few
      out.push_back({transport, n, true});
    }
  }
  return out;
}

std::string param_name(const ::testing::TestParamInfo<ExchangeParam>& info) {
  return info.param.transport + "_" + std::to_string(info.param.world_size);
}

// The slow sweep (labelled slow in tests/CMakeLists.txt) and a quick subset of it.
INSTANTIATE_TEST_SUITE_P(ExchangeSizes, ExchangeSweep, ::testing::ValuesIn(exchange_params()), param_name);
std::vector<ExchangeParam> quick_params() {
  std::vector<ExchangeParam> out = {{"loopback", 3, false}, {"loopback", 5, false}};
  for (const std::string& transport : test_transports()) {
    if (transport == "tcp") out.push_back({transport, 4, false});
    if (transport == "shm") out.push_back({transport, 3, false});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(ExchangeQuick, ExchangeSweep, ::testing::ValuesIn(quick_params()), param_name);

TEST(Exchange, TunerChoosesBySizeAndTheTableNamesEveryAlgorithm) {
  run_ranks(4, {"loopback", ""}, [&](Communicator& comm) {
    EXPECT_EQ(comm.algorithm("all_to_all", 1024), "direct");
    EXPECT_EQ(comm.algorithm("all_to_all", 1 << 20), "pairwise");
    EXPECT_EQ(comm.algorithm("all_to_allv", 0), "pairwise") << "never by size: the ranks' sizes differ";
    EXPECT_EQ(comm.algorithm("gather", 1024), "binomial");
    EXPECT_EQ(comm.algorithm("gather", 1 << 20), "direct");
    EXPECT_EQ(comm.algorithm("scatter", 1024), "binomial");
    EXPECT_EQ(comm.algorithm("scatter", 1 << 20), "direct");
  });
  run_ranks(2, {"loopback", "alltoallv:direct,gather:direct"}, [&](Communicator& comm) {
    EXPECT_EQ(comm.algorithm("all_to_allv", 0), "direct");
    EXPECT_EQ(comm.algorithm("gather", 8), "direct");
    EXPECT_EQ(comm.algorithm("all_to_all", 8), "direct");
  });
  const std::string message = error_of([] {
    Config config;
    config.rank = 0;
    config.world_size = 1;
    config.algo = "gather:pairwise";
    Communicator::init(config);
  });
  EXPECT_NE(message.find("gather has no algorithm \"pairwise\" (TBCOLL_ALGO; it has binomial, direct)"),
            std::string::npos) << message;
}

TEST(Exchange, BadArgumentsAreRejectedBeforeAnyCommunication) {
  run_ranks(3, {"loopback", ""}, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> buf(64);
    float* at = buf.data();
    const size_t ones[3] = {1, 1, 1}, twos[3] = {2, 2, 2};
    auto says = [&](const std::function<void()>& call, const std::string& what) {
      const std::string message = error_of(call);
      EXPECT_NE(message.find(what), std::string::npos) << "expected '" << what << "' in: " << message;
    };
    says([&] { comm.all_to_all(at, nullptr, 4, DataType::kFloat32); }, "all_to_all: recv buffer is null");
    says([&] { comm.all_to_all(at, at + 1, 4, DataType::kFloat32); },
         "overlap without being in place (in place means send == recv)");
    says([&] { comm.all_to_all(at, at + 32, SIZE_MAX / 8, DataType::kFloat32); }, "overflows");
    says([&] { comm.all_to_all(at, at + 32, 1, static_cast<DataType>(17)); }, "all_to_all: invalid dtype 17");
    says([&] { comm.gather(at, at + 16, 4, DataType::kFloat32, 3); }, "gather: root 3 out of range for world size 3");
    says([&] { comm.scatter(at, at + 16, 4, DataType::kFloat32, -1); }, "scatter: root -1 out of range");
    if (r == 0) {  // the root's buffers are checked at the root
      says([&] { comm.gather(at, nullptr, 4, DataType::kFloat32, 0); }, "gather: recv buffer is null");
      says([&] { comm.scatter(nullptr, at, 4, DataType::kFloat32, 0); }, "scatter: send buffer is null");
      says([&] { comm.gather(at + 1, at, 4, DataType::kFloat32, 0); },
           "in place means send == recv + root * count, at the root");
      says([&] { comm.scatter(at, at + 1, 4, DataType::kFloat32, 0); },
           "in place means recv == send + root * count, at the root");
    }
    says([&] { comm.all_to_allv(at, at + 32, ones, nullptr, nullptr, nullptr, DataType::kFloat32); },
         "all_to_allv: recv_counts is null");
    says([&] { comm.all_to_allv(at, at + 32, nullptr, nullptr, ones, nullptr, DataType::kFloat32); },
         "send_counts is null (allowed in place only");
    const size_t self_differs[3] = {r == 0 ? size_t{2} : 1, r == 1 ? size_t{2} : 1, r == 2 ? size_t{2} : 1};
    says([&] { comm.all_to_allv(at, at + 32, self_differs, nullptr, ones, nullptr, DataType::kFloat32); },
         fmt::format("send_counts[{}] = 2 but recv_counts[{}] = 1 (this rank's block to itself)", r, r));
    const size_t overlapping[3] = {0, 1, 4};
    says([&] { comm.all_to_allv(at, at + 32, twos, nullptr, twos, overlapping, DataType::kFloat32); },
         "the recv blocks of peers 0 and 1 overlap");
    const size_t huge[3] = {SIZE_MAX, 0, 0};
    says([&] { comm.all_to_allv(at, at + 32, ones, huge, ones, nullptr, DataType::kFloat32); },
         "send_displs[0] + send_counts[0] overflows");
    says([&] { comm.all_to_allv(at, at + 32, ones, nullptr, twos, nullptr, DataType::kFloat32); },
         "but recv_counts");
    says([&] { comm.all_to_allv(at, at, twos, nullptr, ones, nullptr, DataType::kFloat32); },
         "in place (send == recv), the recv counts and displacements serve both sides, but send_counts[0] differs");
    says([&] { comm.all_to_allv(at, at + 2, ones, nullptr, ones, nullptr, DataType::kFloat32); }, "overlap");
    says([&] { comm.all_to_allv(nullptr, at, ones, nullptr, ones, nullptr, DataType::kFloat32); },
         "all_to_allv: send buffer is null with count 3");
    // Refused before anything was sent: the communicator still works, and null buffers with zero counts are fine.
    EXPECT_FALSE(comm.broken());
    const size_t zeros[3] = {0, 0, 0};
    comm.all_to_allv(nullptr, nullptr, zeros, nullptr, zeros, nullptr, DataType::kFloat32);
    check_all_to_all(comm, DataType::kFloat32, 3);
  });
}

// Ranks that disagree fail; every one of them, within the deadline; the ones that receive the odd message name
// the call or the counts.
struct Outcome {
  std::vector<std::string> messages;
  std::chrono::steady_clock::duration took;
};

// hold: every rank keeps its communicator (and connections) until all have failed, as a process that goes on
// after the error would; otherwise a failed rank's communicator closes when its thread ends, which its peers see
// at once.
Outcome run_mismatch(int n, const RankOptions& options, const std::function<void(Communicator&)>& call,
                     bool hold = false) {
  Outcome out{std::vector<std::string>(n), {}};
  std::atomic<int> failed{0};
  const auto start = std::chrono::steady_clock::now();
  run_ranks(n, options, [&](Communicator& comm) {
    out.messages[comm.rank()] = error_of([&] {
      call(comm);
      comm.barrier();  // a rank that only sent in the call learns of the failure here
    });
    EXPECT_TRUE(comm.broken()) << "rank " << comm.rank() << ": " << out.messages[comm.rank()];
    failed++;
    while (hold && failed < n && std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  out.took = std::chrono::steady_clock::now() - start;
  for (int r = 0; r < n; ++r) EXPECT_NE(out.messages[r], "") << "rank " << r << " must fail, not succeed or hang";
  return out;
}

bool any_says(const Outcome& outcome, const std::string& what) {
  for (const std::string& message : outcome.messages) {
    if (message.find(what) != std::string::npos) return true;
  }
  return false;
}

// all_to_all counts that differ reach every rank at the call with the direct schedule (every pair exchanges in
// one step), and with the pairwise one at two ranks.
TEST(ExchangeErrors, AllToAllCountsThatDifferAreReportedOnEveryRankAtOnce) {
  for (const char* transport : {"loopback", "tcp"}) {
    for (const auto& ranks_and_algo : {std::pair{3, "all_to_all:direct"}, std::pair{2, "all_to_all:pairwise"}}) {
      const int n = ranks_and_algo.first;  // not a structured binding: C++17 lambdas cannot capture those
      const char* algo = ranks_and_algo.second;
      SCOPED_TRACE(fmt::format("{} {} ranks {}", transport, n, algo));
      const Outcome outcome = run_mismatch(n, {transport, algo, 20}, [&](Communicator& comm) {
        std::vector<float> send(64, 1.0f), recv(64);
        comm.all_to_all(send.data(), recv.data(), comm.rank() == n - 1 ? 5 : 4, DataType::kFloat32);
      });
      // The odd rank and those that receive from it say so; a rank may learn first that a peer gave up.
      for (int r = 0; r < n; ++r) {
        EXPECT_NE(outcome.messages[r].find(fmt::format("all_to_all(count={}, f32) ", r == n - 1 ? 5 : 4)),
                  std::string::npos) << outcome.messages[r];
      }
      EXPECT_NE(outcome.messages[n - 1].find("does not match the peer's call"), std::string::npos)
          << outcome.messages[n - 1];
      EXPECT_TRUE(any_says(outcome, fmt::format("peer {} called all_to_all(count=5, f32)", n - 1)))
          << fmt::format("{}", fmt::join(outcome.messages, "\n"));
      EXPECT_LT(outcome.took, std::chrono::seconds(10)) << "at once, not at the 20 s deadline";
    }
  }
}

// all_to_allv: rank 0 sends 3 elements to rank 1, which expects 2. Rank 1 says so; on loopback rank 0 learns at its
// next call that rank 1 gave up (at once); the slow variant below covers the ranks that wait for the deadline.
TEST(ExchangeErrors, AllToAllvCountsThatDifferNameBothArrays) {
  for (const char* algo : {"all_to_allv:direct", "all_to_allv:pairwise"}) {
    SCOPED_TRACE(algo);
    const Outcome outcome = run_mismatch(2, {"loopback", algo, 20}, [&](Communicator& comm) {
      std::vector<float> send(8, 1.0f), recv(8);
      const size_t sends[2][2] = {{1, 3}, {2, 1}}, recvs[2][2] = {{1, 2}, {2, 1}};  // rank 1 expects 2 from 0
      comm.all_to_allv(send.data(), recv.data(), sends[comm.rank()], nullptr, recvs[comm.rank()], nullptr,
                       DataType::kFloat32);
    });
    EXPECT_NE(outcome.messages[1].find("peer 0 sent 12 B where 8 B were expected: its send_counts[1] and this rank's "
                                       "recv_counts[0] differ"), std::string::npos) << outcome.messages[1];
    EXPECT_LT(outcome.took, std::chrono::seconds(10));
  }
}

// The ranks that receive nothing odd fail too, at the latest at the deadline (2 s here), naming the call and the
// peer they waited for (or the failed rank's reason, from its notice in the store): pairwise all_to_all at 4 ranks (the odd rank stops after its first step), all_to_allv on tcp
// (the sender's next call waits for a peer that gave up), gather whose non-root ranks only send.
TEST(ExchangeErrors, RanksThatOnlyWaitFailWithinTheDeadline) {
  const double deadline_s = 2;
  for (const char* transport : {"loopback", "tcp"}) {
    SCOPED_TRACE(transport);
    // A waiting rank times out, sees the connection close, or (sooner) reads the failed rank's notice in the store.
    auto timed_out = [](const Outcome& outcome) {
      return any_says(outcome, "timed out waiting for peer") || any_says(outcome, "closed") ||
             any_says(outcome, "failed and takes part in no further call");
    };
    Outcome outcome = run_mismatch(4, {transport, "all_to_all:pairwise", deadline_s}, [&](Communicator& comm) {
      std::vector<float> send(64, 1.0f), recv(64);
      comm.all_to_all(send.data(), recv.data(), comm.rank() == 3 ? 5 : 4, DataType::kFloat32);
    }, true);
    EXPECT_TRUE(any_says(outcome, "peer 3 called all_to_all(count=5, f32)"));
    EXPECT_TRUE(timed_out(outcome)) << "some rank waited for the odd one";
    EXPECT_LT(outcome.took, std::chrono::seconds(10));
    outcome = run_mismatch(3, {transport, "", deadline_s}, [&](Communicator& comm) {
      std::vector<float> send(8, 1.0f), recv(8);
      const size_t sends[3][3] = {{1, 3, 1}, {1, 1, 1}, {1, 1, 1}}, recvs[3][3] = {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
      comm.all_to_allv(send.data(), recv.data(), sends[comm.rank()], nullptr, recvs[comm.rank()], nullptr,
                       DataType::kFloat32);
    }, true);
    EXPECT_NE(outcome.messages[1].find("its send_counts[1] and this rank's recv_counts[0] differ"), std::string::npos)
        << outcome.messages[1];
    EXPECT_LT(outcome.took, std::chrono::seconds(10));
    for (const char* algo : {"gather:direct", "gather:binomial"}) {
      outcome = run_mismatch(4, {transport, algo, deadline_s}, [&](Communicator& comm) {
        std::vector<float> send(8, 1.0f), recv(64);
        comm.gather(send.data(), recv.data(), comm.rank() == 1 ? 3 : 2, DataType::kFloat32, 0);
      }, true);
      EXPECT_TRUE(any_says(outcome, "peer 1 called gather(count=3, f32, root=0)")) << algo;
      EXPECT_LT(outcome.took, std::chrono::seconds(10));
    }
  }
}

TEST(Exchange, AsyncFormsRunInOrderWithBlockingCalls) {
  for (const char* transport : {"loopback", "tcp"}) {
    run_ranks(3, {transport, ""}, [&](Communicator& comm) {
      const int n = comm.size(), r = comm.rank();
      const size_t count = 5, block = count * 4;
      const std::vector<uint8_t> input = input_of(r, block * n);
      std::vector<uint8_t> a2a(block * n), gathered(block * n), scattered(block), a2av(block * n);
      Work first = comm.all_to_all_async(input.data(), a2a.data(), count, DataType::kFloat32);
      Work second = comm.gather_async(input.data(), gathered.data(), count, DataType::kFloat32, 1);
      Work third = comm.scatter_async(input.data(), scattered.data(), count, DataType::kFloat32, 2);
      {
        const std::vector<size_t> counts(n, count);  // freed before the call runs: the call keeps a copy
        Work fourth = comm.all_to_allv_async(input.data(), a2av.data(), counts.data(), nullptr, counts.data(),
                                             nullptr, DataType::kFloat32);
        (void)fourth;
      }
      float x = 1;
      comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);  // waits for the queued calls first
      EXPECT_TRUE(first.test() && second.test() && third.test());
      first.wait();
      EXPECT_EQ(x, 3.0f);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < block; ++i) {
          ASSERT_EQ(a2a[p * block + i], pattern(p, r * block + i));
          ASSERT_EQ(a2av[p * block + i], pattern(p, r * block + i));
          if (r == 1) {
            ASSERT_EQ(gathered[p * block + i], pattern(p, i));
          }
        }
      }
      for (size_t i = 0; i < block; ++i) ASSERT_EQ(scattered[i], pattern(2, r * block + i));
      const size_t bad[3] = {1, 1, 1};
      EXPECT_THROW(comm.all_to_allv_async(input.data(), a2av.data(), bad, nullptr, nullptr, nullptr,
                                          DataType::kFloat32), InvalidArgument) << "refused before queuing";
      EXPECT_THROW(comm.gather_async(input.data(), nullptr, 1, DataType::kFloat32, 7), InvalidArgument);
      EXPECT_FALSE(comm.broken());
    });
  }
}

TEST(Exchange, CApi) {
  const int n = 3;
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      std::string& failure = failures[rank];
      auto check = [&](const char* what, tbcollResult_t rc) {
        if (rc != tbcollSuccess && failure.empty()) failure = fmt::format("{}: {}", what, tbcollGetLastError(nullptr));
      };
      tbcollComm_t comm = nullptr;
      check("init", tbcollCommInitRank(&comm, n, id, rank));
      if (comm == nullptr) return;
      const size_t count = 3, block = count * 8;
      const std::vector<uint8_t> input = input_of(rank, block * n);
      std::vector<uint8_t> a2a(block * n), a2av(block * n), gathered(block * n), scattered(block);
      check("all_to_all", tbcollAllToAll(input.data(), a2a.data(), count, tbcollFloat64, comm));
      // all_to_allv: rank p sends p+q elements to q (symmetric), packed.
      size_t sends[3], recvs[3];
      for (int p = 0; p < n; ++p) sends[p] = recvs[p] = static_cast<size_t>(p + rank);
      check("all_to_allv", tbcollAllToAllv(input.data(), a2av.data(), sends, nullptr, recvs, nullptr, tbcollUint8,
                                           comm));
      check("gather", tbcollGather(input.data(), rank == 0 ? gathered.data() : nullptr, count, tbcollFloat64, 0, comm));
      check("scatter", tbcollScatter(rank == 2 ? input.data() : nullptr, scattered.data(), count, tbcollFloat64, 2,
                                     comm));
      std::vector<uint8_t> in_place = input, async_a2a(block * n);
      check("all_to_all in place", tbcollAllToAll(in_place.data(), in_place.data(), count, tbcollFloat64, comm));
      tbcollRequest_t requests[4] = {};
      check("all_to_all async", tbcollAllToAllAsync(input.data(), async_a2a.data(), count, tbcollFloat64, comm,
                                                   &requests[0]));
      std::vector<uint8_t> async_a2av(block * n), async_gathered(block * n), async_scattered(block);
      check("all_to_allv async", tbcollAllToAllvAsync(input.data(), async_a2av.data(), sends, nullptr, recvs, nullptr,
                                                     tbcollUint8, comm, &requests[1]));
      check("gather async", tbcollGatherAsync(input.data(), async_gathered.data(), count, tbcollFloat64, 0, comm,
                                              &requests[2]));
      check("scatter async", tbcollScatterAsync(input.data(), async_scattered.data(), count, tbcollFloat64, 2, comm,
                                                &requests[3]));
      for (tbcollRequest_t request : requests) {
        check("wait", tbcollWait(request));
        tbcollRequestFree(request);
      }
      // Refused on every rank before anything is sent, with a result code and a message.
      if (tbcollAllToAllv(input.data(), a2av.data(), sends, nullptr, nullptr, nullptr, tbcollUint8, comm) !=
              tbcollInvalidArgument ||
          std::string(tbcollGetLastError(nullptr)).find("all_to_allv: recv_counts is null") == std::string::npos) {
        if (failure.empty()) failure = std::string("null recvcounts: ") + tbcollGetLastError(nullptr);
      }
      if (tbcollScatter(input.data(), scattered.data(), count, tbcollFloat64, n, comm) != tbcollInvalidArgument &&
          failure.empty()) {
        failure = "scatter with root out of range accepted";
      }
      for (int p = 0; p < n && failure.empty(); ++p) {
        size_t offset = 0;  // of rank p's block for this rank in a2av: p's packed send layout
        for (int q = 0; q < rank; ++q) offset += static_cast<size_t>(p + q);
        size_t at = 0;  // of rank p's block in this rank's recv
        for (int q = 0; q < p; ++q) at += recvs[q];
        for (size_t i = 0; i < block && failure.empty(); ++i) {
          const uint8_t want = pattern(p, rank * block + i);
          if (a2a[p * block + i] != want || in_place[p * block + i] != want || async_a2a[p * block + i] != want) {
            failure = fmt::format("all_to_all: block {} byte {}", p, i);
          }
          if (rank == 0 && (gathered[p * block + i] != pattern(p, i) || async_gathered[p * block + i] != pattern(p, i))) {
            failure = fmt::format("gather: block {} byte {}", p, i);
          }
        }
        for (size_t i = 0; i < recvs[p] && failure.empty(); ++i) {
          if (a2av[at + i] != pattern(p, offset + i) || async_a2av[at + i] != pattern(p, offset + i)) {
            failure = fmt::format("all_to_allv: block {} byte {}", p, i);
          }
        }
      }
      for (size_t i = 0; i < block && failure.empty(); ++i) {
        if (scattered[i] != pattern(2, rank * block + i) || async_scattered[i] != pattern(2, rank * block + i)) {
          failure = fmt::format("scatter: byte {}", i);
        }
      }
      tbcollCommDestroy(comm);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < n; ++rank) EXPECT_EQ(failures[rank], "") << "rank " << rank;
}

}  // namespace
}  // namespace tbcoll::test
