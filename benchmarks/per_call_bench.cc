// The library's own cost per call, with no hand-off between ranks: what a tensor-parallel decode step pays on
// top of the wire for each of its small all-reduces.
//
//   OneRank/<collective>   a communicator of one rank: the public call, the argument checks and the copy of
//                          8 B (nothing is sent)
//   Mirror/<collective>    rank 0 of two ranks, whose transport ("mirror", below) answers each receive with
//                          this rank's own send of the same tag: the whole path of a point-to-point call
//                          (checks, tuner choice, tag and signature, guard, Exec, requests, waits) and no other
//                          rank to wait for
//   Mirror/all_reduce_forced  the same with TBCOLL_ALGO naming the algorithm: the tuner's choice left out
//   MirrorFastPath/all_reduce the same over a transport whose whole-collective fast path copies send to recv:
//                          the layers above the shm one-shot's exchange (checks, tag, guard, deadline, notices'
//                          watch, flight recorder, the virtual call), without the exchange; _no_flight: the
//                          flight recorder off (TBCOLL_FLIGHT_CALLS=0), what it costs per call
//   Layer/...              the pieces on their own: the tuner's choice, an Exec's set-up and empty wait, a
//                          deadline, the asynchronous queue's drain when nothing is queued
//
//   tbcoll_per_call_bench [--benchmark_filter=Mirror]
#include <benchmark/benchmark.h>

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "algorithms/exec.h"
#include "async.h"
#include "common/time.h"
#include "tbcoll/tbcoll.hpp"
#include "tbcoll/transport.hpp"
#include "tuner.h"

namespace tbcoll::bench {
namespace {

class DoneRequest final : public transport::Request {
 public:
  bool test() override { return true; }
  void block(std::chrono::microseconds) override {}
};

struct Sent {
  std::vector<uint8_t> bytes;
  transport::Tag tag;
};

// The endpoint's own sends, in order, which its receives take back: a peer that sends exactly what this rank
// sends, as the peer of a symmetric schedule of two ranks does (same tags, signatures and sizes).
class MirrorEndpoint final : public transport::Endpoint {
 public:
  explicit MirrorEndpoint(int peer) : peer_(peer) {}
  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override {
    Sent& sent = sent_.emplace_back();
    sent.bytes.assign(static_cast<const uint8_t*>(buf), static_cast<const uint8_t*>(buf) + bytes);
    sent.tag = tag;
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override {
    return std::make_unique<Receive>(this, buf, bytes, tag);
  }
  int peer() const override { return peer_; }

 private:
  class Receive final : public transport::Request {
   public:
    Receive(MirrorEndpoint* endpoint, void* buf, size_t bytes, transport::Tag tag)
        : endpoint_(endpoint), buf_(buf), bytes_(bytes), tag_(tag) {}
    bool test() override {
      if (done_) return true;
      auto& sent = endpoint_->sent_;
      if (sent.empty()) return false;
      if (sent.front().bytes.size() != bytes_ || sent.front().tag.tag != tag_.tag) {
        throw InvalidUsage("mirror: the schedule is not symmetric (a receive meets another send)");
      }
      if (bytes_ > 0) std::memcpy(buf_, sent.front().bytes.data(), bytes_);
      sent.pop_front();
      done_ = true;
      return true;
    }
    void block(std::chrono::microseconds) override {}

   private:
    MirrorEndpoint* endpoint_;
    void* buf_;
    size_t bytes_;
    transport::Tag tag_;
    bool done_ = false;
  };

  int peer_;
  std::deque<Sent> sent_;
};

// A whole-collective fast path that copies send to recv: the layers above a transport's fast path (the shm
// one-shot's, say) with no shared memory below them.
std::vector<transport::FastPathAlgorithm> mirror_fast_algorithms() {
  transport::FastPathAlgorithm copy{"mirror", OpKind::kAllReduce, "copies send to recv (a benchmark's)"};
  copy.max_bytes = 4096;
  copy.auto_max_bytes = 4097;
  return {copy};
}

class MirrorFastPath final : public transport::CollectiveFastPath {
 public:
  const std::vector<transport::FastPathAlgorithm>& algorithms() const override { return algorithms_; }
  void run(size_t, const transport::CollectiveArgs& args) override {
    if (args.send != args.recv) std::memcpy(args.recv, args.send, args.count * dtype_size(args.dtype));
  }
  void announce(const transport::Tag&) override {}

 private:
  std::vector<transport::FastPathAlgorithm> algorithms_ = mirror_fast_algorithms();
};

class MirrorContext final : public transport::Context {
 public:
  explicit MirrorContext(bool fast) : fast_(fast) {}
  std::string address() const override { return "mirror"; }
  transport::CollectiveFastPath* fast_path() override { return fast_ ? &fast_path_ : nullptr; }
  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline) override {
    std::vector<std::unique_ptr<transport::Endpoint>> out;
    for (const auto& peer : peers) out.push_back(std::make_unique<MirrorEndpoint>(peer.rank));
    return out;
  }
  void abort() override {}

 private:
  bool fast_;
  MirrorFastPath fast_path_;
};

// "mirror": point-to-point only; "mirror-fast": with the fast path above.
class MirrorDevice final : public transport::Device {
 public:
  explicit MirrorDevice(bool fast) : fast_(fast) {}
  std::string name() const override { return fast_ ? "mirror-fast" : "mirror"; }
  std::vector<transport::FastPathAlgorithm> fast_path_algorithms() const override {
    return fast_ ? mirror_fast_algorithms() : std::vector<transport::FastPathAlgorithm>{};
  }
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps;
    caps.latency_us = 0.1;
    caps.bandwidth_gbps = 10;
    caps.same_process_only = true;
    return caps;
  }
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return self.process_id == peer.process_id;
  }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs&) override {
    return std::make_unique<MirrorContext>(fast_);
  }

 private:
  bool fast_;
};

// Rank 0 of a two-rank communicator over the mirror (rank 1 is built on a thread and set aside: it never calls).
struct MirrorPair {
  std::unique_ptr<Communicator> rank0, rank1;
};

MirrorPair mirror_pair(const std::string& algo, const char* transport = "mirror",
                       std::map<std::string, std::string> knobs = {}) {
  static const bool registered = [] {
    transport::register_device(std::make_shared<MirrorDevice>(false));
    transport::register_device(std::make_shared<MirrorDevice>(true));
    return true;
  }();
  (void)registered;
  auto store = make_in_memory_store();
  auto config = [&](int rank) {
    Config c;
    c.rank = rank;
    c.world_size = 2;
    c.store = store;
    c.transport = transport;
    c.algo = algo;
    c.knobs = knobs;
    return c;
  };
  MirrorPair pair;
  std::thread other([&] { pair.rank1 = std::make_unique<Communicator>(Communicator::init(config(1))); });
  pair.rank0 = std::make_unique<Communicator>(Communicator::init(config(0)));
  other.join();
  return pair;
}

Communicator one_rank() {
  Config c;
  c.rank = 0;
  c.world_size = 1;
  return Communicator::init(c);
}

enum class Call { kAllReduce, kAllGather, kReduceScatter, kReduce, kBroadcast, kBarrier, kAllToAll, kGather,
                  kScatter };

// One call of 8 B per rank (two f32; the gathered and scattered sides hold n blocks).
void call(Communicator& comm, Call which, float* send, float* recv) {
  constexpr size_t kCount = 2;
  const DataType f32 = DataType::kFloat32;
  switch (which) {
    case Call::kAllReduce: return comm.all_reduce(send, recv, kCount, f32, ReduceOp::kSum);
    case Call::kAllGather: return comm.all_gather(send, recv, kCount, f32);
    case Call::kReduceScatter: return comm.reduce_scatter(send, recv, kCount, f32, ReduceOp::kSum);
    case Call::kReduce: return comm.reduce(send, recv, kCount, f32, ReduceOp::kSum, 0);
    case Call::kBroadcast: return comm.broadcast(send, recv, kCount, f32, 0);
    case Call::kBarrier: return comm.barrier();
    case Call::kAllToAll: return comm.all_to_all(send, recv, kCount, f32);
    case Call::kGather: return comm.gather(send, recv, kCount, f32, 0);
    case Call::kScatter: return comm.scatter(send, recv, kCount, f32, 0);
  }
}

void BM_OneRank(benchmark::State& state, Call which) {
  Communicator comm = one_rank();
  std::vector<float> send(64, 1.0f), recv(64);
  for (auto _ : state) {
    call(comm, which, send.data(), recv.data());
    benchmark::DoNotOptimize(recv.data());
  }
}

void BM_Mirror(benchmark::State& state, Call which, const char* algo) {
  MirrorPair pair = mirror_pair(algo);
  std::vector<float> send(64, 1.0f), recv(64);
  for (auto _ : state) {
    call(*pair.rank0, which, send.data(), recv.data());
    benchmark::DoNotOptimize(recv.data());
  }
}

// Rank 0 of two over "mirror-fast": an all_reduce the tuner gives the transport's fast path; flight: the flight
// recorder on (the default) or off.
void BM_MirrorFastPath(benchmark::State& state, bool flight) {
  MirrorPair pair = mirror_pair("", "mirror-fast", {{"TBCOLL_FLIGHT_CALLS", flight ? "1024" : "0"}});
  std::vector<float> send(64, 1.0f), recv(64);
  for (auto _ : state) {
    call(*pair.rank0, Call::kAllReduce, send.data(), recv.data());
    benchmark::DoNotOptimize(recv.data());
  }
}

BENCHMARK_CAPTURE(BM_OneRank, all_reduce, Call::kAllReduce);
BENCHMARK_CAPTURE(BM_OneRank, all_gather, Call::kAllGather);
BENCHMARK_CAPTURE(BM_OneRank, reduce_scatter, Call::kReduceScatter);
BENCHMARK_CAPTURE(BM_OneRank, reduce, Call::kReduce);
BENCHMARK_CAPTURE(BM_OneRank, broadcast, Call::kBroadcast);
BENCHMARK_CAPTURE(BM_OneRank, barrier, Call::kBarrier);
BENCHMARK_CAPTURE(BM_OneRank, all_to_all, Call::kAllToAll);
BENCHMARK_CAPTURE(BM_OneRank, gather, Call::kGather);
BENCHMARK_CAPTURE(BM_OneRank, scatter, Call::kScatter);
BENCHMARK_CAPTURE(BM_Mirror, all_reduce, Call::kAllReduce, "");
BENCHMARK_CAPTURE(BM_Mirror, all_reduce_forced, Call::kAllReduce, "all_reduce:direct");
BENCHMARK_CAPTURE(BM_Mirror, all_gather, Call::kAllGather, "");
BENCHMARK_CAPTURE(BM_Mirror, reduce_scatter, Call::kReduceScatter, "");
BENCHMARK_CAPTURE(BM_Mirror, all_to_all, Call::kAllToAll, "");
BENCHMARK_CAPTURE(BM_Mirror, barrier, Call::kBarrier, "");
BENCHMARK_CAPTURE(BM_MirrorFastPath, all_reduce, true)->Name("MirrorFastPath/all_reduce");
BENCHMARK_CAPTURE(BM_MirrorFastPath, all_reduce_no_flight, false)->Name("MirrorFastPath/all_reduce_no_flight");

// The tuner's choice for an 8 B all_reduce of two ranks, by the cost model (every row priced).
void BM_Layer_TunerChoose(benchmark::State& state) {
  TunerConfig config;
  config.use_model = true;
  const Tuner tuner(config, 2, {}, {}, {});
  const algo::CallShape shape{OpKind::kAllReduce, 8, 2, DataType::kFloat32, 1};
  for (auto _ : state) benchmark::DoNotOptimize(&tuner.choose(shape));
}
BENCHMARK(BM_Layer_TunerChoose);

// An Exec for one call of two ranks and its wait for no requests: what every point-to-point call sets up.
void BM_Layer_ExecSetup(benchmark::State& state) {
  std::vector<transport::Endpoint*> peers(2, nullptr);
  std::vector<size_t> max_message(2, SIZE_MAX);
  algo::Scratch scratch;
  algo::RequestTable table;
  const algo::CallInfo info{"all_reduce", 2};
  transport::WaitPolicy wait(transport::WaitPolicy::Mode::kAuto, std::chrono::microseconds(50),
                             transport::SpinYield::kNever);
  for (auto _ : state) {
    algo::Exec exec(0, 2, peers, max_message, transport::Tag{1, 2}, deadline_after(60), wait, 256 << 10, scratch,
                    table, info);
    exec.wait_all();
  }
}
BENCHMARK(BM_Layer_ExecSetup);

void BM_Layer_Deadline(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(deadline_after(60));
}
BENCHMARK(BM_Layer_Deadline);

void BM_Layer_AsyncDrainIdle(benchmark::State& state) {
  AsyncQueue queue;
  for (auto _ : state) queue.drain();
}
BENCHMARK(BM_Layer_AsyncDrainIdle);

}  // namespace
}  // namespace tbcoll::bench

BENCHMARK_MAIN();
