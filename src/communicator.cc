// Communicator set-up, in the phases of setup/setup.h, and the communicator's own queries, split and abort.
#include "communicator.h"

#include <thread>

#include <algorithm>
#include <atomic>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "algorithms/registry.h"
#include "bootstrap/rendezvous.h"
#include "common/auth.h"
#include "common/cpu.h"
#include "common/env.h"
#include "common/set_up_devices.h"
#include "common/log.h"
#include "common/time.h"
#include "platform/platform.h"
#include "setup/setup.h"
#include "tune_file.h"

namespace tbcoll {

void Health::mark(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_) reason_ = reason;
  broken_.store(true, std::memory_order_release);
}

std::string Health::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reason_;
}

Communicator::Impl::Impl(const Config& config_, int instance_, setup::Rendezvous rendezvous_, setup::Links links_,
                         Tuner tuner_, std::string emulation_)
    : config(config_),
      call_timeout(config_.timeout_s),
      rank(config_.rank),
      size(config_.world_size),
      instance(instance_),
      rendezvous(std::move(rendezvous_)),
      links(std::move(links_)),
      emulation(std::move(emulation_)),
      tuner(std::move(tuner_)),
      flight(env::Settings(config_.knobs), config_.rank, config_.world_size, rendezvous.comm_id,
             links.transport_names) {
  request_table.figures = flight.peers();
  request_table.stalled_on = flight.stalled_on();
  calls.p2p_sent.assign(static_cast<size_t>(size), 0);
  calls.p2p_received.assign(static_cast<size_t>(size), 0);
  if (rendezvous.store) notices.attach(rendezvous.store, config.prefix, rank);
  const bool all_shm = std::all_of(links.transport_names.begin(), links.transport_names.end(),
                                   [](const std::string& name) { return name == "self" || name == "shm"; }) &&
                       size > 1;
  const auto spin = tuner.config().spin.count() >= 0 ? tuner.config().spin : transport::WaitPolicy::auto_spin_cap(all_shm);
  wait_policy = transport::WaitPolicy(static_cast<transport::WaitPolicy::Mode>(tuner.config().wait_mode), spin,
                                      links.spin_yield);
  // A call that waits long may be held up by an earlier call's check (a transport that matches in order).
  request_table.on_long_wait = [this] {
    if (!deferred_checks.empty() && !settling_checks) settle_checks(false);
  };
  log::info("rank {}: waits: {}", rank, wait_policy.describe());
}

void Communicator::Impl::mark_broken(const std::string& reason) {
  health.mark(reason);
  flight.failed(reason);
}

void Communicator::Impl::throw_broken(const algo::CallInfo& call) {
  throw InvalidUsage(
      fmt::format("rank {}: {} on a broken communicator (rebuild it): {}", rank, call.describe(), health.reason()));
}

Communicator Communicator::init(const Config& config) {
  return init(config, deadline_after(config.timeout_s));
}

Communicator Communicator::init(const Config& config, Deadline deadline) { return init(config, deadline, nullptr); }

Communicator Communicator::init(const Config& config, Deadline deadline, const std::atomic<bool>* cancelled,
                                int instance) {
  try {
    return connect(config, deadline, cancelled, instance);
  } catch (const Error& error) {
    // Errors of set-up (rendezvous, handshakes, segments) name the rank and the call, as those of collectives do.
    rethrow_with_context(error, fmt::format("rank {}: init(world_size={})", config.rank, config.world_size));
  }
}

namespace {

void check_config(const Config& config) {
  if (config.world_size < 1) throw InvalidArgument(fmt::format("world size {} must be at least 1", config.world_size));
  if (config.world_size > bootstrap::kMaxWorldSize) {
    throw InvalidArgument(fmt::format("world size {} is above the {} ranks tbcoll supports (TBCOLL_WORLD_SIZE, or the "
                                      "launcher's size variable)", config.world_size, bootstrap::kMaxWorldSize));
  }
  if (config.rank < 0 || config.rank >= config.world_size) {
    throw InvalidArgument(fmt::format("rank {} out of range for world size {}", config.rank, config.world_size));
  }
  if (!(config.timeout_s > 0)) throw InvalidArgument(fmt::format("timeout {} s must be positive", config.timeout_s));
}

void log_plan(int rank, const bootstrap::Published& self, const setup::LinkPlan& plan) {
  static constexpr const char* kYields[] = {"never yield", "yield now and then", "yield at every poll"};
  log::info("rank {}: runs on CPUs {}; {} other rank(s) on this machine, up to {:.2g} rank(s) per CPU; spinning waits {}",
            rank, format_cpus(self.cpus), plan.same_machine_peers, plan.crowding,
            kYields[static_cast<int>(plan.spin_yield)]);
}

// Told before the connections close: a peer whose call then fails on the closed connection looks for the reason
// (Notices::await_reason) and finds it. Call 0: another thread may be in any call; this rank takes part in none.
void abort_with(Communicator::Impl& c, const std::string& message) {
  c.flight.failed(message, /*aborted=*/true);
  c.mark_broken(message);
  c.notices.publish(Notices::Kind::kBroken, 0, fmt::format("rank {}: {}", c.rank, message), Notices::kLateBudget);
  for (const auto& context : c.links.contexts) context->abort();
}

}  // namespace

Communicator Communicator::connect(const Config& config, Deadline deadline, const std::atomic<bool>* cancelled,
                                   int instance) {
  check_config(config);
  env::warn_unknown_variables();  // a misspelt knob would otherwise be ignored without a word
  const bool alone = config.world_size == 1 && !config.store && config.root.empty();
  if (alone && !env::job_in_environment()) env::warn_running_alone();  // not asked for: say so
  platform::prefer_fast_cores();  // the thread that drives collectives spins in their waits
  const bool top_level = instance < 0;  // not a split's set-up
  if (top_level) instance = config.rank;
  const int rank = config.rank, size = config.world_size;
  const env::Settings settings(config.knobs);
  const std::string secret = auth::job_secret(settings);  // "" for none
  const TunerConfig tuning = TunerConfig::from_env(settings);
  const transport::SetUpDevices set_up = transport::devices_for(config.knobs);
  const setup::Devices& devices = set_up.devices;
  const std::vector<KnownFastPath> known = setup::known_fast_paths(devices);
  const ForcedAlgorithms forced = parse_forced(config.algo, known);
  if (size == 1) {
    return Communicator(std::make_unique<Impl>(config, instance, setup::Rendezvous{}, setup::links_of_one(),
                                               Tuner(tuning, size, forced, {}, known), set_up.emulation));
  }
  const auto started = Clock::now();
  auto phase = [&](const char* name) {  // TBCOLL_DEBUG=TRACE: each set-up phase and when it ended
    log::trace("rank {}: set-up: {} done after {:.1f} ms", rank, name,
               std::chrono::duration<double, std::milli>(Clock::now() - started).count());
  };
  setup::Rendezvous rendezvous = setup::open_rendezvous(config, settings, secret, deadline, cancelled);
  phase("open_rendezvous");
  if (set_up.emulated) log::info("rank {}: emulating links: {}", rank, set_up.emulation);
  Store& store = *rendezvous.store;
  setup::Identity identity =
      setup::publish_identity(config, settings, devices, rendezvous, secret, instance, deadline, cancelled);
  phase("publish_identity");
  const std::vector<bootstrap::Published> everyone =
      setup::read_records(store, config.prefix, rank, identity.self, deadline, cancelled);
  setup::LinkPlan plan = setup::plan_links(devices, everyone, rank, config.transport);
  phase("plan_links");
  if (plan.hosts > 1 && secret.empty() && rank == 0 && top_level) {  // once per job, not per split
    log::warn("rank 0: this job spans {} hosts and has no job secret (TBCOLL_SECRET): whoever reaches its ports can "
              "join with the token, rewrite its records and alter its data. Set TBCOLL_SECRET_FILE or TBCOLL_SECRET "
              "on every rank (tbcoll-run draws one); see docs/security.md", plan.hosts);
  }
  log_plan(rank, identity.self, plan);
  if (plan.crowding > 1 && rank == 0 && top_level) {  // once per job, not per split
    log::warn("rank 0: a machine of this job runs {:.2g} ranks per CPU it lets them use: their waits give the CPU "
              "up at every poll and each call waits for the scheduler, so calls are many times slower than with one "
              "rank per CPU. Start at most one rank per CPU (tbcoll-run -n, the hostfile's slots)", plan.crowding);
  }
  const bootstrap::Published self = identity.self;
  setup::Links links = setup::connect_links(std::move(identity), plan, devices, store, config.prefix, rank, size,
                                            deadline, cancelled);
  links.fast_path = setup::fast_path_of(links, plan, devices, everyone);
  phase("connect_links");
  const algo::CostParams costs = setup::link_costs(devices, everyone, plan.crowding, set_up.emulation, settings);
  log::info("rank {}: cost model: {}", rank, costs.describe());
  // The tuner, once: the fast path's algorithms join the table.
  Tuner tuner(tuning, size, forced, links.fast_path != nullptr ? links.fast_path->algorithms()
                                                               : std::vector<transport::FastPathAlgorithm>{},
              known, costs);
  auto impl = std::make_unique<Impl>(config, instance, std::move(rendezvous), std::move(links), std::move(tuner),
                                     set_up.emulation);
  impl->measured.set_trials(tuning.measure_trials);
  if (!settings.get("TBCOLL_TUNE_FILE").empty()) {  // saved decisions (tune_file.h): rank 0's file, for every rank
    attach_tune_file(impl->measured, impl->tuner,
                     {settings.get("TBCOLL_TUNE_FILE"), rank,
                      tune_shape(size, costs, impl->links.transport_names, set_up.emulation_token), &store,
                      config.prefix, deadline, cancelled});
  }
  log::info("rank {}/{}: connected ({} via {})", rank, size, plan.peers_by_transport.size() == 1 ? "all peers" : "peers",
            fmt::join(impl->links.transport_names, ","));
  return Communicator(std::move(impl));
}

// The peers of a broken communicator may still be reading why it broke (notices, in the store this process
// serves): a rank that failed first and is destroyed at once (its process exits on the error) would leave them
// with a connection reset and no reason. So the store is served until only this process is connected to it, at
// most Notices::kReasonWait (how long a peer waits for a reason).
Communicator::Impl::~Impl() {
  settle_at_exit();
  if (!health.broken() || rendezvous.server == nullptr) return;
  const auto until = Clock::now() + Notices::kReasonWait;
  while (rendezvous.server->connections() > 1 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// A rank whose last calls only sent (the root of a final broadcast) waits here for its neighbour's checks of them:
// closing its connections first would fail that neighbour's send of the check, and a mismatch would go unsaid.
// A destructor cannot throw: a mismatch found here is logged.
void Communicator::Impl::settle_at_exit() noexcept {
  if (deferred_checks.empty()) return;
  try {
    async.drain();
    if (!health.broken()) settle_checks(true);
  } catch (const std::exception& error) {
    log::warn("{} (found as the communicator was destroyed)", error.what());
  }
  deferred_checks.clear();
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

Communicator::Impl& Communicator::impl() const {
  if (impl_ == nullptr) throw InvalidUsage("use of a moved-from Communicator");
  return *impl_;
}

int Communicator::rank() const { return impl().rank; }
int Communicator::size() const { return impl().size; }

std::string Communicator::transport_name(int peer) const {
  if (peer < 0 || peer >= impl().size) {
    throw InvalidArgument(fmt::format("rank {}: peer {} out of range for world size {}", impl().rank, peer, impl().size));
  }
  return impl().links.transport_names[static_cast<size_t>(peer)];
}

std::string Communicator::all_reduce_algorithm(size_t bytes) const { return algorithm("all_reduce", bytes); }

std::string Communicator::algorithm(const std::string& collective, size_t bytes) const {
  for (OpKind kind : algo::collectives()) {
    if (collective != op_kind_name(kind)) continue;
    if (impl().size == 1) return algo::self_algorithm_name();
    const algo::CallShape call{kind, bytes, impl().size, DataType::kFloat32, impl().links.hosts};
    const std::string measured = impl().measured.decided(call);  // "" unless TBCOLL_TUNER=measure decided
    return measured.empty() ? impl().tuner.choose(call).name : measured;
  }
  throw InvalidArgument(fmt::format("unknown collective {:?}", collective));
}

std::string Communicator::link_emulation() const { return impl().emulation; }

Communicator::Explanation Communicator::explain(const std::string& collective, size_t bytes) const {
  for (OpKind kind : algo::collectives()) {
    if (collective != op_kind_name(kind)) continue;
    const Tuner& tuner = impl().tuner;
    Explanation out;
    out.model = tuner.costs().describe();
    if (impl().size == 1) {
      out.chosen = algo::self_algorithm_name();
      return out;
    }
    // The call as the collectives shape it (hosts too: the hierarchical rows run only across hosts).
    const algo::CallShape call{kind, bytes, impl().size, DataType::kFloat32, impl().links.hosts};
    for (const Estimate& estimate : tuner.estimates(call)) {
      out.algorithms.push_back(
          {estimate.name, estimate.seconds >= 0 ? estimate.seconds * 1e6 : -1, estimate.refusal, estimate.fast_path});
    }
    const Choice& chosen = tuner.choose(call);
    out.chosen = chosen.name;
    out.model_decides = tuner.model_decides(kind) && chosen.fast_path_index < 0 && !tuner.forced(kind);
    if (out.model_decides && (tuner.config().measure || impl().measured.has_saved())) {
      const std::string measured = impl().measured.decided(call);
      if (!measured.empty()) {
        out.chosen = measured;
        out.measured = impl().measured.describe(call);
      } else {
        out.measuring = tuner.config().measure &&
                        tuner.shortlist(call, MeasuredChoices::kShortlistFactor, MeasuredChoices::kMaxCandidates)
                                .size() >= 2;
      }
    }
    return out;
  }
  throw InvalidArgument(fmt::format("unknown collective {:?}", collective));
}

std::optional<Communicator> Communicator::split(int color, int key) {
  Impl& c = impl();
  c.async.drain();  // the queued calls first: their time is theirs, not the split's
  const Deadline deadline = deadline_after(c.config.timeout_s);  // for the whole split, as one init
  // Everyone's (color, key) through this communicator; then each color's members ordered by (key, rank).
  int32_t mine[2] = {color < 0 ? -1 : color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(c.size));
  all_gather(mine, all.data(), 2, DataType::kInt32);
  const uint64_t split_index = ++c.calls.splits;
  if (color < 0) return std::nullopt;
  std::vector<std::pair<int32_t, int>> members;  // (key, old rank)
  for (int r = 0; r < c.size; ++r) {
    if (all[2 * r] == color) members.push_back({all[2 * r + 1], r});
  }
  std::sort(members.begin(), members.end());
  Config config = c.config;
  config.world_size = static_cast<int>(members.size());
  config.rank = static_cast<int>(std::find(members.begin(), members.end(), std::make_pair(key, c.rank)) -
                                 members.begin());
  config.store = c.rendezvous.store;  // null only for a single-rank parent, whose only child has size 1 too
  config.server = c.rendezvous.server;  // the child needs the store as long as it lives, not as long as the parent
  config.root.clear();
  config.prefix = fmt::format("{}/split{}/color{}", c.config.prefix, split_index, color);
  // An abort() of this communicator from another thread ends the child's set-up too.
  return Communicator::init(config, deadline, c.health.flag(), c.instance);
}

void Communicator::abort() { abort_with(impl(), "aborted by the user"); }
void Communicator::abort(const std::string& reason) { abort_with(impl(), "aborted: " + reason); }

bool Communicator::broken() const { return impl().health.broken(); }

void Communicator::set_call_observer(std::function<void(const CallEvent& event)> observer) {
  Impl& c = impl();
  if (!c.async.idle()) {
    throw InvalidUsage(fmt::format("rank {}: set_call_observer while asynchronous calls are queued: wait for them "
                                   "first", c.rank));
  }
  c.flight.observe(std::move(observer));
}

std::string Communicator::flight_file() const { return impl().flight.path(); }

struct MemoryRegistration::State {
  std::vector<std::unique_ptr<transport::Registration>> registrations;  // one per transport that took the memory
};

MemoryRegistration::MemoryRegistration() = default;
MemoryRegistration::MemoryRegistration(std::unique_ptr<State> state) : state_(std::move(state)) {}
MemoryRegistration::MemoryRegistration(MemoryRegistration&&) noexcept = default;
MemoryRegistration& MemoryRegistration::operator=(MemoryRegistration&&) noexcept = default;
MemoryRegistration::~MemoryRegistration() = default;
int MemoryRegistration::transports() const {
  return state_ ? static_cast<int>(state_->registrations.size()) : 0;
}
void MemoryRegistration::reset() { state_.reset(); }

MemoryRegistration Communicator::register_memory(const void* base, size_t bytes) {
  Impl& c = impl();
  if (base == nullptr || bytes == 0) {
    throw InvalidArgument(
        fmt::format("rank {}: register_memory({}, {} B): nothing to register", c.rank, base, bytes));
  }
  // No mapping starts in the first page, is longer than a process can map (2^47 B) or wraps past the address space.
  const auto begin = reinterpret_cast<uintptr_t>(base);
  if (begin < 4096 || bytes > (size_t{1} << 47) || begin + bytes < begin) {
    throw InvalidArgument(fmt::format("rank {}: register_memory({}, {} B): not a range of mapped memory (in the first "
                                      "page, longer than a process can map, or past the end of the address space)",
                                      c.rank, base, bytes));
  }
  auto state = std::make_unique<MemoryRegistration::State>();
  for (const auto& context : c.links.contexts) {
    if (auto registration = context->register_memory(base, bytes)) {
      state->registrations.push_back(std::move(registration));
    }
  }
  return MemoryRegistration(std::move(state));
}

}  // namespace tbcoll
