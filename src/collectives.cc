// The collective calls: argument checks, tuner, schedule, and errors that name rank, peer and operation.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "algorithms/algorithms.h"
#include "common/log.h"
#include "common/time.h"
#include "call_checks.h"
#include "collective_traits.h"
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

Communicator::Impl::Prepared Communicator::Impl::prepare(const CollectiveTraits& traits, const CallArgs& args) const {
  Prepared out;
  out.checked = check_shape(traits, rank, size, links.hosts, args);
  check_buffers(traits, rank, size, args, out.checked.bytes);
  out.valid = true;
  out.op = args.op;
  out.root = args.root;
  out.what = {traits.name};
  if (traits.takes_count) {
    out.what = {traits.name, args.count, args.dtype, args.op, traits.reduces, traits.rooted ? args.root : -1};
  }
  out.run = args;
  out.run.op = traits.reduces ? args.op : ReduceOp::kSum;
  out.run.root = traits.rooted ? args.root : 0;
  out.run.elem_size = traits.takes_count ? dtype_size(args.dtype) : 1;
  out.divides_first = traits.reduces && args.op == ReduceOp::kAvg && args.dtype == DataType::kFloat16;
  if (size == 1) return out;
  // A forced algorithm that cannot run this call (oneshot beyond its slots, say) is a bad argument too: said
  // here, before anything is queued or sent, naming the call.
  try {
    out.choice = &tuner.choose(out.checked.shape);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(fmt::format("rank {}: {}: {}", rank, traits.name, error.what()));
  }
  return out;
}

Communicator::Impl::Prepared& Communicator::Impl::prepare_cached(const CollectiveTraits& traits,
                                                                 const CallArgs& args) {
  Prepared& last = prepared[static_cast<size_t>(traits.kind)];
  if (last.valid && last.run.count == args.count && last.run.dtype == args.dtype && last.op == args.op &&
      last.root == args.root) {
    if (last.run.send != args.send || last.run.recv != args.recv) {  // the same buffers passed their checks already
      check_buffers(traits, rank, size, args, last.checked.bytes);
      last.run.send = last.fast_args.send = args.send;
      last.run.recv = last.fast_args.recv = args.recv;
    }
    return last;
  }
  // Made aside and kept only once whole: a preparation that throws leaves the slot as it was.
  Prepared fresh = prepare(traits, args);
  fresh.hot = fresh.choice != nullptr && fresh.choice->fast_path_index >= 0 && !fresh.divides_first &&
              (!traits.takes_count || args.count > 0) && !tuner.config().measure && !measured.has_saved();
  if (fresh.hot) {
    const algo::Args& run = fresh.run;
    fresh.fast_args = {run.send, run.recv, run.count, run.dtype, run.op, run.root, {}, Deadline::min(),
                       wait_policy.spin_cap(), links.spin_yield, transport::Watch(prepared_watch),
                       call_timeout.duration(), &wait_policy};
    fresh.fast = links.fast_path->prepare(static_cast<size_t>(fresh.choice->fast_path_index), fresh.fast_args);
    if (fresh.fast == nullptr) {
      throw InvalidUsage(fmt::format("rank {}: {}: the fast path {} prepared no call", rank, fresh.what.describe(),
                                     fresh.choice->name));
    }
  }
  last = std::move(fresh);
  // Once per new shape of a collective (calls that repeat it are not logged: they cost no more than a check).
  log::trace("rank {}: {} of {} B ({}): {}", rank, traits.name, last.checked.bytes, to_string(args.dtype),
             last.choice != nullptr ? last.choice->name : std::string(algo::self_algorithm_name()));
  return last;
}

void Communicator::Impl::refuse_call() {
  try {
    throw;
  } catch (const InvalidArgument& error) {
    if (size > 1 && !health.broken()) {
      async.drain();  // asynchronous submissions refuse on the caller's thread: the queued calls go first
      notices.publish(Notices::Kind::kRefused, ++calls.collective_seq, error.what());
    }
    throw;
  }
}

namespace {

// A collective's tag counts the calls (send/recv tags have the top bit set; a group's run has none).
uint64_t collective_number(const transport::Tag& tag) { return !transport::is_p2p_tag(tag.tag) ? tag.tag : 0; }

}  // namespace

template <typename Body>
void Communicator::Impl::run(const algo::CallInfo& call, transport::Tag tag, unsigned schedule, Body&& body) {
  const uint64_t number = collective_number(tag);
  guard(call, number, [&] {
    // For peers waiting in a fast-path call (and it checks for messages of earlier calls never received: an
    // error that breaks the communicator, as any mismatch). Not send/recv: their tags count per peer pair, so
    // another rank's receive could take ours for its own call.
    if (links.fast_path != nullptr && !transport::is_p2p_tag(tag.tag)) links.fast_path->announce(tag);
    if (schedule != 0) tag.meta = with_schedule(tag.meta, schedule);
    const TunerConfig& tuning = tuner.config();
    const Deadline deadline = call_timeout.deadline();
    algo::Exec exec(rank, size, links.peers, links.max_message, tag, deadline, wait_policy, tuning.chunk_bytes,
                    scratch, request_table, call, &links.host_of);
    auto look = [this, number, deadline] { notices.check(number, number != 0, deadline); };
    exec.set_watch(transport::Watch(look));
    body(exec);
  });
}

void Communicator::Impl::execute(const algo::CallInfo& call, transport::Tag tag, const Choice& choice,
                                 const algo::Args& args) {
  flight.will_run(choice.name.c_str());
  if (choice.fast_path_index < 0) {
    const bool rooted = call.root >= 0 && !transport::is_p2p_tag(tag.tag);  // broadcast, reduce, gather, scatter
    run(call, tag, choice.schedule, [&](algo::Exec& exec) {
      // In a rooted call some ranks only send (a broadcast's root, a reduce's leaves), so no receive of theirs
      // checks the call's signature: ranks that named different roots would each return success with different
      // data. Every rank also receives an empty message from rank - 1 and sends one to rank + 1, posted before
      // the schedule's own (so they pair up on every link, in order): a rank whose neighbour named another root
      // is told by the signature. A rank that waits for data gets it in this call (ranks that wait for each other
      // are told at once); a rank that only sends does not wait for it: the call costs one message each way its
      // data needs, and the checks are settled as later calls start (deferred_checks). On tcp the empty message
      // leaves with this rank's next message on that link (one system call for both), or a few together.
      size_t check = SIZE_MAX, told = SIZE_MAX;
      if (rooted) {
        check = exec.irecv((rank + size - 1) % size, nullptr, 0);
        told = exec.isend_later((rank + 1) % size);
        exec.set_aside(check);
        exec.set_aside(told);
      }
      choice.run(exec, args);
      exec.wait_all();
      for (size_t id : {check, told}) {
        if (id != SIZE_MAX && !exec.done(id)) {
          deferred_checks.push_back({exec.detach(id), call, tag.tag, call_timeout.deadline()});
        }
      }
    });
    return;
  }
  run_fast_path(call, tag, choice, args);
}

void Communicator::Impl::settle_checks(bool all) {
  settling_checks = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{settling_checks};
  while (!deferred_checks.empty()) {
    DeferredCheck& oldest = deferred_checks.front();
    const bool wait = all || deferred_checks.size() > kMaxDeferredChecks;
    bool complete = false;
    guard_errors(oldest.call, oldest.number, [&] {  // an earlier call's: not a call of its own
      complete = oldest.request->test();
      if (wait && !complete) {  // this rank's own check may be waiting to leave with a later message
        for (transport::Endpoint* endpoint : links.peers) {
          if (endpoint != nullptr) endpoint->flush();
        }
      }
      while (wait && !complete) {
        if (Clock::now() >= oldest.deadline) {
          throw TimeoutError(fmt::format("timed out waiting for peer {} (its check of this call)",
                                         (rank + size - 1) % size));
        }
        notices.check(oldest.number, true, oldest.deadline);  // a peer that gave up sends no check
        oldest.request->block(std::chrono::microseconds(1000));
        complete = oldest.request->test();
      }
    });
    if (!complete) return;
    deferred_checks.pop_front();
  }
}

void Communicator::Impl::run_fast_path(const algo::CallInfo& call, const transport::Tag& tag, const Choice& choice,
                                       const algo::Args& args) {
  // A fast path takes a message of an earlier call still in a peer's queue for a mismatch: the checks go first.
  if (!deferred_checks.empty()) settle_checks(true);
  guard(call, tag.tag, [&] {  // no requests, no Exec
    const Deadline deadline = call_timeout.deadline();
    auto look = [this, &tag, deadline] {
      notices.check(tag.tag, true, deadline);
      if (p2p_in_flight) p2p_in_flight->sweep();  // pending isend/irecv move
    };
    transport::CollectiveArgs fast{args.send,          args.recv,  args.count,           args.dtype,
                                   args.op,            args.root,  tag,                  deadline,
                                   wait_policy.spin_cap(), links.spin_yield, transport::Watch(look)};
    fast.wait = &wait_policy;
    links.fast_path->run(static_cast<size_t>(choice.fast_path_index), fast);
  });
}

void Communicator::Impl::PreparedWatch::operator()() const {
  if (deadline == Deadline::min()) deadline = impl->call_timeout.deadline();  // the wait's own, read as late
  impl->notices.check(tag, true, deadline);
  if (impl->p2p_in_flight) impl->p2p_in_flight->sweep();  // pending isend/irecv move
}

// The deadline is left for the wait to read (call_deadline): a call that completes while spinning reads no clock.
void Communicator::Impl::run_prepared(Prepared& call) {
  if (!deferred_checks.empty()) settle_checks(true);  // as run_fast_path
  transport::CollectiveArgs& fast = call.fast_args;
  fast.tag = {++calls.collective_seq, call.checked.meta};
  prepared_watch.tag = fast.tag.tag;
  prepared_watch.deadline = Deadline::min();
  flight.will_run(call.choice->name.c_str());
  guard(call.what, fast.tag.tag, [&] { call.fast->run(fast); });
}

void Communicator::Impl::execute_checked(const algo::CallInfo& call, transport::Tag tag, const algo::CallShape& shape,
                                         const Choice& choice, const algo::Args& args) {
  if (!tuner.config().measure && !measured.has_saved()) {  // neither measuring nor saved decisions (tune_file.h)
    execute(call, tag, choice, args);
    return;
  }
  const MeasuredChoices::Pick pick = measured.pick(shape, choice, tuner);
  if (pick.trial < 0) {
    execute(call, tag, *pick.choice, args);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  execute(call, tag, *pick.choice, args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> times;
  if (!measured.record(shape, pick, seconds, &times)) return;
  // The octave's last trial: the slowest rank's time of each, by an all_reduce the model picks (never measured),
  // in place on the vector every rank holds. A call of its own: it takes the next call number on every rank.
  const size_t n = times.size();
  const algo::CallInfo what{"all_reduce (TBCOLL_TUNER=measure: the ranks' times of the trial calls)", n,
                            DataType::kFloat64, ReduceOp::kMax, true};
  const algo::CallShape agreement{OpKind::kAllReduce, n * sizeof(double), size, DataType::kFloat64, links.hosts};
  const transport::Tag agree{++calls.collective_seq, make_meta(OpKind::kAllReduce, DataType::kFloat64, ReduceOp::kMax, 0, n)};
  execute(what, agree, tuner.choose(agreement),
          {times.data(), times.data(), n, DataType::kFloat64, ReduceOp::kMax, 0, sizeof(double)});
  measured.decide(shape, times);
}

template <typename Body>
void Communicator::Impl::guard(const algo::CallInfo& call, uint64_t call_number, Body&& body) {
  flight::CallRecord* record = flight.begin(call, call_number != 0 ? call_number : calls.collective_seq,
                                            call_number != 0);
  try {
    guard_errors(call, call_number, std::forward<Body>(body));
  } catch (...) {
    flight.end(record, false);
    throw;
  }
  flight.end(record, true);
}

template <typename Body>
void Communicator::Impl::guard_errors(const algo::CallInfo& call, uint64_t call_number, Body&& body) {
  // Every kSettleFrom calls while checks wait (a test of one is a system call on tcp), and whenever too many wait.
  if (!deferred_checks.empty() && !settling_checks &&
      (++calls.since_settled >= kSettleFrom || deferred_checks.size() > kMaxDeferredChecks)) {
    calls.since_settled = 0;
    settle_checks(false);
  }
  // The peers learn that this rank takes part in no collective from this one on (the next, after send/recv).
  const auto told_number = [&] { return call_number != 0 ? call_number : calls.collective_seq + 1; };
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
    // The transport's own words (signature bits, tags) go to the log: the message says what the ranks did.
    log::info("rank {}: {}: {}", rank, call.describe(), error.what());
    std::string message =
        fmt::format("rank {}: {} does not match the peer's call: {}", rank, call.describe(), detail);
    const std::string refusal = call_number != 0 ? notices.refusal_of(call_number) : "";
    if (!refusal.empty()) message = fmt::format("rank {}: {} failed: {}", rank, call.describe(), refusal);
    mark_broken(message);
    tell_peers(message);
    if (!refusal.empty()) throw RemoteError(message);
    throw InvalidUsage(message);
  } catch (const Error& error) {
    // Broken already: another thread of this process aborted the communicator (and told the peers why); nobody
    // else's reason is looked for.
    const bool aborted_here = health.broken();
    mark_broken(error.what());
    const std::string context = fmt::format("rank {}: {}", rank, call.describe());
    if (aborted_here) rethrow_with_context(error, context);
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
        if (error.code() == tbcollSystemError) {
          notices.await_reason(call_number, call_number != 0);
        } else {
          notices.check_now(call_number, call_number != 0);
        }
      } catch (const RemoteError& told) {
        throw RemoteError(fmt::format("{} failed: {} (here: {})", context, told.what(), error.what()));
      }
    }
    rethrow_with_context(error, context);
  }
}

// The one call path of every collective with a traits row: checks (kept per shape), refusal, tuner, tag,
// the f16 average's division, the schedule or fast path.
void Communicator::Impl::collective(const CollectiveTraits& traits, const CallArgs& args) {
  Prepared* prepared_call = nullptr;
  try {
    prepared_call = &prepare_cached(traits, args);
  } catch (const InvalidArgument&) {
    if (traits.tells_refusals) refuse_call();
    throw;
  }
  Prepared& call = *prepared_call;  // the collective's slot: no call below prepares this collective again
  check_usable(call.what);
  if (traits.takes_count && args.count == 0) return;
  if (call.choice == nullptr) {  // one rank
    if (args.send != args.recv && call.checked.bytes > 0) std::memcpy(args.recv, args.send, call.checked.bytes);
    return;
  }
  if (call.hot) {  // new buffers of a hot shape, or the first call of it
    run_prepared(call);
    return;
  }
  const transport::Tag tag{++calls.collective_seq, call.checked.meta};  // the caller's op
  if (!call.divides_first) {
    execute_checked(call.what, tag, call.checked.shape, *call.choice, call.run);
    return;
  }
  // Into recv where it has the input's layout on every rank (all_reduce), else into storage of its own.
  algo::Args run = call.run;
  std::vector<uint8_t> quotients;
  const bool into_recv = !traits.send_per_rank && !traits.recv_per_rank && traits.writes_recv == Ranks::kEvery;
  const size_t elements = args.count * (traits.send_per_rank ? static_cast<size_t>(size) : 1);
  run.send = divide_first(args.send, into_recv ? args.recv : nullptr, quotients, elements, args.dtype, run.op, size);
  execute_checked(call.what, tag, call.checked.shape, *call.choice, run);
}

void Communicator::Impl::call_checked(OpKind kind, const CallArgs& args) {
  async.drain();
  collective(*traits_of(kind), args);
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  impl().call(OpKind::kAllReduce, {send, recv, count, dtype, op, 0});
}

void Communicator::all_gather(const void* send, void* recv, size_t count, DataType dtype) {
  impl().call(OpKind::kAllGather, {send, recv, count, dtype, ReduceOp::kSum, 0});
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  impl().call(OpKind::kReduceScatter, {send, recv, count, dtype, op, 0});
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root) {
  impl().call(OpKind::kReduce, {send, recv, count, dtype, op, root});
}

// The root only sends: execute() adds a check of the root with the neighbours (different roots are told).
void Communicator::broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
  impl().call(OpKind::kBroadcast, {send, recv, count, dtype, ReduceOp::kSum, root});
}

void Communicator::barrier() { impl().call(OpKind::kBarrier, {}); }

void Communicator::all_to_all(const void* send, void* recv, size_t count, DataType dtype) {
  impl().call(OpKind::kAllToAll, {send, recv, count, dtype, ReduceOp::kSum, 0});
}

// Non-root ranks only send, so a root or count they disagree on is seen by the receivers (see docs: "A call in
// which some ranks only send").
void Communicator::gather(const void* send, void* recv, size_t count, DataType dtype, int root) {
  impl().call(OpKind::kGather, {send, recv, count, dtype, ReduceOp::kSum, root});
}

void Communicator::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  impl().call(OpKind::kScatter, {send, recv, count, dtype, ReduceOp::kSum, root});
}

// send and recv: point to point, matched in call order per peer pair (tags count the pair's messages).
void Communicator::Impl::p2p(bool is_send, void* buf, size_t count, DataType dtype, int peer) {
  async.drain();
  const char* name = is_send ? "send" : "recv";
  check_dtype(rank, name, dtype);
  check_rank(rank, size, name, "peer", peer);
  if (peer == rank && calls.group_depth == 0) {
    throw InvalidArgument(fmt::format("rank {}: {}: peer {} is this rank (allowed inside a group only)", rank, name,
                                      peer));
  }
  size_t bytes = checked_bytes(rank, name, count, dtype, 1);
  check_buffer(rank, name, name, buf, count);
  algo::CallInfo what{name, count, dtype, ReduceOp::kSum, false, peer, "peer"};
  check_usable(what);
  uint64_t& counter = is_send ? calls.p2p_sent[peer] : calls.p2p_received[peer];
  transport::Tag tag{transport::p2p_tag(counter++), make_meta(OpKind::kSendRecv, dtype, ReduceOp::kSum, 0, count)};
  if (calls.group_depth > 0) {
    calls.group_ops.push_back({is_send, buf, bytes, peer, tag});
    return;
  }
  run(what, tag, 0, [&](algo::Exec& exec) {
    exec.wait(is_send ? exec.isend(peer, buf, bytes) : exec.irecv(peer, buf, bytes));
  });
}

void Communicator::group_start() {
  // Queued asynchronous calls run before the group (call order), and none runs while it records.
  impl().async.drain();
  impl().calls.group_depth++;
}

void Communicator::group_end() {
  Impl& c = impl();
  c.async.drain();
  if (c.calls.group_depth == 0) throw InvalidUsage(fmt::format("rank {}: group_end without group_start", c.rank));
  if (--c.calls.group_depth > 0) return;
  std::vector<CallCounters::GroupedP2p> ops = std::move(c.calls.group_ops);
  c.calls.group_ops.clear();
  // Sends to self pair with receives from self, in call order.
  std::vector<const CallCounters::GroupedP2p*> self_sends, self_recvs;
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
