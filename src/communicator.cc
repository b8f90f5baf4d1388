// Communicator set-up: store, host identity, transport choice per peer pair, connections.
#include "communicator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "bootstrap/open_store.h"
#include "bootstrap/peer_exchange.h"
#include "bootstrap/rendezvous.h"
#include "common/auth.h"
#include "common/cpu.h"
#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "platform/platform.h"
#include "transports/delay/delay.h"
#include "tune_file.h"

namespace tbcoll {

// The rendezvous records (what ranks publish, read back and remove), by their short names.
using bootstrap::bytes_of;
using bootstrap::decode;
using bootstrap::encode;
using bootstrap::forget_records;
using bootstrap::Published;
using bootstrap::read_comm_id;
using bootstrap::text_of;

namespace {

uint64_t random_u64() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

// Ranks with equal host ids talk through shared memory, which names and watches peers by pid: so the id holds
// the platform's shm domain (on Linux the kernel, the pid namespace and the /dev/shm file system: containers of
// one pod can share /dev/shm, the host name and the kernel, while their pids mean different processes; others
// share the pids but mount a /dev/shm of their own). Ranks that differ use the next transport; so does a
// process whose domain is unknown (no /proc), since it cannot tell. Different network namespaces differ too.
std::string host_id(const env::Settings& settings) {
  // Tests (and unusual set-ups, e.g. containers sharing nothing but a name) can set the identity.
  std::string forced = settings.get("TBCOLL_HOST_ID");
  if (!forced.empty()) return forced;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  static const std::string domain = platform::shm_domain();
  static const uint64_t this_process = random_u64();  // ranks that are threads of one process still match
  if (domain.empty()) return fmt::format("{}/unknown-namespace/{:x}", name, this_process);
  // Network namespaces of one machine (the hosts of tbcoll-run's namespace tests, containers with a network of
  // their own) are hosts of their own: their ranks talk over the network.
  static const std::string network = platform::network_domain();
  return network.empty() ? fmt::format("{}/{}", name, domain) : fmt::format("{}/{}/{}", name, domain, network);
}

uint64_t process_id() {
  static const uint64_t id = (uint64_t{static_cast<uint32_t>(getpid())} << 32) ^ (random_u64() & 0xffffffffu);
  return id;
}

// The transport ranks a and b pick for each other: the first device (best first, the build's order) that both
// published and that can join them, or "" if none. Symmetric, so every rank computes every pair alike.
using Devices = std::vector<std::shared_ptr<transport::Device>>;

std::string transport_between(const Devices& devices, const Published& a, const Published& b,
                              std::string* why_not = nullptr) {
  for (const auto& device : devices) {
    const std::string& name = device->name();
    if (a.addresses.count(name) != 0 && b.addresses.count(name) != 0 && device->can_connect(a.info, b.info) &&
        device->can_connect_addresses(a.info, a.addresses.at(name), b.info, b.addresses.at(name), why_not)) {
      return name;
    }
  }
  return "";
}

bool one_transport_for_all_pairs(const Devices& devices, const std::vector<Published>& everyone,
                                 const std::string& name) {
  for (size_t a = 0; a < everyone.size(); ++a) {
    for (size_t b = a + 1; b < everyone.size(); ++b) {
      if (transport_between(devices, everyone[a], everyone[b]) != name) return false;
    }
  }
  return true;
}

// The cost model's figures (algorithms/cost.h), the same on every rank: from every pair's transport (each
// rank computes every pair from everyone's records), the link emulation, then the knobs.
// crowding: machine_crowding() of everyone.
algo::CostParams link_costs(const Devices& devices, const std::vector<Published>& everyone, double crowding,
                            const transport::LinkEmulation& link, const env::Settings& settings) {
  algo::CostParams costs;
  std::map<std::string, int> per_host;
  for (const Published& rank : everyone) ++per_host[rank.info.host_id];
  costs.hosts = static_cast<int>(per_host.size());
  for (const auto& [host, ranks] : per_host) costs.ranks_per_host = std::max(costs.ranks_per_host, ranks);
  bool have_intra = false, have_inter = false;
  std::vector<std::string> used;
  for (size_t a = 0; a < everyone.size(); ++a) {
    for (size_t b = a + 1; b < everyone.size(); ++b) {
      const std::string name = transport_between(devices, everyone[a], everyone[b]);
      if (name.empty()) continue;
      if (std::find(used.begin(), used.end(), name) == used.end()) used.push_back(name);
      const transport::Capabilities caps = bootstrap::device_named(devices, name).capabilities();
      const algo::LinkCost pair{caps.latency_us * 1e-6, 0, caps.bandwidth_gbps > 0 ? 1e-9 / caps.bandwidth_gbps : 0,
                                caps.message_overhead_us * 1e-6};
      const bool same_host = everyone[a].info.host_id == everyone[b].info.host_id;
      algo::LinkCost& kind = same_host ? costs.intra : costs.inter;
      bool& have = same_host ? have_intra : have_inter;
      if (!have) kind = pair;
      kind = {std::max(kind.alpha, pair.alpha), std::max(kind.beta, pair.beta),
              std::max(kind.rank_beta, pair.rank_beta), std::max(kind.overhead, pair.overhead)};
      have = true;
    }
  }
  if (!have_intra) costs.intra = costs.inter;
  if (!have_inter) costs.inter = costs.intra;
  costs.source = fmt::format("the capabilities of {}", fmt::join(used, ", "));
  // What a step costs beyond the wire: the core's own work per message (requests, polling). Where a machine
  // runs more ranks than it has CPUs for them (its spinning waits then yield at every poll, cpu.h), each message
  // also costs a switch of process, the ranks sharing a CPU share the work of its messages and transport copies
  // (cost.h), and a rank gets only its share of a CPU for the bytes it reduces: gamma grows by ranks / CPUs.
  constexpr double kStepOverhead = 1e-6, kSwitch = 5e-6;
  const bool oversubscribed = crowding > 1;
  for (algo::LinkCost* kind : {&costs.intra, &costs.inter}) {
    kind->alpha += kStepOverhead;
    kind->overhead += oversubscribed ? kSwitch : 0;
    kind->crowding = crowding;
  }
  costs.gamma *= crowding;
  costs.source += oversubscribed ? fmt::format(" + 1 us per step, 5 us per message, {:.2g} ranks per CPU sharing "
                                               "its work (more ranks than CPUs on a machine)", crowding)
                                 : std::string(" + 1 us per step");
  if (link.on()) {
    for (algo::LinkCost* kind : {&costs.intra, &costs.inter}) {
      kind->alpha += link.one_way_seconds();  // dilated, as the emulation applies it
      kind->beta = link.seconds_per_byte();
    }
    costs.source += " + link emulation " + link.describe();
  }
  algo::LinkCost& knobbed = costs.hosts > 1 ? costs.inter : costs.intra;
  if (settings.is_set("TBCOLL_LINK_ALPHA_US")) {
    const double alpha_us = settings.get_double("TBCOLL_LINK_ALPHA_US");
    if (!(alpha_us >= 0) || !std::isfinite(alpha_us)) {
      throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_ALPHA_US={} must be a non-negative number", alpha_us));
    }
    knobbed.alpha = alpha_us * 1e-6;
    costs.source += fmt::format(", TBCOLL_LINK_ALPHA_US={:g}", alpha_us);
  }
  if (settings.is_set("TBCOLL_LINK_GBPS")) {
    const double gbps = settings.get_double("TBCOLL_LINK_GBPS");
    if (!(gbps > 0) || !std::isfinite(gbps)) {
      throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_GBPS={} must be a positive number (Gbit/s)", gbps));
    }
    knobbed.beta = 8.0 / (gbps * 1e9);
    costs.source += fmt::format(", TBCOLL_LINK_GBPS={:g}", gbps);
  }
  if (costs.hosts == 1) costs.inter = costs.intra;
  return costs;
}

}  // namespace

void Communicator::Impl::mark_broken(const std::string& reason) {
  std::lock_guard<std::mutex> lock(broken_mutex);
  if (!broken) broken_reason = reason;
  broken = true;
}

void Communicator::Impl::throw_broken(const algo::CallInfo& call) {
  std::lock_guard<std::mutex> lock(broken_mutex);
  throw InvalidUsage(
      fmt::format("rank {}: {} on a broken communicator (rebuild it): {}", rank, call.describe(), broken_reason));
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

Communicator Communicator::connect(const Config& config, Deadline deadline, const std::atomic<bool>* cancelled,
                                   int instance) {
  if (config.world_size < 1) throw InvalidArgument(fmt::format("world size {} must be at least 1", config.world_size));
  if (config.world_size > bootstrap::kMaxWorldSize) {
    throw InvalidArgument(fmt::format("world size {} is above the {} ranks tbcoll supports (TBCOLL_WORLD_SIZE, or the "
                                      "launcher's size variable)", config.world_size, bootstrap::kMaxWorldSize));
  }
  if (config.rank < 0 || config.rank >= config.world_size) {
    throw InvalidArgument(fmt::format("rank {} out of range for world size {}", config.rank, config.world_size));
  }
  if (!(config.timeout_s > 0)) throw InvalidArgument(fmt::format("timeout {} s must be positive", config.timeout_s));
  env::warn_unknown_variables();  // a misspelt knob would otherwise be ignored without a word
  const bool alone = config.world_size == 1 && !config.store && config.root.empty();
  if (alone && !env::job_in_environment()) env::warn_running_alone();  // not asked for: say so
  platform::prefer_fast_cores();  // the thread that drives collectives spins in their waits
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->rank = config.rank;
  impl->instance = instance >= 0 ? instance : config.rank;
  impl->size = config.world_size;
  impl->peers.assign(config.world_size, nullptr);
  impl->transport_names.assign(config.world_size, "self");
  impl->p2p_sent.assign(config.world_size, 0);
  impl->p2p_received.assign(config.world_size, 0);
  impl->host_of.assign(config.world_size, 0);
  const env::Settings settings(config.knobs);
  const std::string secret = auth::job_secret(settings);  // "" for none
  const TunerConfig tuning = TunerConfig::from_env(settings);
  const Devices devices = transport::available_devices();
  std::vector<KnownFastPath> known_fast_paths;
  for (const auto& device : devices) {
    for (const auto& algorithm : device->fast_path_algorithms()) known_fast_paths.push_back({device->name(), algorithm});
  }
  const ForcedAlgorithms forced = parse_forced(config.algo, known_fast_paths);
  impl->link =
      transport::parse_link_emulation(settings.get("TBCOLL_LINK_EMULATION"), settings.get_int("TBCOLL_LINK_DELAY_US"));
  impl->tuner = Tuner(tuning, config.world_size, forced, {}, known_fast_paths);
  const int rank = config.rank;
  const int size = config.world_size;
  if (size == 1) return Communicator(std::move(impl));

  if (config.store) {
    impl->store = config.store;
    impl->server = config.server;
  } else {
    if (config.root.empty()) {
      throw InvalidArgument(fmt::format("rank {}: no rendezvous: set TBCOLL_ROOT=host:port (rank 0 listens there; "
                                        "tbcoll-run sets it), or meet through a unique id (tbcollGetUniqueId, "
                                        "UniqueId::create) or a store (C++: Config::store)", rank));
    }
    net::HostPort root = net::parse_host_port(config.root, "TBCOLL_ROOT");
    if (rank == 0) {
      // Only on the address the ranks are told (TBCOLL_ROOT), unless asked for every interface.
      const int listener = bootstrap::take_inherited_listener(root.port);
      const std::string listen_host = settings.get_int("TBCOLL_STORE_LISTEN_ALL") != 0 ? "0.0.0.0" : root.host;
      impl->server = listener >= 0
                         ? std::make_shared<TcpStoreServer>(listener, config.token, secret)
                         : std::make_shared<TcpStoreServer>(listen_host, root.port, config.token, deadline, secret);
    }
    impl->store = connect_tcp_store(config.root, config.token, deadline, secret);
  }
  // Listen on the interface that reaches the rendezvous (127.0.0.1 for in-process stores).
  const std::string bind_host = impl->store->local_address();
  const std::string prefix = config.prefix;
  Store& store = *impl->store;
  impl->notices.attach(impl->store, prefix, rank);

  // One communicator id for the handshakes, chosen by rank 0.
  uint64_t comm_id = 0;
  if (rank == 0) {
    comm_id = random_u64();
    store.set(prefix + "/comm_id", bytes_of(std::to_string(comm_id)), deadline);
  } else {
    comm_id = read_comm_id(store, prefix, rank, size, deadline, cancelled);
  }

  const transport::LinkEmulation& link = impl->link;
  if (link.on()) log::info("rank {}: emulating links: {}", rank, link.describe());

  // A context per usable device; publish identity and addresses.
  Published self;
  self.info = {rank, host_id(settings), process_id(), impl->instance};
  self.kernel = platform::kernel_id();
  self.cpus = allowed_cpus();
  self.world_size = size;
  std::map<std::string, std::unique_ptr<transport::Context>> contexts;
  for (const auto& device : devices) {
    if (!config.transport.empty() && device->name() != config.transport) continue;
    const transport::Capabilities caps = device->capabilities();
    if (!caps.reliable || !caps.ordered) {  // the schedules need both (transport.h)
      log::warn("rank {}: transport {} is not {}: not used", rank, device->name(), caps.reliable ? "ordered" : "reliable");
      continue;
    }
    transport::ContextArgs args{rank,     size,         config.token, bind_host, comm_id, config.timeout_s,
                                cancelled, config.knobs, self.info, secret};
    try {
      contexts[device->name()] = device->create_context(args);
    } catch (const InvalidArgument&) {
      throw;  // a setting is wrong (say, TBCOLL_TCP_BUFFER_BYTES): say so rather than drop the transport
    } catch (const Error& error) {
      // A transport that cannot start here (say, /dev/shm too small) is simply not offered: peers then pick
      // the next transport for this rank. Forced, it is an error.
      if (!config.transport.empty()) throw;
      log::warn("rank {}: transport {} unavailable, using the next one: {}", rank, device->name(), error.what());
      continue;
    }
    self.addresses[device->name()] = contexts[device->name()]->address();
  }
  if (contexts.empty()) {
    throw InvalidArgument(fmt::format("rank {}: transport {:?} is not available here (TBCOLL_TRANSPORT): not built, "
                                      "or nothing it needs on this machine (TBCOLL_DEBUG=INFO says why; tbcoll-info "
                                      "lists the transports)", rank, config.transport));
  }
  store.set(fmt::format("{}/peer/{}", prefix, rank), bytes_of(encode(self)), deadline);

  // Each peer over transport_between(self, peer).
  std::map<std::string, std::vector<transport::PeerAddress>> plan;
  std::vector<std::vector<int>> same_machine_cpus;  // of the peers that run on this kernel
  std::vector<Published> everyone(static_cast<size_t>(size));
  everyone[static_cast<size_t>(rank)] = self;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    Published& other = everyone[static_cast<size_t>(peer)];
    other = decode(peer, text_of(store.get(fmt::format("{}/peer/{}", prefix, peer), deadline, cancelled)));
    if (other.world_size != size) {
      throw InvalidUsage(fmt::format("rank {}: peer {} was started with world size {}, this rank with {}", rank, peer,
                                     other.world_size, size));
    }
    if (other.kernel == self.kernel) same_machine_cpus.push_back(other.cpus);
    std::string why_not;
    const std::string chosen = transport_between(devices, self, other, &why_not);
    if (chosen.empty()) {
      throw InvalidArgument(fmt::format("rank {}: no transport can reach peer {}{}{}", rank, peer,
                                        config.transport.empty() ? "" : " with TBCOLL_TRANSPORT=" + config.transport,
                                        why_not.empty() ? "" : " (" + why_not + ")"));
    }
    plan[chosen].push_back({peer, other.addresses[chosen], "", other.info});
    impl->transport_names[peer] = chosen;
  }
  std::vector<std::string> host_ids;  // by host number
  for (int p = 0; p < size; ++p) {
    const std::string& id = everyone[static_cast<size_t>(p)].info.host_id;
    const auto known = std::find(host_ids.begin(), host_ids.end(), id);
    impl->host_of[static_cast<size_t>(p)] = static_cast<int>(known - host_ids.begin());
    if (known == host_ids.end()) host_ids.push_back(id);
  }
  impl->hosts = static_cast<int>(host_ids.size());
  if (impl->hosts > 1 && secret.empty() && rank == 0 && instance < 0) {  // once per job, not per split
    log::warn("rank 0: this job spans {} hosts and has no job secret (TBCOLL_SECRET): whoever reaches its ports can "
              "join with the token, rewrite its records and alter its data. Set TBCOLL_SECRET_FILE or TBCOLL_SECRET "
              "on every rank (tbcoll-run draws one); see docs/security.md", impl->hosts);
  }
  bootstrap::exchange_per_peer_addresses(store, prefix, rank, devices, contexts, plan, deadline, cancelled);
  forget_records(store, prefix, rank, size, deadline);
  std::vector<std::vector<int>> cpus_by_rank;
  std::vector<std::string> kernel_by_rank;
  for (const Published& one : everyone) {
    cpus_by_rank.push_back(one.cpus);
    kernel_by_rank.push_back(one.kernel);
  }
  const double crowding = machine_crowding(cpus_by_rank, kernel_by_rank);
  impl->spin_yield = spin_yield_policy(self.cpus, same_machine_cpus, crowding > 1);
  static constexpr const char* kYields[] = {"never yield", "yield now and then", "yield at every poll"};
  log::info("rank {}: runs on CPUs {}; {} other rank(s) on this machine, up to {:.2g} rank(s) per CPU; spinning waits {}",
            rank, format_cpus(self.cpus), same_machine_cpus.size(), crowding,
            kYields[static_cast<int>(impl->spin_yield)]);
  impl->max_message.assign(static_cast<size_t>(size), SIZE_MAX);
  const auto receives_waiting = std::make_shared<std::atomic<int>>(0);  // the emulated links' (delay.h)
  for (auto& [name, peers] : plan) {
    const size_t max_message = bootstrap::device_named(devices, name).capabilities().max_message_bytes;
    auto endpoints = contexts[name]->connect(peers, deadline);
    for (auto& endpoint : endpoints) {
      impl->max_message[static_cast<size_t>(endpoint->peer())] = std::max<size_t>(1, max_message);
      endpoint = transport::with_emulation(std::move(endpoint), link, receives_waiting);
      impl->peers[endpoint->peer()] = endpoint.get();
      impl->owned_endpoints.push_back(std::move(endpoint));
    }
    impl->contexts.push_back(std::move(contexts[name]));
  }
  // A transport that reached every peer may offer a whole-collective fast path, if it also joins every other pair
  // of ranks: decided from everyone's records, so every rank decides alike (TBCOLL_TRANSPORT set on one rank only
  // would otherwise give that rank a fast path its peers do not take).
  const algo::CostParams costs = link_costs(devices, everyone, crowding, link, settings);
  log::info("rank {}: cost model: {}", rank, costs.describe());
  impl->tuner = Tuner(tuning, size, forced, {}, known_fast_paths, costs);
  if (plan.size() == 1 && impl->contexts.size() == 1 && !link.on() &&
      one_transport_for_all_pairs(devices, everyone, plan.begin()->first)) {
    impl->fast_path = impl->contexts[0]->fast_path();
    if (impl->fast_path != nullptr) {
      impl->tuner = Tuner(tuning, size, forced, impl->fast_path->algorithms(), known_fast_paths, costs);
    }
  }
  impl->measured.set_trials(tuning.measure_trials);
  if (!settings.get("TBCOLL_TUNE_FILE").empty()) {  // saved decisions (tune_file.h): rank 0's file, for every rank
    attach_tune_file(impl->measured, impl->tuner, {settings.get("TBCOLL_TUNE_FILE"), rank,
                     tune_shape(size, costs, impl->transport_names, link), &store, prefix, deadline, cancelled});
  }
  log::info("rank {}/{}: connected ({} via {})", rank, size, plan.size() == 1 ? "all peers" : "peers",
            fmt::join(impl->transport_names, ","));
  return Communicator(std::move(impl));
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
  return impl().transport_names[peer];
}

std::string Communicator::all_reduce_algorithm(size_t bytes) const { return algorithm("all_reduce", bytes); }

std::string Communicator::algorithm(const std::string& collective, size_t bytes) const {
  for (OpKind kind : algo::collectives()) {
    if (collective != op_kind_name(kind)) continue;
    if (impl().size == 1) return algo::self_algorithm_name();
    const algo::CallShape call{kind, bytes, impl().size, DataType::kFloat32, impl().hosts};
    const std::string measured = impl().measured.decided(call);  // "" unless TBCOLL_TUNER=measure decided
    return measured.empty() ? impl().tuner.choose(call).name : measured;
  }
  throw InvalidArgument(fmt::format("unknown collective {:?}", collective));
}

std::string Communicator::link_emulation() const { return impl().link.describe(); }

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
    const algo::CallShape call{kind, bytes, impl().size, DataType::kFloat32, impl().hosts};
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
  const uint64_t split_index = ++c.splits;
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
  config.store = c.store;  // null only for a single-rank parent, whose only child has size 1 too
  config.server = c.server;  // the child needs the store as long as it lives, not as long as the parent
  config.root.clear();
  config.prefix = fmt::format("{}/split{}/color{}", c.config.prefix, split_index, color);
  // An abort() of this communicator from another thread ends the child's set-up too.
  return Communicator::init(config, deadline, &c.broken, c.instance);
}

void Communicator::abort() {
  impl().mark_broken("aborted by the user");
  for (auto& context : impl().contexts) context->abort();
}

bool Communicator::broken() const { return impl().broken; }

}  // namespace tbcoll
