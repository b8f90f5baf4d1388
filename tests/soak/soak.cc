// tbcoll_soak: many random collectives on 3 ranks (threads) with 2 communicators each in use at once, every result
// checked against a reference. Each rank runs two lanes, each lane a thread with its own communicator (two inits
// on one store, distinct prefixes) doing its own random sequence of all_reduce, all_gather, reduce_scatter,
// reduce, broadcast, barrier and grouped send/recv, with random sizes (0 to ~130k elements, mostly below 2k), dtypes,
// ops, roots, in-place layouts, blocking or queued asynchronously (up to 3 in flight). Every `--reinit` ops a lane
// rebuilds its communicator with the next forced algorithm set (TBCOLL_ALGO through Config::algo: the tuner's
// choice, direct, ring, ...), so every row of the algorithm table runs; a call a forced algorithm cannot run is
// refused on every rank alike and counted.
//
// Inputs are small integers (products and sums stay exact in every dtype, bf16 included; the inputs of an average
// are multiples of the rank count and sum to a multiple of it squared), so every algorithm's result is exact and compared bit for bit. Ranks
// agree on when to stop with an all_reduce(max) of a stop flag every 64 ops (checked like the others).
//
//   tbcoll_soak [--transport shm,tcp,loopback] [--ops N] [--seconds S] [--seed X] [--ranks 3] [--reinit 5000]
//               [--max-count 131072] [--min-ops N]
// --ops and --seconds bound each transport's run (either, whichever comes first); prints the seed first, so a
// failure reproduces with --seed. Exit 0 only if nothing was wrong and every transport ran at least --min-ops.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tbcoll/error.hpp"
#include "tbcoll/store.hpp"
#include "tbcoll/tbcoll.hpp"

namespace {

using tbcoll::DataType;
using tbcoll::ReduceOp;

struct Options {
  std::vector<std::string> transports = {"shm"};
  uint64_t ops = 100000;
  double seconds = 0;  // 0: no limit
  uint64_t seed = 0;
  int ranks = 3;
  uint64_t reinit = 5000;
  uint64_t max_count = 131072;
  uint64_t min_ops = 0;
};

// Forced algorithm sets a lane cycles through ("" = the tuner's choice).
const char* const kFlavours[] = {"", "direct", "ring", "allreduce:ring,allgather:direct,broadcast:chain",
                                 "allreduce:direct,allgather:ring,broadcast:binomial"};
constexpr size_t kNumFlavours = sizeof(kFlavours) / sizeof(kFlavours[0]);

const DataType kDtypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
                            DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kFloat32,
                            DataType::kFloat64, DataType::kBfloat16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};

enum class Kind { kAllReduce, kAllGather, kReduceScatter, kReduce, kBroadcast, kBarrier, kSendRecv, kStopVote };
const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kAllGather: return "all_gather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kReduce: return "reduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kBarrier: return "barrier";
    case Kind::kSendRecv: return "send/recv";
    case Kind::kStopVote: return "stop vote (all_reduce)";
  }
  return "?";
}
constexpr int kNumKinds = 8;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// float -> IEEE half / bfloat16 for the small integers used here (exact; no rounding needed).
uint16_t to_half(float value) {
  if (value == 0) return std::signbit(value) ? 0x8000 : 0;
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t sign = (bits >> 16) & 0x8000;
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  const uint32_t mantissa = (bits >> 13) & 0x3ff;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent) << 10) | mantissa);
}
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

// Writes `value` (a small integer) as one element of dtype.
void store_value(double value, DataType dtype, uint8_t* out) {
  switch (dtype) {
    case DataType::kInt8: { int8_t v = static_cast<int8_t>(value); std::memcpy(out, &v, 1); break; }
    case DataType::kUint8: { uint8_t v = static_cast<uint8_t>(value); std::memcpy(out, &v, 1); break; }
    case DataType::kInt32: { int32_t v = static_cast<int32_t>(value); std::memcpy(out, &v, 4); break; }
    case DataType::kUint32: { uint32_t v = static_cast<uint32_t>(value); std::memcpy(out, &v, 4); break; }
    case DataType::kInt64: { int64_t v = static_cast<int64_t>(value); std::memcpy(out, &v, 8); break; }
    case DataType::kUint64: { uint64_t v = static_cast<uint64_t>(value); std::memcpy(out, &v, 8); break; }
    case DataType::kFloat16: { uint16_t v = to_half(static_cast<float>(value)); std::memcpy(out, &v, 2); break; }
    case DataType::kBfloat16: { uint16_t v = to_bf16(static_cast<float>(value)); std::memcpy(out, &v, 2); break; }
    case DataType::kFloat32: { float v = static_cast<float>(value); std::memcpy(out, &v, 4); break; }
    case DataType::kFloat64: std::memcpy(out, &value, 8); break;
  }
}

// One operation of a lane, with its buffers (kept until a queued call completed) and what it checks.
struct Op {
  uint64_t index = 0;
  Kind kind = Kind::kBarrier;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  int root = 0;
  bool in_place = false;
  bool async = false;
  std::vector<uint8_t> send, recv;
  tbcoll::Work work;
};

struct Totals {
  std::atomic<uint64_t> ops{0}, async_ops{0}, elements{0}, wrong{0}, refused{0}, reinits{0};
  std::atomic<uint64_t> by_kind[kNumKinds] = {};
};

std::mutex print_mutex;

class Lane {
 public:
  Lane(const Options& options, const std::string& transport, std::shared_ptr<tbcoll::Store> store, int rank,
       int lane, uint64_t seed, Totals& totals, std::chrono::steady_clock::time_point stop_at)
      : options_(options), transport_(transport), store_(std::move(store)), rank_(rank), lane_(lane), seed_(seed),
        totals_(totals), stop_at_(stop_at), schedule_(mix(seed ^ (0x1000u + static_cast<uint64_t>(lane)))) {}

  void run() {
    uint64_t index = 0;
    bool stop = false;
    while (!stop) {
      if (index % options_.reinit == 0) rebuild(index / options_.reinit);
      if (index % 64 == 63) {
        stop = vote(index);
      } else {
        issue(next_op(index));
      }
      ++index;
    }
    while (!pending_.empty()) finish();
  }

 private:
  // A value of element i of rank r's input for op `index`: a small integer (see the top of the file).
  double value(const Op& op, int r, size_t i) const {
    const uint64_t h = mix(seed_ ^ mix(op.index * 0x9e3779b1u + static_cast<uint64_t>(lane_) * 0x51ed27u) ^
                           mix(static_cast<uint64_t>(r) << 40 ^ i));
    const bool is_unsigned = tbcoll::is_unsigned(op.dtype);
    const bool reduction = op.kind == Kind::kAllReduce || op.kind == Kind::kReduceScatter || op.kind == Kind::kReduce;
    if (reduction && op.op == ReduceOp::kAvg) {  // rank deviations sum to zero: the average is `base`, exactly
      const uint64_t g = mix(seed_ ^ op.index ^ (i << 20) ^ 0xa5a5);
      const double base = is_unsigned ? 1.0 + static_cast<double>(g % 4) : static_cast<double>(g % 7) - 3;
      const double step = static_cast<double>((g >> 8) % 3) - 1;
      // Multiples of the rank count: an f16 average divides every input first (collectives.cc, divide_first),
      // which must be exact too.
      return (base + step * (r - (options_.ranks - 1) / 2)) * options_.ranks;
    }
    if (reduction && op.op == ReduceOp::kProd) return is_unsigned ? h % 3 : static_cast<double>(h % 5) - 2;
    return is_unsigned ? h % 5 : static_cast<double>(h % 9) - 4;
  }

  double reduced(const Op& op, size_t i) const {
    double acc = value(op, 0, i);
    for (int r = 1; r < options_.ranks; ++r) {
      const double v = value(op, r, i);
      switch (op.op) {
        case ReduceOp::kSum: case ReduceOp::kAvg: acc += v; break;
        case ReduceOp::kProd: acc *= v; break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        case ReduceOp::kMin: acc = std::min(acc, v); break;
      }
    }
    return op.op == ReduceOp::kAvg ? acc / options_.ranks : acc;
  }

  void rebuild(uint64_t generation) {
    while (!pending_.empty()) finish();
    comm_.reset();
    flavour_ = kFlavours[(generation + static_cast<uint64_t>(lane_)) % kNumFlavours];
    tbcoll::Config config;
    config.rank = rank_;
    config.world_size = options_.ranks;
    config.store = store_;
    config.prefix = "soak/" + transport_ + "/" + std::to_string(lane_) + "/" + std::to_string(generation);
    config.transport = transport_;
    config.algo = flavour_;
    config.timeout_s = 60;
    comm_ = std::make_unique<tbcoll::Communicator>(tbcoll::Communicator::init(config));
    if (rank_ == 0) totals_.reinits++;
  }

  Op next_op(uint64_t index) {
    Op op;
    op.index = index;
    const uint64_t pick = schedule_() % 100;
    op.kind = pick < 30 ? Kind::kAllReduce
              : pick < 45 ? Kind::kAllGather
              : pick < 60 ? Kind::kReduceScatter
              : pick < 70 ? Kind::kReduce
              : pick < 85 ? Kind::kBroadcast
              : pick < 90 ? Kind::kBarrier
                          : Kind::kSendRecv;
    op.dtype = kDtypes[schedule_() % (sizeof(kDtypes) / sizeof(kDtypes[0]))];
    op.op = kOps[schedule_() % (sizeof(kOps) / sizeof(kOps[0]))];
    const uint64_t size_pick = schedule_();
    // Skewed small, as inference traffic is: 10% 0..3 elements, 87% up to ~2k, 3% up to ~130k.
    const uint64_t size_class = size_pick % 100, bits = size_pick / 100;
    op.count = size_class < 10   ? bits % 4
               : size_class < 97 ? (size_t{1} << (bits % 12)) + bits / 16 % 100
                                 : (size_t{1} << (12 + bits % 6)) + bits / 16 % 1000;
    op.count = std::min<size_t>(op.count, options_.max_count);
    op.root = static_cast<int>(schedule_() % static_cast<uint64_t>(options_.ranks));
    op.in_place = schedule_() % 5 == 0;
    op.async = op.kind != Kind::kSendRecv && schedule_() % 5 < 2;
    return op;
  }

  // Fills the buffers, calls, and checks now (blocking) or once the queued call completes.
  void issue(Op op) {
    const size_t size = tbcoll::dtype_size(op.dtype), n = static_cast<size_t>(options_.ranks);
    auto fill = [&](std::vector<uint8_t>& buffer, size_t offset, int r, size_t first, size_t count) {
      for (size_t i = 0; i < count; ++i) store_value(value(op, r, first + i), op.dtype, &buffer[(offset + i) * size]);
    };
    auto owned = std::make_unique<Op>(std::move(op));
    Op& o = *owned;
    tbcoll::Communicator& c = *comm_;
    const size_t count = o.count;
    try {
      switch (o.kind) {
        case Kind::kAllReduce:
        case Kind::kStopVote:
          o.send.resize(count * size);
          fill(o.send, 0, rank_, 0, count);
          if (o.in_place) o.recv = o.send;
          else o.recv.assign(count * size, 0xab);
          if (o.async) o.work = c.all_reduce_async(o.in_place ? o.recv.data() : o.send.data(), o.recv.data(), count, o.dtype, o.op);
          else c.all_reduce(o.in_place ? o.recv.data() : o.send.data(), o.recv.data(), count, o.dtype, o.op);
          break;
        case Kind::kAllGather: {
          o.recv.assign(n * count * size, 0xab);
          const void* send = o.recv.data() + static_cast<size_t>(rank_) * count * size;
          if (o.in_place) {
            fill(o.recv, static_cast<size_t>(rank_) * count, rank_, 0, count);
          } else {
            o.send.resize(count * size);
            fill(o.send, 0, rank_, 0, count);
            send = o.send.data();
          }
          if (o.async) o.work = c.all_gather_async(send, o.recv.data(), count, o.dtype);
          else c.all_gather(send, o.recv.data(), count, o.dtype);
          break;
        }
        case Kind::kReduceScatter: {
          o.send.resize(n * count * size);
          fill(o.send, 0, rank_, 0, n * count);
          void* recv = o.send.data() + static_cast<size_t>(rank_) * count * size;
          if (!o.in_place) {
            o.recv.assign(count * size, 0xab);
            recv = o.recv.data();
          }
          if (o.async) o.work = c.reduce_scatter_async(o.send.data(), recv, count, o.dtype, o.op);
          else c.reduce_scatter(o.send.data(), recv, count, o.dtype, o.op);
          break;
        }
        case Kind::kReduce:
          o.send.resize(count * size);
          fill(o.send, 0, rank_, 0, count);
          o.recv.assign(count * size, 0xab);
          if (o.async) o.work = c.reduce_async(o.send.data(), o.recv.data(), count, o.dtype, o.op, o.root);
          else c.reduce(o.send.data(), o.recv.data(), count, o.dtype, o.op, o.root);
          break;
        case Kind::kBroadcast:
          o.recv.assign(count * size, 0xab);
          if (rank_ == o.root) {
            o.send.resize(count * size);
            fill(o.in_place ? o.recv : o.send, 0, rank_, 0, count);
          }
          {
            const void* send = o.in_place || rank_ != o.root ? o.recv.data() : o.send.data();
            if (o.async) o.work = c.broadcast_async(send, o.recv.data(), count, o.dtype, o.root);
            else c.broadcast(send, o.recv.data(), count, o.dtype, o.root);
          }
          break;
        case Kind::kBarrier:
          if (o.async) o.work = c.barrier_async();
          else c.barrier();
          break;
        case Kind::kSendRecv: {
          o.send.resize(count * size);
          fill(o.send, 0, rank_, 0, count);
          o.recv.assign(count * size, 0xab);
          const int next = (rank_ + 1) % options_.ranks, prev = (rank_ + options_.ranks - 1) % options_.ranks;
          c.group_start();
          c.send(o.send.data(), count, o.dtype, next);
          c.recv(o.recv.data(), count, o.dtype, prev);
          c.group_end();
          break;
        }
      }
    } catch (const tbcoll::Error& error) {
      // A forced algorithm that cannot run this call refuses it before anything moves, on every rank alike.
      const bool refusal = (error.code() == tbcollInvalidUsage || error.code() == tbcollInvalidArgument) &&
                           !flavour_.empty() && !comm_->broken();
      if (!refusal) fail(o, error.what());
      if (rank_ == 0) totals_.refused++;
      return;
    }
    if (rank_ == 0) {
      totals_.ops++;
      totals_.by_kind[static_cast<int>(o.kind)]++;
      if (o.async) totals_.async_ops++;
    }
    if (!o.async) return check(o);
    pending_.push_back(std::move(owned));
    if (pending_.size() > 3) finish();
  }

  void finish() {
    std::unique_ptr<Op> op = std::move(pending_.front());
    pending_.pop_front();
    try {
      op->work.wait();
    } catch (const tbcoll::Error& error) {
      fail(*op, error.what());
    }
    check(*op);
  }

  bool vote(uint64_t index) {
    while (!pending_.empty()) finish();
    Op op;
    op.index = index;
    op.kind = Kind::kStopVote;
    op.dtype = DataType::kInt32;
    op.op = ReduceOp::kMax;
    op.count = 1;
    const bool mine = (options_.ops != 0 && index + 1 >= options_.ops) ||
                      (options_.seconds > 0 && std::chrono::steady_clock::now() >= stop_at_);
    auto owned = std::make_unique<Op>(op);
    int32_t flag = mine ? 1 : 0, result = -1;
    try {
      comm_->all_reduce(&flag, &result, 1, DataType::kInt32, ReduceOp::kMax);
    } catch (const tbcoll::Error& error) {
      fail(op, error.what());
    }
    if (rank_ == 0) {
      totals_.ops++;
      totals_.by_kind[static_cast<int>(Kind::kStopVote)]++;
    }
    if (result != 0 && result != 1) report(op, 0, "a stop flag of 0 or 1", std::to_string(result));
    if (mine && result != 1) report(op, 0, "1 (this rank voted to stop)", std::to_string(result));
    return result == 1;
  }

  void expect(const Op& op, const uint8_t* got, size_t element, double expected) {
    const size_t size = tbcoll::dtype_size(op.dtype);
    uint8_t want[8];
    store_value(expected, op.dtype, want);
    if (std::memcmp(got + element * size, want, size) != 0) {
      char have[32];
      std::string hex;
      for (size_t b = 0; b < size; ++b) {
        std::snprintf(have, sizeof(have), "%02x", got[element * size + b]);
        hex += have;
      }
      report(op, element, std::to_string(expected), "bytes " + hex);
    }
  }

  void expect_untouched(const Op& op, const std::vector<uint8_t>& buffer) {
    for (size_t b = 0; b < buffer.size(); ++b) {
      if (buffer[b] != 0xab) return report(op, b, "recv untouched off the root", "written");
    }
  }

  void check(const Op& op) {
    const size_t n = static_cast<size_t>(options_.ranks), count = op.count, size = tbcoll::dtype_size(op.dtype);
    uint64_t checked = 0;
    switch (op.kind) {
      case Kind::kAllReduce:
      case Kind::kStopVote:
        for (size_t i = 0; i < count; ++i) expect(op, op.recv.data(), i, reduced(op, i));
        checked = count;
        break;
      case Kind::kAllGather:
        for (size_t r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) expect(op, op.recv.data(), r * count + i, value(op, static_cast<int>(r), i));
        }
        checked = n * count;
        break;
      case Kind::kReduceScatter: {
        const uint8_t* result = op.in_place ? op.send.data() + static_cast<size_t>(rank_) * count * size : op.recv.data();
        for (size_t i = 0; i < count; ++i) expect(op, result, i, reduced(op, static_cast<size_t>(rank_) * count + i));
        checked = count;
        break;
      }
      case Kind::kReduce:
        if (rank_ == op.root) {
          for (size_t i = 0; i < count; ++i) expect(op, op.recv.data(), i, reduced(op, i));
          checked = count;
        } else {
          expect_untouched(op, op.recv);
        }
        break;
      case Kind::kBroadcast:
        for (size_t i = 0; i < count; ++i) expect(op, op.recv.data(), i, value(op, op.root, i));
        checked = count;
        break;
      case Kind::kBarrier:
        break;
      case Kind::kSendRecv: {
        const int prev = (rank_ + options_.ranks - 1) % options_.ranks;
        for (size_t i = 0; i < count; ++i) expect(op, op.recv.data(), i, value(op, prev, i));
        checked = count;
        break;
      }
    }
    totals_.elements += checked;
  }

  void report(const Op& op, size_t element, const std::string& expected, const std::string& got) {
    const uint64_t wrong = ++totals_.wrong;
    // The first wrong element of a call, for the first 20 calls with one.
    if (reported_calls_ >= 20 || (reported_any_ && reported_op_ == op.index)) return;
    reported_any_ = true;
    reported_op_ = op.index;
    if (++reported_calls_ > 20 || wrong == 0) return;
    std::lock_guard<std::mutex> lock(print_mutex);
    std::printf("soak: WRONG [%s] rank %d lane %d op %" PRIu64 ": %s %s %s count %zu root %d%s%s algo \"%s\": element "
                "%zu expected %s, got %s\n",
                transport_.c_str(), rank_, lane_, op.index, kind_name(op.kind), tbcoll::to_string(op.dtype).c_str(),
                tbcoll::to_string(op.op).c_str(), op.count, op.root, op.in_place ? " in place" : "",
                op.async ? " async" : "", flavour_.c_str(), element, expected.c_str(), got.c_str());
    std::fflush(stdout);
  }

  [[noreturn]] void fail(const Op& op, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(print_mutex);
      std::printf("soak: FAIL [%s] rank %d lane %d op %" PRIu64 " (%s %s %s count %zu root %d%s%s algo \"%s\"), seed "
                  "%" PRIu64 ": %s\n",
                  transport_.c_str(), rank_, lane_, op.index, kind_name(op.kind),
                  tbcoll::to_string(op.dtype).c_str(), tbcoll::to_string(op.op).c_str(), op.count, op.root,
                  op.in_place ? " in place" : "", op.async ? " async" : "", flavour_.c_str(), seed_, why.c_str());
      std::fflush(stdout);
    }
    std::_Exit(1);  // the other ranks would wait out their deadline
  }

  const Options& options_;
  const std::string transport_;
  std::shared_ptr<tbcoll::Store> store_;
  const int rank_, lane_;
  const uint64_t seed_;
  Totals& totals_;
  const std::chrono::steady_clock::time_point stop_at_;
  std::mt19937_64 schedule_;  // the same sequence on every rank of the lane
  std::string flavour_;
  std::unique_ptr<tbcoll::Communicator> comm_;
  std::deque<std::unique_ptr<Op>> pending_;
  bool reported_any_ = false;
  uint64_t reported_op_ = 0;
  static inline std::atomic<int> reported_calls_{0};
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "tbcoll_soak: %s\nusage: tbcoll_soak [--transport shm,tcp,loopback] [--ops N] [--seconds S] "
               "[--seed X] [--ranks N] [--reinit N] [--max-count N] [--min-ops N]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  options.seed = std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
    const std::string value = argv[++i];
    char* end = nullptr;
    const unsigned long long number = std::strtoull(value.c_str(), &end, 0);
    const bool numeric = *end == '\0' && !value.empty();
    if (arg == "--transport") {
      options.transports.clear();
      for (size_t at = 0; at <= value.size();) {
        const size_t comma = std::min(value.find(',', at), value.size());
        options.transports.push_back(value.substr(at, comma - at));
        at = comma + 1;
      }
    } else if (arg == "--seconds") {
      options.seconds = std::atof(value.c_str());
    } else if (!numeric) {
      usage((arg + " needs a number").c_str());
    } else if (arg == "--ops") {
      options.ops = number;
    } else if (arg == "--seed") {
      options.seed = number;
    } else if (arg == "--ranks") {
      options.ranks = static_cast<int>(number);
    } else if (arg == "--reinit") {
      options.reinit = std::max<unsigned long long>(number, 64);
    } else if (arg == "--max-count") {
      options.max_count = number;
    } else if (arg == "--min-ops") {
      options.min_ops = number;
    } else {
      usage(("unknown option " + arg).c_str());
    }
  }
  if (options.ranks < 1 || options.ranks % 2 == 0) usage("--ranks must be odd (averages are built to be exact)");
  if (options.ops == 0 && options.seconds <= 0) usage("give --ops or --seconds");
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  std::printf("soak: seed %" PRIu64 " (rerun with --seed %" PRIu64 "), %d ranks x 2 communicators\n", options.seed,
              options.seed, options.ranks);
  std::fflush(stdout);
  bool ok = true;
  for (const std::string& transport : options.transports) {
    Totals totals;
    const auto start = std::chrono::steady_clock::now();
    const auto stop_at = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(options.seconds));
    auto store = tbcoll::make_in_memory_store();
    std::vector<std::unique_ptr<Lane>> lanes;
    std::vector<std::thread> threads;
    for (int rank = 0; rank < options.ranks; ++rank) {
      for (int lane = 0; lane < 2; ++lane) {
        lanes.push_back(std::make_unique<Lane>(options, transport, store, rank, lane, options.seed, totals, stop_at));
      }
    }
    for (auto& lane : lanes) threads.emplace_back([&lane] { lane->run(); });
    for (auto& thread : threads) thread.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("soak [%s]: %" PRIu64 " collectives (%" PRIu64 " async) in %.1f s (%.0f/s), %" PRIu64
                " elements checked, %" PRIu64 " refused by a forced algorithm, %" PRIu64 " communicators, %" PRIu64
                " wrong\n",
                transport.c_str(), totals.ops.load(), totals.async_ops.load(), seconds, totals.ops / seconds,
                totals.elements.load(), totals.refused.load(), totals.reinits.load(), totals.wrong.load());
    std::printf("soak [%s]: by kind:", transport.c_str());
    for (int k = 0; k < kNumKinds; ++k) std::printf(" %s %" PRIu64, kind_name(static_cast<Kind>(k)), totals.by_kind[k].load());
    std::printf("\n");
    if (totals.wrong != 0 || totals.ops < options.min_ops) ok = false;
  }
  std::printf("soak: %s (seed %" PRIu64 ")\n", ok ? "PASS" : "FAIL", options.seed);
  return ok ? 0 : 1;
}
