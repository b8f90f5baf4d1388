// The schedules beyond the direct exchange and the ring: the all_reduce trees, recursive doubling, halving-doubling and mesh, and the
// hierarchical all_reduce and all_gather, against the reference (in place and out of place, every rank bitwise
// alike), with inputs whose sum depends on the order of the reduction, and the bytes the hierarchical
// schedules move across hosts (counted by a wrapped transport).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "collectives/checks.h"
#include "collectives/harness.h"
#include "collectives/wrapped_device.h"
#include "reduce/reduce.h"
#include "tbcoll/transport.hpp"

namespace tbcoll::test {
namespace {

const std::vector<std::string> kFlat = {"tree", "recursive_doubling", "halving_doubling", "mesh"};

// Loopback between the threads of this process whatever their host ids (loopback itself joins ranks of one
// host only), so threads can pretend to be on several hosts; it counts the bytes each rank sends to each peer.
std::atomic<uint64_t> sent_bytes[8][8];

class CountingEndpoint final : public transport::Endpoint {
 public:
  CountingEndpoint(std::unique_ptr<transport::Endpoint> inner, int rank) : inner_(std::move(inner)), rank_(rank) {}
  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override {
    sent_bytes[rank_][inner_->peer()] += bytes;
    return inner_->isend(buf, bytes, tag);
  }
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override {
    return inner_->irecv(buf, bytes, tag);
  }
  int peer() const override { return inner_->peer(); }

 private:
  std::unique_ptr<transport::Endpoint> inner_;
  int rank_;
};

class CountingContext final : public WrappedContext {
 public:
  CountingContext(std::unique_ptr<transport::Context> inner, int rank)
      : WrappedContext(std::move(inner)), rank_(rank) {}

 private:
  std::unique_ptr<transport::Endpoint> wrap_endpoint(std::unique_ptr<transport::Endpoint> endpoint) override {
    return std::make_unique<CountingEndpoint>(std::move(endpoint), rank_);
  }
  int rank_;
};

class CountingDevice final : public WrappedDevice {
 public:
  explicit CountingDevice(std::shared_ptr<transport::Device> inner) : WrappedDevice("counting", std::move(inner)) {}
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return self.process_id == peer.process_id;
  }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return std::make_unique<CountingContext>(inner_->create_context(args), args.rank);
  }
};

// Rank r on host hosts[r] (TBCOLL_HOST_ID).
std::vector<std::map<std::string, std::string>> on_hosts(const std::vector<std::string>& hosts) {
  register_wrapped<CountingDevice>();
  std::vector<std::map<std::string, std::string>> knobs;
  for (const std::string& host : hosts) knobs.push_back({{"TBCOLL_HOST_ID", host}});
  return knobs;
}

void check_a_few(Communicator& comm, const std::vector<size_t>& counts) {
  for (size_t count : counts) {
    check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 0);
    if (count > 5000) continue;
    check_all_reduce(comm, DataType::kBfloat16, ReduceOp::kAvg, count, 1);
    check_all_reduce(comm, DataType::kInt64, ReduceOp::kMax, count, 2);
    check_all_reduce(comm, DataType::kInt8, ReduceOp::kProd, count, 3);
    check_all_reduce(comm, DataType::kFloat16, ReduceOp::kMin, count, 4);
  }
}

// The quick subset: every flat algorithm at a power of two and two other world sizes, on loopback.
TEST(AllReduceAlgorithms, EachOnLoopback) {
  for (const std::string& algo : kFlat) {
    for (int n : {2, 3, 5, 8}) {
      SCOPED_TRACE(fmt::format("{} n={}", algo, n));
      run_ranks(n, {"loopback", algo}, [&](Communicator& comm) {  // bare: all_gather's recursive_doubling too
        EXPECT_EQ(comm.all_reduce_algorithm(8), algo);
        if (algo == "recursive_doubling") {
          EXPECT_EQ(comm.algorithm("all_gather", 8), algo);
        }
        check_a_few(comm, {1, 7, 4099});
        for (size_t count : {size_t{1}, size_t{7}, size_t{4099}}) check_all_gather(comm, DataType::kInt8, count);
      });
    }
  }
}

// The tree pipelines a large message through several chunks (and the others split it their way).
TEST(AllReduceAlgorithms, LargeMessagesWithSmallChunks) {
  for (const std::string& algo : kFlat) {
    SCOPED_TRACE(algo);
    RankOptions options{"loopback", "allreduce:" + algo};
    options.knobs["TBCOLL_CHUNK_BYTES"] = "4096";
    run_ranks(6, options, [&](Communicator& comm) { check_a_few(comm, {100003}); });
  }
}

TEST(AllReduceAlgorithms, MeshOnShm) {
  for (int n : {2, 3, 5}) {
    run_ranks(n, {"shm", "allreduce:mesh"}, [&](Communicator& comm) { check_a_few(comm, {1, 7, 4099, 70001}); });
  }
}

// Loopback that records, per rank and peer, the most receives posted and not yet complete at once.
std::atomic<int> receives_open[8][8], receives_most[8][8];

class OpenReceive final : public transport::Request {
 public:
  OpenReceive(std::unique_ptr<transport::Request> inner, std::atomic<int>* open)
      : inner_(std::move(inner)), open_(open) {}
  ~OpenReceive() override { close(); }
  bool test() override {
    const bool done = inner_->test();
    if (done) close();
    return done;
  }
  void block(std::chrono::microseconds max_wait) override { inner_->block(max_wait); }

 private:
  void close() {
    if (open_ != nullptr) open_->fetch_sub(1);
    open_ = nullptr;
  }
  std::unique_ptr<transport::Request> inner_;
  std::atomic<int>* open_;
};

class WindowEndpoint final : public transport::Endpoint {
 public:
  WindowEndpoint(std::unique_ptr<transport::Endpoint> inner, int rank) : inner_(std::move(inner)), rank_(rank) {}
  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override {
    return inner_->isend(buf, bytes, tag);
  }
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override {
    std::atomic<int>& open = receives_open[rank_][inner_->peer()];
    std::atomic<int>& most = receives_most[rank_][inner_->peer()];
    const int now = open.fetch_add(1) + 1;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
    return std::make_unique<OpenReceive>(inner_->irecv(buf, bytes, tag), &open);
  }
  int peer() const override { return inner_->peer(); }

 private:
  std::unique_ptr<transport::Endpoint> inner_;
  int rank_;
};

class WindowContext final : public WrappedContext {
 public:
  WindowContext(std::unique_ptr<transport::Context> inner, int rank)
      : WrappedContext(std::move(inner)), rank_(rank) {}

 private:
  std::unique_ptr<transport::Endpoint> wrap_endpoint(std::unique_ptr<transport::Endpoint> endpoint) override {
    return std::make_unique<WindowEndpoint>(std::move(endpoint), rank_);
  }
  int rank_;
};

class WindowDevice final : public WrappedDevice {
 public:
  explicit WindowDevice(std::shared_ptr<transport::Device> inner) : WrappedDevice("window", std::move(inner)) {}
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return std::make_unique<WindowContext>(inner_->create_context(args), args.rank);
  }
};

// Mesh posts its receives mesh_depth() chunks ahead per peer (kMeshWindowBytes), so a link that moves a message
// only into a posted receive can keep a bandwidth-delay product in flight (2 would not). The results stay
// right as the slots wrap round, in place too.
TEST(AllReduceAlgorithms, MeshKeepsItsWindowOfReceivesPosted) {
  register_wrapped<WindowDevice>();
  for (const size_t chunk : {size_t{64} << 10, size_t{1} << 20}) {
    SCOPED_TRACE(chunk);
    for (auto& row : receives_most) {
      for (auto& most : row) most = 0;
    }
    RankOptions options{"window", "allreduce:mesh"};
    options.knobs["TBCOLL_CHUNK_BYTES"] = std::to_string(chunk);
    const size_t count = (size_t{8} << 20) / 4 + 3;  // 8 MiB of f32 and a bit: 129 and 9 chunks
    run_ranks(3, options, [&](Communicator& comm) {  // all_reduce alone: other collectives post their own
      const std::vector<uint8_t> want = reference_all_reduce(DataType::kFloat32, ReduceOp::kSum, 3, count);
      std::vector<uint8_t> data = make_input(DataType::kFloat32, comm.rank(), count), out(data.size());
      comm.all_reduce(data.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      EXPECT_EQ(count_wrong(DataType::kFloat32, out, want), 0u) << "out of place";
      comm.all_reduce(data.data(), data.data(), count, DataType::kFloat32, ReduceOp::kSum);
      EXPECT_EQ(count_wrong(DataType::kFloat32, data, want), 0u) << "in place";
    });
    const int depth = static_cast<int>(algo::mesh_depth(chunk));
    EXPECT_EQ(depth, chunk < (1 << 20) ? 32 : 2);
    for (int r = 0; r < 3; ++r) {
      for (int p = 0; p < 3; ++p) {
        if (p != r) {
          EXPECT_EQ(receives_most[r][p].load(), depth) << "rank " << r << " from " << p;
        }
      }
    }
  }
}

// Inputs that make the order matter: values of every magnitude and sign in each element, so sums in different
// orders round differently. Every algorithm must still give every rank the same bits.
std::vector<uint8_t> order_sensitive_input(DataType dtype, int rank, size_t count) {
  std::vector<uint8_t> out(count * dtype_size(dtype));
  const int spread = dtype == DataType::kFloat32 ? 30 : dtype == DataType::kFloat16 ? 12 : 40;
  for (size_t i = 0; i < count; ++i) {
    uint64_t h = (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull);
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    const int exponent = static_cast<int>(h % static_cast<uint64_t>(spread)) - spread / 2;
    const float mantissa = 1.0f + static_cast<float>((h >> 8) % 1000) / 1000.0f;
    const float v = ((h >> 20) & 1 ? -1.0f : 1.0f) * std::ldexp(mantissa, exponent);
    uint8_t* at = out.data() + i * dtype_size(dtype);
    if (dtype == DataType::kFloat32) {
      std::memcpy(at, &v, 4);
    } else {
      const uint16_t x = dtype == DataType::kFloat16 ? reduce::float_to_half(v) : reduce::float_to_bf16(v);
      std::memcpy(at, &x, 2);
    }
  }
  return out;
}

// How many elements of the sum over n ranks differ between summing in rank order and in reverse.
size_t order_dependence(DataType dtype, int n, size_t count) {
  std::vector<uint8_t> forward = order_sensitive_input(dtype, 0, count);
  std::vector<uint8_t> backward = order_sensitive_input(dtype, n - 1, count);
  for (int r = 1; r < n; ++r) {
    reduce::apply(forward.data(), forward.data(), order_sensitive_input(dtype, r, count).data(), count, dtype,
                  ReduceOp::kSum);
    reduce::apply(backward.data(), backward.data(), order_sensitive_input(dtype, n - 1 - r, count).data(), count,
                  dtype, ReduceOp::kSum);
  }
  size_t differ = 0;
  const size_t es = dtype_size(dtype);
  for (size_t i = 0; i < count; ++i) differ += std::memcmp(forward.data() + i * es, backward.data() + i * es, es) != 0;
  return differ;
}

// Sums order_sensitive_input over the ranks, in place and out of place; returns how many ranks hold other bits
// than this one.
int ranks_with_other_bits(Communicator& comm, DataType dtype, size_t count) {
  SCOPED_TRACE(fmt::format("{} count={} n={}", to_string(dtype), count, comm.size()));
  const size_t bytes = count * dtype_size(dtype);
  std::vector<uint8_t> input = order_sensitive_input(dtype, comm.rank(), count), out(bytes);
  comm.all_reduce(input.data(), out.data(), count, dtype, ReduceOp::kSum);
  std::vector<uint8_t> in_place = input;
  comm.all_reduce(in_place.data(), in_place.data(), count, dtype, ReduceOp::kSum);
  EXPECT_EQ(in_place, out) << "in place differs from out of place";
  std::vector<uint8_t> everyone(bytes * static_cast<size_t>(comm.size()));
  comm.all_gather(out.data(), everyone.data(), bytes, DataType::kUint8);
  int other = 0;
  for (int r = 0; r < comm.size(); ++r) other += std::memcmp(everyone.data() + static_cast<size_t>(r) * bytes, out.data(), bytes) != 0;
  return other;
}

// What the check must catch: the direct exchange, but each rank folds the inputs starting from its own.
void all_reduce_own_order(algo::Exec& exec, const algo::Args& args) {
  const int n = exec.size();
  const size_t bytes = args.count * args.elem_size;
  std::vector<uint8_t> inputs(bytes * static_cast<size_t>(n));
  std::memcpy(inputs.data() + bytes * static_cast<size_t>(exec.rank()), args.send, bytes);
  for (int p = 0; p < n; ++p) {
    if (p != exec.rank()) exec.irecv(p, inputs.data() + bytes * static_cast<size_t>(p), bytes);
  }
  for (int p = 0; p < n; ++p) {
    if (p != exec.rank()) exec.isend(p, args.send, bytes);
  }
  exec.wait_all();
  std::vector<uint8_t> sum(inputs.begin() + bytes * static_cast<size_t>(exec.rank()),
                           inputs.begin() + bytes * static_cast<size_t>(exec.rank() + 1));
  for (int k = 1; k < n; ++k) {
    reduce::apply(sum.data(), sum.data(), inputs.data() + bytes * static_cast<size_t>((exec.rank() + k) % n),
                  args.count, args.dtype, args.op);
  }
  std::memcpy(args.recv, sum.data(), bytes);
}

TEST(AllReduceAlgorithms, BitwiseIdenticalOnEveryRankWhereTheOrderMatters) {
  const size_t count = 3001;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16}) {
    for (int n : {3, 6, 8}) {
      EXPECT_GT(order_dependence(dtype, n, count), count / 50)
          << to_string(dtype) << " n=" << n << ": the inputs do not make the order matter, the test proves nothing";
    }
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> runs;
  for (const std::string& algo : kFlat) {
    for (int n : {3, 6, 8}) runs.push_back({"allreduce:" + algo, std::vector<std::string>(n, "")});
  }
  runs.push_back({"hierarchical", {"a", "a", "b", "b", "b", "a"}});
  runs.push_back({"hierarchical", {"a", "b", "c", "a", "b", "c", "a", "b"}});
  for (const auto& [algo, hosts] : runs) {
    SCOPED_TRACE(algo);
    RankOptions options{hosts[0].empty() ? "loopback" : "counting", algo};
    if (!hosts[0].empty()) options.knobs_per_rank = on_hosts(hosts);
    options.knobs["TBCOLL_CHUNK_BYTES"] = "4096";  // several chunks and trees' pipelines
    run_ranks(static_cast<int>(hosts.size()), options, [&](Communicator& comm) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16}) {
        EXPECT_EQ(ranks_with_other_bits(comm, dtype, count), 0) << to_string(dtype);
      }
    });
  }
  static std::once_flag once;
  std::call_once(once, [] {
    algo::Algorithm row;
    row.kind = OpKind::kAllReduce;
    row.name = "test_own_order";
    row.description = "test only: each rank sums from its own input";
    row.run = all_reduce_own_order;
    row.cost = algo::cost_all_reduce_direct;
    row.auto_range = algo::forced_only;
    algo::register_algorithm(row);
  });
  run_ranks(3, {"loopback", "allreduce:test_own_order"}, [&](Communicator& comm) {
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16}) {
      EXPECT_GT(ranks_with_other_bits(comm, dtype, count), 0) << to_string(dtype) << ": the check missed it";
    }
  });
}

// ---- hierarchical -------------------------------------------------------------------------------------------

TEST(Hierarchical, AllReduceAndAllGatherOverPretendHosts) {
  const std::vector<std::vector<std::string>> layouts = {
      {"a", "a", "b", "b"},                     // 2 hosts x 2, consecutive
      {"a", "b", "a", "b"},                     // 2 hosts x 2, alternating
      {"a", "a", "a", "b", "b"},                // uneven
      {"x", "y", "y", "z", "z", "z", "x"},      // three hosts, one with a single rank
      {"a", "b", "c", "d", "a", "b", "c", "d"}  // four hosts x 2
  };
  for (const auto& hosts : layouts) {
    SCOPED_TRACE(fmt::format("hosts {}", fmt::join(hosts, ",")));
    for (const char* transport : {"counting", "tcp"}) {
      if (std::string(transport) == "tcp" && hosts.size() != 4 && hosts.size() != 7) continue;  // time
      RankOptions options{transport, "hierarchical"};
      options.knobs_per_rank = on_hosts(hosts);
      run_ranks(static_cast<int>(hosts.size()), options, [&](Communicator& comm) {
        EXPECT_EQ(comm.all_reduce_algorithm(8), "hierarchical");
        EXPECT_EQ(comm.algorithm("all_gather", 8), "hierarchical");
        for (size_t count : {size_t{1}, size_t{7}, size_t{4099}, size_t{70001}}) {
          check_all_gather(comm, count > 5000 ? DataType::kFloat32 : DataType::kInt8, count);
        }
        check_a_few(comm, {1, 7, 4099, 70001});
      });
    }
  }
}

TEST(Hierarchical, RefusesWithOneHostOrOneRankPerHost) {
  for (const auto& [hosts, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"a", "a", "a"}, "all 3 ranks are on one host"},
           {{"a", "b", "c"}, "each of the 3 hosts has one rank"}}) {
    const std::string reason = why;  // C++17 lambdas cannot capture structured bindings (clang refuses)
    RankOptions options{"counting", "hierarchical"};
    options.knobs_per_rank = on_hosts(hosts);
    run_ranks(3, options, [&](Communicator& comm) {
      std::vector<float> x(4, 1.0f), all(12);
      std::string message = error_of([&] { comm.all_reduce(x.data(), x.data(), 4, DataType::kFloat32, ReduceOp::kSum); });
      EXPECT_NE(message.find("algorithm \"hierarchical\" cannot run this call: " + reason), std::string::npos)
          << message;
      message = error_of([&] { comm.all_gather(x.data(), all.data(), 4, DataType::kFloat32); });
      EXPECT_NE(message.find(reason), std::string::npos) << message;
      EXPECT_FALSE(comm.broken()) << "refused before anything was sent";
    });
  }
}

// Bytes that one call of `call` moves between ranks on different hosts.
uint64_t bytes_across_hosts(const std::vector<std::string>& hosts, const std::string& algo,
                            const std::function<void(Communicator&)>& call) {
  const int n = static_cast<int>(hosts.size());
  RankOptions options{"counting", algo};
  options.knobs_per_rank = on_hosts(hosts);
  for (auto& row : sent_bytes) {
    for (auto& cell : row) cell = 0;
  }
  run_ranks(n, options, [&](Communicator& comm) { call(comm); });
  uint64_t across = 0;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (hosts[static_cast<size_t>(a)] != hosts[static_cast<size_t>(b)]) across += sent_bytes[a][b];
    }
  }
  return across;
}

// 2 hosts x 2 ranks, 1 MiB of f32: the flat ring against the hierarchical schedule, with each host's ranks
// consecutive and alternating. 2 S is the least any all-reduce can move across (each host needs S of the other's
// data), which the hierarchical one does in both layouts; the ring moves 3 S and 6 S.
TEST(Hierarchical, MovesFewerBytesAcrossHostsThanTheFlatRing) {
  const size_t count = 1u << 18;  // 1 MiB
  const uint64_t S = count * 4;
  auto all_reduce = [&](Communicator& comm) {
    std::vector<float> x(count, static_cast<float>(comm.rank()));
    comm.all_reduce(x.data(), x.data(), count, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(x[count - 1], 6.0f);
  };
  auto all_gather = [&](Communicator& comm) {
    std::vector<float> x(count / 4, static_cast<float>(comm.rank())), all(count);
    comm.all_gather(x.data(), all.data(), x.size(), DataType::kFloat32);
    EXPECT_EQ(all[count - 1], 3.0f);
  };
  for (const std::vector<std::string>& hosts : {std::vector<std::string>{"a", "a", "b", "b"},
                                                std::vector<std::string>{"a", "b", "a", "b"}}) {
    const bool alternating = hosts[1] == "b";
    SCOPED_TRACE(alternating ? "alternating" : "consecutive");
    const uint64_t ring = bytes_across_hosts(hosts, "ring", all_reduce);
    const uint64_t hierarchical = bytes_across_hosts(hosts, "hierarchical", all_reduce);
    std::printf("all_reduce 1 MiB, 2 hosts x 2 ranks (%s): ring %llu B, hierarchical %llu B across hosts\n",
                alternating ? "alternating" : "consecutive", static_cast<unsigned long long>(ring),
                static_cast<unsigned long long>(hierarchical));
    EXPECT_EQ(ring, (alternating ? 6 : 3) * S);
    EXPECT_EQ(hierarchical, 2 * S);
    if (alternating) {
      EXPECT_LT(2 * hierarchical, ring) << "less than half the flat ring's bytes";
    }
    const uint64_t ring_gather = bytes_across_hosts(hosts, "ring", all_gather);
    const uint64_t hierarchical_gather = bytes_across_hosts(hosts, "hierarchical", all_gather);
    std::printf("all_gather 1 MiB, 2 hosts x 2 ranks (%s): ring %llu B, hierarchical %llu B across hosts\n",
                alternating ? "alternating" : "consecutive", static_cast<unsigned long long>(ring_gather),
                static_cast<unsigned long long>(hierarchical_gather));
    EXPECT_EQ(hierarchical_gather, S) << "each leader receives the other host's half once";
    EXPECT_EQ(ring_gather, alternating ? 3 * S : 3 * S / 2) << "(n-1) blocks of S/4 over each crossing link";
  }
}

// ---- the sweep (slow) ---------------------------------------------------------------------------------------

class AlgorithmSweep : public ::testing::TestWithParam<TransportWorld> {};

// Every flat algorithm (and all_gather's of the same name: recursive_doubling) x counts {0, 1, odd, 4096, 1 Mi + 3}
// x a few dtypes and ops, in place and out of place;
// the hierarchical pair with the ranks split over two pretend hosts (loopback and tcp carry both).
TEST_P(AlgorithmSweep, AllReduce) {
  const TransportWorld& param = GetParam();
  const std::vector<size_t> counts = {0, 1, 7, 4096, (1u << 20) + 3};
  std::vector<std::string> algos = kFlat;
  if (param.transport == "shm") algos = {"mesh"};
  for (const std::string& algo : algos) {
    SCOPED_TRACE(algo);
    run_ranks(param.world_size, {param.transport, algo}, [&](Communicator& comm) {  // all_gather's too, if any
      check_a_few(comm, counts);
      if (algo != "recursive_doubling") return;  // the other all_gathers are the Sweep's
      for (size_t count : counts) check_all_gather(comm, count > 5000 ? DataType::kFloat32 : DataType::kInt8, count);
    });
  }
  if (param.transport == "shm" || param.world_size < 3) return;
  std::vector<std::string> hosts;
  for (int r = 0; r < param.world_size; ++r) hosts.push_back(r < param.world_size / 2 ? "a" : "b");
  RankOptions options{param.transport == "loopback" ? "counting" : param.transport, "hierarchical"};
  options.knobs_per_rank = on_hosts(hosts);
  run_ranks(param.world_size, options, [&](Communicator& comm) {
    check_a_few(comm, counts);
    for (size_t count : counts) check_all_gather(comm, DataType::kInt8, count);
  });
}

std::vector<TransportWorld> algorithm_params() {
  std::vector<TransportWorld> out;
  for (const char* transport : {"loopback", "tcp", "shm"}) {
    for (int n = 1; n <= 8; ++n) out.push_back({transport, n});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(TransportsAndSizes, AlgorithmSweep, ::testing::ValuesIn(algorithm_params()),
                         [](const ::testing::TestParamInfo<TransportWorld>& info) { return name_of(info.param); });

}  // namespace
}  // namespace tbcoll::test
