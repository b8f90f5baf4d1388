// The collective calls: argument checks, tuner, schedule, and errors that name rank, peer and operation.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "algorithms/algorithms.h"
#include "common/time.h"
#include "communicator.h"
#include "reduce/reduce.h"

namespace tbcoll {

[[noreturn]] void rethrow_with_context(const Error& error, const std::string& what) {
  std::string message = fmt::format("{} failed: {}", what, error.what());
  switch (error.code()) {
    case tbcollTimeout: throw TimeoutError(message);
    case tbcollSystemError: throw IoError(message);
    case tbcollRemoteError: throw RemoteError(message);
    case tbcollInvalidArgument: throw InvalidArgument(message);
    case tbcollInvalidUsage: throw InvalidUsage(message);
    default: throw Error(error.code(), message);
  }
}

namespace {

void check_dtype(int rank, const char* op, DataType dtype) {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= kNumDataTypes) {
    throw InvalidArgument(fmt::format("rank {}: {}: invalid dtype {} (valid: 0..{})", rank, op,
                                      static_cast<int>(dtype), kNumDataTypes - 1));
  }
}

void check_op(int rank, const char* name, ReduceOp op) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= kNumReduceOps) {
    throw InvalidArgument(fmt::format("rank {}: {}: invalid reduction op {} (valid: 0..{})", rank, name,
                                      static_cast<int>(op), kNumReduceOps - 1));
  }
}

// count * elem_size * factor in bytes, or InvalidArgument when it overflows.
size_t checked_bytes(int rank, const char* op, size_t count, DataType dtype, size_t factor) {
  // Overflow-checked multiplications: no 64-bit divisions on the path of every call.
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, dtype_size(dtype), &bytes) || __builtin_mul_overflow(bytes, factor, &bytes) ||
      bytes > static_cast<size_t>(PTRDIFF_MAX)) {
    throw InvalidArgument(fmt::format("rank {}: {}: count {} of {} overflows the address space", rank, op, count,
                                      to_string(dtype)));
  }
  return bytes;
}

// Addresses below this are never a buffer: the first page (4 KiB, or the start of a larger one) is not mapped.
// Ports from MPI pass MPI_IN_PLACE there (the address 1 in Open MPI and MPICH).
constexpr uintptr_t kFirstPageEnd = 4096;

void check_buffer(int rank, const char* op, const char* which, const void* buf, size_t count) {
  if (buf == nullptr && count > 0) {
    throw InvalidArgument(fmt::format("rank {}: {}: {} buffer is null with count {}", rank, op, which, count));
  }
  if (buf != nullptr && reinterpret_cast<uintptr_t>(buf) < kFirstPageEnd) {
    throw InvalidArgument(fmt::format(
        "rank {}: {}: {} buffer {} points into the first page: not a buffer (MPI_IN_PLACE? tbcoll has no such "
        "marker: in place means send == recv, for all_gather send == recv + rank * count, for reduce_scatter "
        "recv == send + rank * count)", rank, op, which, buf));
  }
}

// Buffers that overlap in any way other than the collective's in-place layout: the algorithms read inputs
// after writing outputs, and ranks would end with different, wrong results.
void check_overlap(int rank, const char* op, const void* send, size_t send_bytes, const void* recv,
                   size_t recv_bytes, bool in_place, const char* layout) {
  if (in_place || send == nullptr || recv == nullptr || send_bytes == 0 || recv_bytes == 0) return;
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  if (s < r + recv_bytes && r < s + send_bytes) {
    throw InvalidArgument(fmt::format("rank {}: {}: send and recv buffers overlap without being in place (in place "
                                      "means {})", rank, op, layout));
  }
}

void check_rank(int rank, int size, const char* op, const char* which, int value) {
  if (value < 0 || value >= size) {
    throw InvalidArgument(fmt::format("rank {}: {}: {} {} out of range for world size {}", rank, op, which, value, size));
  }
}

// An f16 sum overflows at 65504 long before the average of the same inputs does. So an f16 average divides every
// input by the world size first (rounded once, to nearest even) and sums the quotients, as NCCL pre-multiplies
// its floating-point averages; the other types sum, then divide once.
// For such an average: writes the quotients of send's `elements` to `into` (to `storage` if null), makes op a sum
// and returns the quotients; otherwise returns send.
const void* divide_first(const void* send, void* into, std::vector<uint8_t>& storage, size_t elements,
                         DataType dtype, ReduceOp& op, int world_size) {
  if (op != ReduceOp::kAvg || dtype != DataType::kFloat16) return send;
  if (into == nullptr) {
    storage.resize(elements * dtype_size(dtype));
    into = storage.data();
  }
  reduce::divide(into, send, elements, dtype, world_size);
  op = ReduceOp::kSum;
  return into;
}

}  // namespace

Communicator::Impl::Checked Communicator::Impl::check_arguments(OpKind kind, const void* send, const void* recv,
                                                                size_t count,
                                           DataType dtype, ReduceOp op, int root) const {
  const char* name = op_kind_name(kind);
  const bool reduces = kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter || kind == OpKind::kReduce;
  const bool rooted = kind == OpKind::kReduce || kind == OpKind::kBroadcast || kind == OpKind::kGather ||
                      kind == OpKind::kScatter;
  const bool per_rank = kind == OpKind::kAllGather || kind == OpKind::kReduceScatter || kind == OpKind::kAllToAll ||
                        kind == OpKind::kGather || kind == OpKind::kScatter;
  check_dtype(rank, name, dtype);
  if (reduces) check_op(rank, name, op);
  if (rooted) check_rank(rank, size, name, "root", root);
  const size_t bytes = checked_bytes(rank, name, count, dtype, per_rank ? static_cast<size_t>(size) : 1);
  const bool reads_send = (kind != OpKind::kBroadcast && kind != OpKind::kScatter) || rank == root;
  const bool writes_recv = (kind != OpKind::kReduce && kind != OpKind::kGather) || rank == root;
  if (reads_send) check_buffer(rank, name, "send", send, count);
  if (writes_recv) check_buffer(rank, name, "recv", recv, count);
  if (reads_send && writes_recv) {
    const size_t block = bytes / (per_rank ? static_cast<size_t>(size) : 1);  // one rank's part
    const size_t mine = block * static_cast<size_t>(rank);
    const auto* s = static_cast<const uint8_t*>(send);
    const auto* r = static_cast<const uint8_t*>(recv);
    const size_t roots = block * static_cast<size_t>(root);  // the root's block (gather, scatter)
    if (kind == OpKind::kAllGather) {
      check_overlap(rank, name, s, block, r, bytes, s == r + mine, "send == recv + rank * count");
    } else if (kind == OpKind::kGather) {
      check_overlap(rank, name, s, block, r, bytes, s == r + roots, "send == recv + root * count, at the root");
    } else if (kind == OpKind::kScatter) {
      check_overlap(rank, name, s, bytes, r, block, r == s + roots, "recv == send + root * count, at the root");
    } else if (kind == OpKind::kReduceScatter) {
      check_overlap(rank, name, s, bytes, r, block, r == s + mine, "recv == send + rank * count");
    } else {
      check_overlap(rank, name, s, bytes, r, bytes, s == r, "send == recv");
    }
  }
  const algo::CallShape shape{kind, bytes, size, dtype, hosts};
  if (size == 1) return {bytes, nullptr, shape};
  // A forced algorithm that cannot run this call (oneshot beyond its slots, say) is a bad argument too: said
  // here, before anything is queued or sent, naming the call.
  try {
    return {bytes, &tuner.choose(shape), shape};
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(fmt::format("rank {}: {}: {}", rank, name, error.what()));
  }
}

Communicator::Impl::AllToAllvLayout Communicator::Impl::check_all_to_allv(
    const void* send, const void* recv, const size_t* send_counts, const size_t* send_displs,
    const size_t* recv_counts, const size_t* recv_displs, DataType dtype) const {
  const char* name = "all_to_allv";
  check_dtype(rank, name, dtype);
  const bool in_place = send == recv;
  if (recv_counts == nullptr) throw InvalidArgument(fmt::format("rank {}: {}: recv_counts is null", rank, name));
  if (send_counts == nullptr && !in_place) {
    throw InvalidArgument(fmt::format("rank {}: {}: send_counts is null (allowed in place only, send == recv)", rank,
                                      name));
  }
  const size_t n = static_cast<size_t>(size);
  AllToAllvLayout layout;
  layout.recv_counts.assign(recv_counts, recv_counts + n);
  // Null displacements: the blocks packed in rank order.
  auto displacements = [&](const size_t* given, const std::vector<size_t>& counts) {
    std::vector<size_t> out(n);
    if (given != nullptr) return std::vector<size_t>(given, given + n);
    size_t at = 0;
    for (size_t p = 0; p < n; ++p) {
      out[p] = at;
      at += counts[p];  // wraps only for counts that checked_extent then refuses
    }
    return out;
  };
  layout.recv_displs = displacements(recv_displs, layout.recv_counts);
  if (in_place) {
    // The recv counts and displacements serve both sides; send's, if given, must say the same.
    for (size_t p = 0; p < n; ++p) {
      if ((send_counts != nullptr && send_counts[p] != layout.recv_counts[p]) ||
          (send_displs != nullptr && send_displs[p] != layout.recv_displs[p])) {
        throw InvalidArgument(fmt::format("rank {}: {}: in place (send == recv), the recv counts and displacements "
                                          "serve both sides, but send_{}[{}] differs from recv's (pass null or the "
                                          "same)", rank, name, send_counts != nullptr && send_counts[p] !=
                                          layout.recv_counts[p] ? "counts" : "displs", p));
      }
    }
    layout.send_counts = layout.recv_counts;
    layout.send_displs = layout.recv_displs;
  } else {
    layout.send_counts.assign(send_counts, send_counts + n);
    layout.send_displs = displacements(send_displs, layout.send_counts);
  }
  if (layout.send_counts[rank] != layout.recv_counts[rank]) {
    throw InvalidArgument(fmt::format("rank {}: {}: send_counts[{}] = {} but recv_counts[{}] = {} (this rank's block "
                                      "to itself)", rank, name, rank, layout.send_counts[rank], rank,
                                      layout.recv_counts[rank]));
  }
  // Each side's extent (from the buffer's start to the end of its last block) in bytes, overflow-checked.
  auto extent = [&](const char* side, const std::vector<size_t>& counts, const std::vector<size_t>& displs,
                    size_t* elements) {
    size_t end = 0;
    *elements = 0;
    for (size_t p = 0; p < n; ++p) {
      size_t block_end = 0;
      if (__builtin_add_overflow(displs[p], counts[p], &block_end) ||
          __builtin_add_overflow(*elements, counts[p], elements)) {
        throw InvalidArgument(fmt::format("rank {}: {}: {}_displs[{}] + {}_counts[{}] overflows", rank, name, side, p,
                                          side, p));
      }
      if (counts[p] > 0) end = std::max(end, block_end);
    }
    return checked_bytes(rank, name, end, dtype, 1);
  };
  size_t received = 0;
  const size_t send_bytes = extent("send", layout.send_counts, layout.send_displs, &layout.sent);
  const size_t recv_bytes = extent("recv", layout.recv_counts, layout.recv_displs, &received);
  check_buffer(rank, name, "send", send, layout.sent);
  check_buffer(rank, name, "recv", recv, received);
  check_overlap(rank, name, send, send_bytes, recv, recv_bytes, in_place,
                "send == recv, the recv counts and displacements serving both sides");
  // Received blocks that overlap would leave whichever arrived last.
  std::vector<std::pair<size_t, size_t>> blocks;  // (displacement, peer) of the non-empty ones
  for (size_t p = 0; p < n; ++p) {
    if (layout.recv_counts[p] > 0) blocks.push_back({layout.recv_displs[p], p});
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    const size_t before = blocks[i - 1].second, after = blocks[i].second;
    if (blocks[i - 1].first + layout.recv_counts[before] > blocks[i].first) {
      throw InvalidArgument(fmt::format("rank {}: {}: the recv blocks of peers {} and {} overlap (recv_displs {} and "
                                        "{}, recv_counts {} and {})", rank, name, before, after,
                                        layout.recv_displs[before], layout.recv_displs[after],
                                        layout.recv_counts[before], layout.recv_counts[after]));
    }
  }
  layout.choice = nullptr;
  if (size == 1) return layout;
  try {
    layout.choice = &tuner.choose({OpKind::kAllToAllv, 0, size, dtype});
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(fmt::format("rank {}: {}: {}", rank, name, error.what()));
  }
  return layout;
}

Communicator::Impl::Checked Communicator::Impl::check_or_refuse(OpKind kind, const void* send, const void* recv,
                                                                size_t count, DataType dtype, ReduceOp op, int root) {
  try {
    return check_arguments(kind, send, recv, count, dtype, op, root);
  } catch (const InvalidArgument& error) {
    if (size > 1 && !broken) {
      async.drain();  // asynchronous submissions refuse on the caller's thread: the queued calls go first
      notices.publish(Notices::Kind::kRefused, ++collective_seq, error.what());
    }
    throw;
  }
}

namespace {

// A collective's tag counts the calls (send/recv tags have the top bit set; a group's run has none).
uint64_t collective_number(const transport::Tag& tag) { return (tag.tag >> 63) == 0 ? tag.tag : 0; }

}  // namespace

template <typename Body>
void Communicator::Impl::run(const algo::CallInfo& call, transport::Tag tag, unsigned schedule, Body&& body) {
  const uint64_t number = collective_number(tag);
  guard(call, number, [&] {
    // For peers waiting in a fast-path call (and it checks for messages of earlier calls never received: an
    // error that breaks the communicator, as any mismatch). Not send/recv: their tags count per peer pair, so
    // another rank's receive could take ours for its own call.
    if (fast_path != nullptr && (tag.tag >> 63) == 0) fast_path->announce(tag);
    if (schedule != 0) tag.meta = with_schedule(tag.meta, schedule);
    const TunerConfig& tuning = tuner.config();
    const Deadline deadline = deadline_after(config.timeout_s);
    algo::Exec exec(rank, size, peers, max_message, tag, deadline, tuning.spin, spin_yield, tuning.chunk_bytes,
                    scratch, request_table, call, &host_of);
    exec.set_watch([this, number, deadline] { notices.check(number, number != 0, deadline); });
    body(exec);
  });
}

void Communicator::Impl::execute(const algo::CallInfo& call, transport::Tag tag, const Choice& choice,
                                 const algo::Args& args) {
  if (choice.fast_path_index < 0) {
    const bool rooted = call.root >= 0 && (tag.tag >> 63) == 0;  // broadcast and reduce
    run(call, tag, choice.schedule, [&](algo::Exec& exec) {
      // In a rooted call some ranks only send (a broadcast's root, a reduce's leaves), so no receive of theirs
      // checks the call's signature: ranks that named different roots each returned success with different
      // data. Every rank also receives an empty message from rank - 1 and sends one to rank + 1, posted before
      // the schedule's own (so they pair up on every link, in order): a rank whose neighbour named another root
      // is told by the signature, in this call. Costs one empty message per rank, sent at the start.
      if (rooted) {
        static const uint8_t token = 0;
        exec.irecv((rank + size - 1) % size, nullptr, 0);
        exec.isend((rank + 1) % size, &token, 0);
      }
      choice.run(exec, args);
      exec.wait_all();
    });
    return;
  }
  guard(call, tag.tag, [&] {  // the transport's fast path: no requests, no Exec
    const Deadline deadline = deadline_after(config.timeout_s);
    transport::CollectiveArgs fast{args.send, args.recv, args.count, args.dtype, args.op, args.root, tag, deadline,
                                   tuner.config().spin, spin_yield,
                                   [this, &tag, deadline] {
                                     notices.check(tag.tag, true, deadline);
                                     if (p2p_in_flight) p2p_in_flight->sweep();  // pending isend/irecv move
                                   }};
    fast_path->run(static_cast<size_t>(choice.fast_path_index), fast);
  });
}

void Communicator::Impl::execute_checked(const algo::CallInfo& call, transport::Tag tag, const Checked& checked,
                                         const algo::Args& args) {
  if (!tuner.config().measure) {
    execute(call, tag, *checked.choice, args);
    return;
  }
  const MeasuredChoices::Pick pick = measured.pick(checked.shape, *checked.choice, tuner);
  if (pick.trial < 0) {
    execute(call, tag, *pick.choice, args);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  execute(call, tag, *pick.choice, args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> times;
  if (!measured.record(checked.shape, pick, seconds, &times)) return;
  // The octave's last trial: the slowest rank's time of each, by an all_reduce the model picks (never measured),
  // in place on the vector every rank holds. A call of its own: it takes the next call number on every rank.
  const size_t n = times.size();
  const algo::CallInfo what{"all_reduce (TBCOLL_TUNER=measure: the ranks' times of the trial calls)", n,
                            DataType::kFloat64, ReduceOp::kMax, true};
  const algo::CallShape shape{OpKind::kAllReduce, n * sizeof(double), size, DataType::kFloat64, hosts};
  const transport::Tag agree{++collective_seq, make_meta(OpKind::kAllReduce, DataType::kFloat64, ReduceOp::kMax, 0, n)};
  execute(what, agree, tuner.choose(shape),
          {times.data(), times.data(), n, DataType::kFloat64, ReduceOp::kMax, 0, sizeof(double)});
  measured.decide(checked.shape, times);
}

template <typename Body>
void Communicator::Impl::guard(const algo::CallInfo& call, uint64_t call_number, Body&& body) {
  // The peers learn that this rank takes part in no collective from this one on (the next, after send/recv).
  const auto told_number = [&] { return call_number != 0 ? call_number : collective_seq + 1; };
  auto tell_peers = [&](const std::string& reason) {
    notices.publish(Notices::Kind::kBroken, told_number(), reason);
  };
  try {
    body();
  } catch (const MismatchError& error) {
    const uint64_t differs = error.expected_meta() ^ error.got_meta();
    auto schedule = [&](uint64_t meta) { return tuner.schedule_name(kind_of(meta), schedule_of(meta)); };
    std::string detail =
        differs == 0 && std::strcmp(call.name, "all_to_allv") == 0
            ? fmt::format("peer {} sent {} B where {} B were expected: its send_counts[{}] and this rank's "
                          "recv_counts[{}] differ", error.peer(), error.got_bytes(), error.expected_bytes(), rank,
                          error.peer())
        : differs == 0 ? fmt::format("peer {} sent {} B where {} B were expected (tag or count differs)", error.peer(),
                                   error.got_bytes(), error.expected_bytes())
        : (differs & ~kScheduleMask) == 0
            ? fmt::format("peer {} runs it with the {} schedule, this rank with {}: the ranks are tuned differently "
                          "(TBCOLL_ALGO, TBCOLL_TUNER and TBCOLL_*_BYTES must be the same on every rank)", error.peer(),
                          schedule(error.got_meta()), schedule(error.expected_meta()))
            : fmt::format("peer {} called {}", error.peer(), describe_meta(error.got_meta()));
    std::string message = fmt::format("rank {}: {} does not match the peer's call: {} ({})", rank,
                                      call.describe(), detail, error.what());
    const std::string refusal = call_number != 0 ? notices.refusal_of(call_number) : "";
    if (!refusal.empty()) {
      message = fmt::format("rank {}: {} failed: {} (here: {})", rank, call.describe(), refusal, error.what());
    }
    mark_broken(message);
    tell_peers(message);
    if (!refusal.empty()) throw RemoteError(message);
    throw InvalidUsage(message);
  } catch (const Error& error) {
    mark_broken(error.what());
    const std::string context = fmt::format("rank {}: {}", rank, call.describe());
    if (error.code() == tbcollTimeout) {
      // Past the call's deadline the telling gets a short budget: a store that stopped answering (its host
      // vanished) must not keep the caller a second longer. Peers that timed out in this call too waited as this
      // rank did: their reasons are context, this rank's own names the peer it waited for.
      notices.publish(Notices::Kind::kTimedOut, told_number(), error.what(), Notices::kLateBudget);
      std::string others;
      try {
        others = notices.check_after_timeout(told_number(), call_number != 0, Notices::kLateBudget);
      } catch (const RemoteError& told) {
        throw RemoteError(fmt::format("{} failed: {} (here: {})", context, told.what(), error.what()));
      }
      if (!others.empty()) throw TimeoutError(fmt::format("{} failed: {} ({})", context, error.what(), others));
      rethrow_with_context(error, context);
    }
    tell_peers(fmt::format("{} failed: {}", context, error.what()));
    if (error.code() != tbcollRemoteError && error.code() != tbcollInvalidArgument) {
      // A peer that gave up first (and closed its connections, say) told why: say that rather than what it
      // did to this rank.
      try {
        notices.check_now(call_number, call_number != 0);
      } catch (const RemoteError& told) {
        throw RemoteError(fmt::format("{} failed: {} (here: {})", context, told.what(), error.what()));
      }
    }
    rethrow_with_context(error, context);
  }
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  impl().async.drain();
  impl().all_reduce(send, recv, count, dtype, op);
}

void Communicator::Impl::all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  const Checked checked = check_or_refuse(OpKind::kAllReduce, send, recv, count, dtype, op, 0);
  algo::CallInfo what{"all_reduce", count, dtype, op, true};
  check_usable(what);
  if (count == 0) return;
  if (checked.choice == nullptr) {
    if (send != recv) std::memcpy(recv, send, checked.bytes);
    return;
  }
  transport::Tag tag{++collective_seq, make_meta(OpKind::kAllReduce, dtype, op, 0, count)};  // the caller's op
  std::vector<uint8_t> unused;
  send = divide_first(send, recv, unused, count, dtype, op, size);
  execute_checked(what, tag, checked, {send, recv, count, dtype, op, 0, dtype_size(dtype)});
}

void Communicator::all_gather(const void* send, void* recv, size_t count, DataType dtype) {
  impl().async.drain();
  impl().all_gather(send, recv, count, dtype);
}

void Communicator::Impl::all_gather(const void* send, void* recv, size_t count, DataType dtype) {
  const Checked checked = check_or_refuse(OpKind::kAllGather, send, recv, count, dtype, ReduceOp::kSum, 0);
  algo::CallInfo what{"all_gather", count, dtype};
  check_usable(what);
  if (count == 0) return;
  if (checked.choice == nullptr) {
    if (send != recv) std::memcpy(recv, send, checked.bytes);
    return;
  }
  transport::Tag tag{++collective_seq, make_meta(OpKind::kAllGather, dtype, ReduceOp::kSum, 0, count)};
  execute_checked(what, tag, checked, {send, recv, count, dtype, ReduceOp::kSum, 0, dtype_size(dtype)});
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  impl().async.drain();
  impl().reduce_scatter(send, recv, count, dtype, op);
}

void Communicator::Impl::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  const Checked checked = check_or_refuse(OpKind::kReduceScatter, send, recv, count, dtype, op, 0);
  algo::CallInfo what{"reduce_scatter", count, dtype, op, true};
  check_usable(what);
  if (count == 0) return;
  if (checked.choice == nullptr) {
    if (send != recv) std::memcpy(recv, send, checked.bytes);
    return;
  }
  transport::Tag tag{++collective_seq, make_meta(OpKind::kReduceScatter, dtype, op, 0, count)};
  std::vector<uint8_t> quotients;
  send = divide_first(send, nullptr, quotients, count * static_cast<size_t>(size), dtype, op, size);
  execute_checked(what, tag, checked, {send, recv, count, dtype, op, 0, dtype_size(dtype)});
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
  impl().async.drain();
  impl().reduce(send, recv, count, dtype, op, root);
}

void Communicator::Impl::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
  const Checked checked = check_or_refuse(OpKind::kReduce, send, recv, count, dtype, op, root);
  algo::CallInfo what{"reduce", count, dtype, op, true, root};
  check_usable(what);
  if (count == 0) return;
  if (checked.choice == nullptr) {
    if (send != recv) std::memcpy(recv, send, checked.bytes);
    return;
  }
  transport::Tag tag{++collective_seq, make_meta(OpKind::kReduce, dtype, op, root, count)};
  std::vector<uint8_t> quotients;
  send = divide_first(send, nullptr, quotients, count, dtype, op, size);
  execute_checked(what, tag, checked, {send, recv, count, dtype, op, root, dtype_size(dtype)});
}

void Communicator::broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
  impl().async.drain();
  impl().broadcast(send, recv, count, dtype, root);
}

void Communicator::Impl::broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
  const Checked checked = check_or_refuse(OpKind::kBroadcast, send, recv, count, dtype, ReduceOp::kSum, root);
  algo::CallInfo what{"broadcast", count, dtype, ReduceOp::kSum, false, root};
  check_usable(what);
  if (count == 0) return;
  if (checked.choice == nullptr) {
    if (send != recv) std::memcpy(recv, send, checked.bytes);
    return;
  }
  // The root only sends: execute() adds a check of the root with the neighbours (different roots are told).
  transport::Tag tag{++collective_seq, make_meta(OpKind::kBroadcast, dtype, ReduceOp::kSum, root, count)};
  execute_checked(what, tag, checked, {send, recv, count, dtype, ReduceOp::kSum, root, dtype_size(dtype)});
}

void Communicator::barrier() {
  impl().async.drain();
  impl().barrier();
}

void Communicator::Impl::barrier() {
  const algo::CallInfo what{"barrier"};
  check_usable(what);
  if (size == 1) return;
  transport::Tag tag{++collective_seq, make_meta(OpKind::kBarrier, DataType::kUint8, ReduceOp::kSum, 0, 0)};
  execute(what, tag, tuner.choose({OpKind::kBarrier, 0, size, DataType::kUint8}), {});
}

// send and recv: point to point, matched in call order per peer pair (tags count the pair's messages).
void Communicator::Impl::p2p(bool is_send, void* buf, size_t count, DataType dtype, int peer) {
  async.drain();
  const char* name = is_send ? "send" : "recv";
  check_dtype(rank, name, dtype);
  check_rank(rank, size, name, "peer", peer);
  if (peer == rank && group_depth == 0) {
    throw InvalidArgument(fmt::format("rank {}: {}: peer {} is this rank (allowed inside a group only)", rank, name,
                                      peer));
  }
  size_t bytes = checked_bytes(rank, name, count, dtype, 1);
  check_buffer(rank, name, name, buf, count);
  algo::CallInfo what{name, count, dtype, ReduceOp::kSum, false, peer, "peer"};
  check_usable(what);
  uint64_t& counter = is_send ? p2p_sent[peer] : p2p_received[peer];
  transport::Tag tag{(uint64_t{1} << 63) | counter++, make_meta(OpKind::kSendRecv, dtype, ReduceOp::kSum, 0, count)};
  if (group_depth > 0) {
    group_ops.push_back({is_send, buf, bytes, peer, tag});
    return;
  }
  run(what, tag, 0, [&](algo::Exec& exec) {
    exec.wait(is_send ? exec.isend(peer, buf, bytes) : exec.irecv(peer, buf, bytes));
  });
}

void Communicator::group_start() {
  // Queued asynchronous calls run before the group (call order), and none runs while it records.
  impl().async.drain();
  impl().group_depth++;
}

void Communicator::group_end() {
  Impl& c = impl();
  c.async.drain();
  if (c.group_depth == 0) throw InvalidUsage(fmt::format("rank {}: group_end without group_start", c.rank));
  if (--c.group_depth > 0) return;
  std::vector<Impl::GroupedP2p> ops = std::move(c.group_ops);
  c.group_ops.clear();
  // Sends to self pair with receives from self, in call order.
  std::vector<const Impl::GroupedP2p*> self_sends, self_recvs;
  for (const auto& op : ops) {
    if (op.peer == c.rank) (op.is_send ? self_sends : self_recvs).push_back(&op);
  }
  // The group's operations with peers took their tags when recorded, so a group refused here leaves this rank
  // out of step with its peers: the communicator is broken, as after an I/O error.
  auto refuse = [&](const std::string& message) {
    c.mark_broken(message);
    throw InvalidUsage(message);
  };
  if (self_sends.size() != self_recvs.size()) {
    refuse(fmt::format("rank {}: group has {} sends to self but {} receives from self", c.rank, self_sends.size(),
                       self_recvs.size()));
  }
  for (size_t i = 0; i < self_sends.size(); ++i) {
    if (self_sends[i]->bytes != self_recvs[i]->bytes) {
      refuse(fmt::format("rank {}: send to self of {} B meets a receive from self of {} B", c.rank,
                         self_sends[i]->bytes, self_recvs[i]->bytes));
    }
    if (self_sends[i]->bytes > 0) std::memmove(self_recvs[i]->buf, self_sends[i]->buf, self_sends[i]->bytes);
  }
  const algo::CallInfo what{"group_end"};
  c.check_usable(what);
  c.run(what, transport::Tag{}, 0, [&](algo::Exec& exec) {
    for (const auto& op : ops) {  // receives first, so the peers' sends find them posted
      if (!op.is_send && op.peer != c.rank) exec.irecv(op.peer, op.buf, op.bytes, op.tag);
    }
    for (const auto& op : ops) {
      if (op.is_send && op.peer != c.rank) exec.isend(op.peer, op.buf, op.bytes, op.tag);
    }
    exec.wait_all();
  });
}

void Communicator::send(const void* buf, size_t count, DataType dtype, int peer) {
  impl().p2p(true, const_cast<void*>(buf), count, dtype, peer);  // only read
}

void Communicator::recv(void* buf, size_t count, DataType dtype, int peer) { impl().p2p(false, buf, count, dtype, peer); }

}  // namespace tbcoll
