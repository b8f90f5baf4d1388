// Communicator set-up: store, host identity, transport choice per peer pair, connections.
#include "communicator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "algorithms/registry.h"
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
// process whose domain is unknown (no /proc), since it cannot tell.
std::string host_id(const env::Settings& settings) {
  // Tests (and unusual set-ups, e.g. containers sharing nothing but a name) can set the identity.
  std::string forced = settings.get("TBCOLL_HOST_ID");
  if (!forced.empty()) return forced;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  static const std::string domain = platform::shm_domain();
  static const uint64_t this_process = random_u64();  // ranks that are threads of one process still match
  if (domain.empty()) return fmt::format("{}/unknown-namespace/{:x}", name, this_process);
  return fmt::format("{}/{}", name, domain);
}

uint64_t process_id() {
  static const uint64_t id = (uint64_t{static_cast<uint32_t>(getpid())} << 32) ^ (random_u64() & 0xffffffffu);
  return id;
}

// The listening socket a launcher (tbcoll-run) bound for the store and passed in TBCOLL_ROOT_FD: taken once per
// process, and only if it listens on the root's port; -1 otherwise (then rank 0 binds the port itself).
int take_inherited_listener(int port) {
  static std::atomic<bool> taken{false};
  if (!env::is_set("TBCOLL_ROOT_FD") || taken.exchange(true)) return -1;
  const long long fd = env::get_int("TBCOLL_ROOT_FD");
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  int bound_port = -1;
  if (fd >= 0 && fd <= INT_MAX &&
      getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    if (address.ss_family == AF_INET) bound_port = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    if (address.ss_family == AF_INET6) bound_port = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  if (bound_port != port) {
    log::warn("TBCOLL_ROOT_FD={} is not a socket bound to the root's port {}: ignored", fd, port);
    return -1;
  }
  return static_cast<int>(fd);
}

// The transport ranks a and b pick for each other: the first device (best first, the build's order) that both
// published and that can join them, or "" if none. Symmetric, so every rank computes every pair alike.
using Devices = std::vector<std::shared_ptr<transport::Device>>;

std::string transport_between(const Devices& devices, const Published& a, const Published& b) {
  for (const auto& device : devices) {
    const std::string& name = device->name();
    if (a.addresses.count(name) != 0 && b.addresses.count(name) != 0 && device->can_connect(a.info, b.info)) {
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
  if (config.rank < 0 || config.rank >= config.world_size) {
    throw InvalidArgument(fmt::format("rank {} out of range for world size {}", config.rank, config.world_size));
  }
  if (!(config.timeout_s > 0)) throw InvalidArgument(fmt::format("timeout {} s must be positive", config.timeout_s));
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
  const env::Settings settings(config.knobs);
  const std::string secret = auth::job_secret(settings);  // "" for none
  const TunerConfig tuning = TunerConfig::from_env(settings);
  const Devices devices = transport::available_devices();
  std::vector<KnownFastPath> known_fast_paths;
  for (const auto& device : devices) {
    for (const auto& algorithm : device->fast_path_algorithms()) known_fast_paths.push_back({device->name(), algorithm});
  }
  const ForcedAlgorithms forced = parse_forced(config.algo, known_fast_paths);
  impl->tuner = Tuner(tuning, config.world_size, forced, {}, known_fast_paths);
  const int rank = config.rank;
  const int size = config.world_size;
  if (size == 1) return Communicator(std::move(impl));

  if (config.store) {
    impl->store = config.store;
    impl->server = config.server;
  } else {
    if (config.root.empty()) {
      throw InvalidArgument(fmt::format("rank {}: no rendezvous: set TBCOLL_ROOT=host:port (rank 0 listens there) "
                                        "or pass Config::store", rank));
    }
    net::HostPort root = net::parse_host_port(config.root, "TBCOLL_ROOT");
    if (rank == 0) {
      // Only on the address the ranks are told (TBCOLL_ROOT), unless asked for every interface.
      const int listener = take_inherited_listener(root.port);
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

  const std::chrono::microseconds link_delay(std::max<long long>(0, settings.get_int("TBCOLL_LINK_DELAY_US")));
  if (link_delay.count() > 0) log::info("rank {}: emulating a link with {} us extra latency", rank, link_delay.count());

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
    const std::string chosen = transport_between(devices, self, other);
    if (chosen.empty()) {
      throw InvalidArgument(fmt::format("rank {}: no transport can reach peer {}{}", rank, peer,
                                        config.transport.empty() ? "" : " with TBCOLL_TRANSPORT=" + config.transport));
    }
    plan[chosen].push_back({peer, other.addresses[chosen], "", other.info});
    impl->transport_names[peer] = chosen;
  }
  bootstrap::exchange_per_peer_addresses(store, prefix, rank, devices, contexts, plan, deadline, cancelled);
  forget_records(store, prefix, rank, size, deadline);
  impl->spin_yields = spin_should_yield(self.cpus, same_machine_cpus);
  log::info("rank {}: runs on CPUs {}; {} other rank(s) on this machine; spinning waits {}", rank,
            format_cpus(self.cpus), same_machine_cpus.size(), impl->spin_yields ? "yield now and then" : "never yield");
  impl->max_message.assign(static_cast<size_t>(size), SIZE_MAX);
  for (auto& [name, peers] : plan) {
    const size_t max_message = bootstrap::device_named(devices, name).capabilities().max_message_bytes;
    auto endpoints = contexts[name]->connect(peers, deadline);
    for (auto& endpoint : endpoints) {
      impl->max_message[static_cast<size_t>(endpoint->peer())] = std::max<size_t>(1, max_message);
      endpoint = transport::with_delay(std::move(endpoint), link_delay);
      impl->peers[endpoint->peer()] = endpoint.get();
      impl->owned_endpoints.push_back(std::move(endpoint));
    }
    impl->contexts.push_back(std::move(contexts[name]));
  }
  // A transport that reached every peer may offer a whole-collective fast path, if it also joins every other pair
  // of ranks: decided from everyone's records, so every rank decides alike (TBCOLL_TRANSPORT set on one rank only
  // would otherwise give that rank a fast path its peers do not take).
  if (plan.size() == 1 && impl->contexts.size() == 1 && link_delay.count() == 0 &&
      one_transport_for_all_pairs(devices, everyone, plan.begin()->first)) {
    impl->fast_path = impl->contexts[0]->fast_path();
    if (impl->fast_path != nullptr) {
      impl->tuner = Tuner(tuning, size, forced, impl->fast_path->algorithms(), known_fast_paths);
    }
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
    return impl().tuner.choose({kind, bytes, impl().size, DataType::kFloat32}).name;
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
