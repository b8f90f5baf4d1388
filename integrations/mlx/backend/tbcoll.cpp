// tbcoll as an MLX distributed backend: a GroupImpl whose operations are tbcoll collectives on one
// tbcoll::Communicator per group (the world from the environment tbcoll-run sets; splits by Communicator::split).
// tbcoll chooses shared memory, TCP or RDMA per pair of ranks and reports a dead or silent peer within
// TBCOLL_TIMEOUT, naming it.
//
// Every operation is queued on the stream's CPU command encoder, as MLX's ring backend does, so it runs on the
// stream's thread in the order of the graph; a failure there becomes the stream's error, raised by the next
// mx.eval (MLX's scheduler catches it). One mutex per group keeps the communicator to one thread at a time
// (several streams, and split on the caller's thread).
//
// How each MLX dtype travels. tbcoll reduces i8, u8, i32, u32, i64, u64, f16, bf16, f32 and f64 itself; f16 and
// bf16 are added in f32 and rounded back at every step, as MLX's float16_t/bfloat16_t arithmetic (and so its ring
// backend) does. The rest:
//
//   dtype      sum                    max / min                     why it is exact
//   bool       u8 max (= or)          u8 max / min (or, and)        MLX's bool sum is a logical or
//   int16      i32 sum, narrowed      i32 max / min, narrowed       sums wrap modulo 2^16 either way, and
//   uint16     u32 sum, narrowed      u32 max / min, narrowed       widening keeps the order
//   complex64  f32 sum of 2n floats   all_gather, then MLX's own    componentwise sum; max/min compare
//                                     MaxOp/MinOp in rank order     whole complex numbers
//
// all_gather, send and recv move bytes (u8), whatever the dtype. sum_scatter is tbcoll's reduce_scatter.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <tbcoll/tbcoll.hpp>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/distributed/distributed_impl.h"
#include "mlx/distributed/reduction_ops.h"
#include "mlx/distributed/tbcoll/tbcoll.h"
#include "mlx/stream.h"
#include "mlx/utils.h"

namespace mlx::core::distributed::tbcoll {

namespace {

namespace tb = ::tbcoll;

enum class Reduce { kSum, kMax, kMin };

const char* name_of(Reduce reduce) {
  return reduce == Reduce::kSum ? "all_sum" : reduce == Reduce::kMax ? "all_max" : "all_min";
}

tb::ReduceOp op_of(Reduce reduce) {
  return reduce == Reduce::kSum ? tb::ReduceOp::kSum : reduce == Reduce::kMax ? tb::ReduceOp::kMax : tb::ReduceOp::kMin;
}

// The tbcoll dtype that carries an MLX dtype as it is, if there is one.
std::optional<tb::DataType> native_dtype(Dtype dtype) {
  switch (dtype) {
    case int8:
      return tb::DataType::kInt8;
    case uint8:
      return tb::DataType::kUint8;
    case int32:
      return tb::DataType::kInt32;
    case uint32:
      return tb::DataType::kUint32;
    case int64:
      return tb::DataType::kInt64;
    case uint64:
      return tb::DataType::kUint64;
    case float16:
      return tb::DataType::kFloat16;
    case bfloat16:
      return tb::DataType::kBfloat16;
    case float32:
      return tb::DataType::kFloat32;
    case float64:
      return tb::DataType::kFloat64;
    default:
      return std::nullopt;
  }
}

// A buffer of 16-bit integers widened to 32 bits (int16 -> i32, uint16 -> u32) and narrowed back: sums wrap
// modulo 2^16 alike, and max/min keep their order.
template <typename Narrow, typename Wide>
void widen(const void* from, Wide* to, size_t count) {
  const Narrow* narrow = static_cast<const Narrow*>(from);
  for (size_t i = 0; i < count; i++) to[i] = static_cast<Wide>(narrow[i]);
}
template <typename Narrow, typename Wide>
void narrow(const Wide* from, void* to, size_t count) {
  Narrow* narrowed = static_cast<Narrow*>(to);
  for (size_t i = 0; i < count; i++) narrowed[i] = static_cast<Narrow>(from[i]);
}

// What a group shares with the tasks it queued: they may run after the GroupImpl is gone.
struct Shared {
  explicit Shared(tb::Communicator comm) : comm(std::move(comm)) {}
  tb::Communicator comm;
  std::mutex mutex;
};

// Runs one operation on the communicator, on the stream's thread: its error, tbcoll's message naming the rank,
// the call and the peer, becomes the stream's error with the backend's tag.
template <typename F>
void run(Shared& shared, const char* what, F&& operation) {
  std::lock_guard<std::mutex> lock(shared.mutex);
  try {
    operation(shared.comm);
  } catch (const std::exception& error) {
    throw std::runtime_error(std::string("[tbcoll] ") + what + ": " + error.what());
  }
}

// all_reduce of a 16-bit integer buffer through 32 bits, in place on `data` (count elements).
template <typename Narrow, typename Wide>
void reduce_widened(tb::Communicator& comm, void* data, size_t count, tb::DataType wide, tb::ReduceOp op) {
  std::vector<Wide> buffer(count);
  widen<Narrow>(data, buffer.data(), count);
  comm.all_reduce(buffer.data(), buffer.data(), count, wide, op);
  narrow<Narrow>(buffer.data(), data, count);
}

// sum_scatter of a 16-bit integer buffer through 32 bits (input: size x count elements, output: count).
template <typename Narrow, typename Wide>
void sum_scatter_widened(tb::Communicator& comm, const void* input, void* output, size_t count, tb::DataType wide) {
  std::vector<Wide> in(count * comm.size()), out(count);
  widen<Narrow>(input, in.data(), in.size());
  comm.reduce_scatter(in.data(), out.data(), count, wide, tb::ReduceOp::kSum);
  narrow<Narrow>(out.data(), output, count);
}

// complex64 max/min: every rank's input gathered, then reduced here in rank order with MLX's own operators.
template <typename Op>
void reduce_gathered(tb::Communicator& comm, complex64_t* data, size_t count, Op op) {
  const size_t bytes = count * sizeof(complex64_t);
  std::vector<complex64_t> gathered(count * comm.size());
  comm.all_gather(data, gathered.data(), bytes, tb::DataType::kUint8);
  std::memcpy(data, gathered.data(), bytes);
  for (int r = 1; r < comm.size(); r++) op(gathered.data() + r * count, data, count);
}

[[noreturn]] void unsupported(Dtype dtype) {
  std::ostringstream message;
  message << "dtype " << dtype << " is not supported";
  throw std::invalid_argument(message.str());
}

// The reduction of `count` elements of `dtype` from `in` into `out` (the same buffer when MLX donated the input).
void all_reduce_of(tb::Communicator& comm, const void* in, void* out, size_t count, Dtype dtype, Reduce reduce) {
  if (auto native = native_dtype(dtype)) {
    comm.all_reduce(in, out, count, *native, op_of(reduce));
    return;
  }
  if (in != out && count > 0) std::memcpy(out, in, count * size_of(dtype));
  switch (dtype) {
    case bool_:  // sum and max: or; min: and (0/1 bytes)
      comm.all_reduce(out, out, count, tb::DataType::kUint8,
                      reduce == Reduce::kMin ? tb::ReduceOp::kMin : tb::ReduceOp::kMax);
      return;
    case int16:
      return reduce_widened<int16_t, int32_t>(comm, out, count, tb::DataType::kInt32, op_of(reduce));
    case uint16:
      return reduce_widened<uint16_t, uint32_t>(comm, out, count, tb::DataType::kUint32, op_of(reduce));
    case complex64: {
      auto* values = static_cast<complex64_t*>(out);
      if (reduce == Reduce::kSum) {
        comm.all_reduce(out, out, 2 * count, tb::DataType::kFloat32, tb::ReduceOp::kSum);
      } else if (reduce == Reduce::kMax) {
        reduce_gathered(comm, values, count, detail::MaxOp<complex64_t>());
      } else {
        reduce_gathered(comm, values, count, detail::MinOp<complex64_t>());
      }
      return;
    }
    default:
      unsupported(dtype);
  }
}

// sum_scatter: block r (count elements) of every rank's input, summed onto rank r.
void sum_scatter_of(tb::Communicator& comm, const void* input, void* output, size_t count, Dtype dtype) {
  if (auto native = native_dtype(dtype)) {
    comm.reduce_scatter(input, output, count, *native, tb::ReduceOp::kSum);
  } else if (dtype == bool_) {
    comm.reduce_scatter(input, output, count, tb::DataType::kUint8, tb::ReduceOp::kMax);
  } else if (dtype == complex64) {
    comm.reduce_scatter(input, output, 2 * count, tb::DataType::kFloat32, tb::ReduceOp::kSum);
  } else if (dtype == int16) {
    sum_scatter_widened<int16_t, int32_t>(comm, input, output, count, tb::DataType::kInt32);
  } else if (dtype == uint16) {
    sum_scatter_widened<uint16_t, uint32_t>(comm, input, output, count, tb::DataType::kUint32);
  } else {
    unsupported(dtype);
  }
}

class TbcollGroup : public GroupImpl {
 public:
  explicit TbcollGroup(tb::Communicator comm)
      : shared_(std::make_shared<Shared>(std::move(comm))), rank_(shared_->comm.rank()), size_(shared_->comm.size()) {}

  Stream communication_stream(StreamOrDevice s) override { return to_stream(s, Device::cpu); }

  int rank() override { return rank_; }

  int size() override { return size_; }

  // Collective over the group, on the caller's thread (as MPI_Comm_split in MLX's mpi backend). The operations
  // queued on the default CPU stream run first: a rank whose stream thread still had a collective to run would
  // otherwise wait in it for peers already in the split. key < 0 keeps the ranks' order. A negative color still
  // takes part (tbcoll's kSplitNoColor), so that the other ranks' split completes, and then fails here.
  std::shared_ptr<GroupImpl> split(int color, int key = -1) override {
    synchronize(default_stream(Device::cpu));
    std::lock_guard<std::mutex> lock(shared_->mutex);
    std::optional<tb::Communicator> part;
    try {
      part = shared_->comm.split(color < 0 ? tb::Communicator::kSplitNoColor : color, key < 0 ? rank_ : key);
    } catch (const std::exception& error) {
      throw std::runtime_error(std::string("[tbcoll] split: ") + error.what());
    }
    if (!part) {
      std::ostringstream message;
      message << "[tbcoll] split: color " << color << " is negative: every rank needs a group (color >= 0)";
      throw std::invalid_argument(message.str());
    }
    return std::make_shared<TbcollGroup>(std::move(*part));
  }

  void all_sum(const array& input, array& output, Stream stream) override {
    all_reduce(input, output, stream, Reduce::kSum);
  }

  void all_max(const array& input, array& output, Stream stream) override {
    all_reduce(input, output, stream, Reduce::kMax);
  }

  void all_min(const array& input, array& output, Stream stream) override {
    all_reduce(input, output, stream, Reduce::kMin);
  }

  void all_gather(const array& input, array& output, Stream stream) override {
    auto& encoder = cpu::get_command_encoder(stream);
    encoder.set_input_array(input);
    encoder.set_output_array(output);
    encoder.dispatch([shared = shared_, in = input.data<char>(), out = output.data<char>(), bytes = input.nbytes()] {
      run(*shared, "all_gather",
          [&](tb::Communicator& comm) { comm.all_gather(in, out, bytes, tb::DataType::kUint8); });
    });
  }

  void sum_scatter(const array& input, array& output, Stream stream) override {
    auto& encoder = cpu::get_command_encoder(stream);
    encoder.set_input_array(input);
    encoder.set_output_array(output);
    encoder.dispatch([shared = shared_, in = input.data<char>(), out = output.data<char>(), count = output.size(),
                      dtype = output.dtype()] {
      run(*shared, "sum_scatter", [&](tb::Communicator& comm) { sum_scatter_of(comm, in, out, count, dtype); });
    });
  }

  void send(const array& input, int dst, Stream stream) override {
    check_peer(dst, "send to");
    auto& encoder = cpu::get_command_encoder(stream);
    encoder.set_input_array(input);
    encoder.dispatch([shared = shared_, in = input.data<char>(), bytes = input.nbytes(), dst] {
      run(*shared, "send", [&](tb::Communicator& comm) { comm.send(in, bytes, tb::DataType::kUint8, dst); });
    });
  }

  void recv(array& out, int src, Stream stream) override {
    check_peer(src, "receive from");
    auto& encoder = cpu::get_command_encoder(stream);
    encoder.set_output_array(out);
    encoder.dispatch([shared = shared_, data = out.data<char>(), bytes = out.nbytes(), src] {
      run(*shared, "recv", [&](tb::Communicator& comm) { comm.recv(data, bytes, tb::DataType::kUint8, src); });
    });
  }

 private:
  // MLX checks the range; a rank sending to itself would wait for a message nobody posts: refused here, before
  // anything is queued.
  void check_peer(int peer, const char* what) const {
    if (peer == rank_ || peer < 0 || peer >= size_) {
      std::ostringstream message;
      message << "[tbcoll] rank " << rank_ << " cannot " << what << " rank " << peer << " (the group has " << size_
              << " ranks; sends and receives go between two different ranks)";
      throw std::invalid_argument(message.str());
    }
  }

  // MLX gives the output this rank's input when it donates it (in place), a fresh buffer otherwise.
  void all_reduce(const array& input, array& output, Stream stream, Reduce reduce) {
    auto& encoder = cpu::get_command_encoder(stream);
    encoder.set_input_array(input);
    encoder.set_output_array(output);
    encoder.dispatch([shared = shared_, in = input.data<char>(), out = output.data<char>(), count = input.size(),
                      dtype = output.dtype(), reduce] {
      run(*shared, name_of(reduce),
          [&](tb::Communicator& comm) { all_reduce_of(comm, in, out, count, dtype, reduce); });
    });
  }

  std::shared_ptr<Shared> shared_;
  int rank_;
  int size_;
};

// tbcoll-run sets these for every rank (and mpirun -x, or a hand-made environment, can too).
bool launched_by_tbcoll() {
  return std::getenv("TBCOLL_RANK") != nullptr || std::getenv("TBCOLL_WORLD_SIZE") != nullptr;
}

}  // namespace

bool is_available() { return true; }

std::shared_ptr<GroupImpl> init(bool strict /* = false */) {
  if (!launched_by_tbcoll()) {
    if (strict) {
      throw std::runtime_error(
          "[tbcoll] TBCOLL_RANK and TBCOLL_WORLD_SIZE are not set: start the ranks with tbcoll-run "
          "(tbcoll-run -n 2 python3 script.py, or --hostfile with mlx.launch's hostfile)");
    }
    return nullptr;
  }
  // The environment says this process is a rank of a tbcoll job: a communicator that cannot be built is an
  // error even when not strict (falling back to a group of one would let every rank compute alone).
  try {
    return std::make_shared<TbcollGroup>(tb::Communicator::init(tb::Config::from_env()));
  } catch (const std::exception& error) {
    throw std::runtime_error(std::string("[tbcoll] init: ") + error.what());
  }
}

}  // namespace mlx::core::distributed::tbcoll
