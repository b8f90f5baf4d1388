// ibverbs device: offered when the system's verbs library loads and a device has an active port with an
// IPv4-mapped GID; one port per rank and device (port.h), shared by the rank's communicators, and one opened device
// per process (probe.h): the start-up probe opens it, every later probe, port and communicator reuses it.
#include "transports/ibverbs/device.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "common/env.h"
#include "common/net.h"
#include "common/log.h"
#include "transports/ibverbs/context.h"
#include "transports/ibverbs/device_matrix.h"
#include "transports/ibverbs/port.h"
#include "transports/ibverbs/wire.h"
#include "transports/devices.h"

namespace tbcoll::ibverbs {
namespace {

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

void parse_mode(const std::string& text, PortOptions* options) {
  options->auto_mode = text == "auto" || text.empty();
  if (text == "uc" || options->auto_mode) {
    options->mode = Mode::kUc;
  } else if (text == "rc") {
    options->mode = Mode::kRc;
  } else {
    throw InvalidArgument(fmt::format("[env] TBCOLL_IB_MODE={:?}: use uc, rc or auto", text));
  }
}

// TBCOLL_IB_DEVICES, else MLX's variable (a path to its device matrix), so MLX users' settings carry over.
std::string device_spec(const env::Settings& settings) {
  std::string spec = settings.get("TBCOLL_IB_DEVICES");
  if (spec.empty()) {
    const char* mlx = std::getenv("MLX_IBV_DEVICES");
    if (mlx != nullptr) spec = mlx;
  }
  return spec;
}

DeviceMatrix matrix_of(const std::string& spec) {
  const size_t first = spec.find_first_not_of(" \t\n");
  if (first != std::string::npos && spec[first] == '[') return parse_device_matrix(spec, "TBCOLL_IB_DEVICES");
  return load_device_matrix(spec);
}

// Apple's Thunderbolt devices (rdma_enN) take about 10 queue pairs per process: the 11th fails with EBUSY, whatever
// the device reports. The budget for auto never goes above it there.
constexpr int kAppleQueuePairs = 10;

InvalidArgument over_budget(int rank, const std::string& device, int peers, int limit, int max_qp) {
  return InvalidArgument(fmt::format(
      "[ibverbs] rank {}: {} would need {} queue pairs (one per peer), over its limit of {} ({}; Apple's "
      "Thunderbolt allows about 10 per device): with TBCOLL_IB_MODE=auto the peers past the limit use tcp, or give "
      "the pairs other cables in a device matrix",
      rank, device, peers, limit,
      max_qp > 0 ? fmt::format("the device reports max_qp {}; TBCOLL_IB_MAX_QPS", max_qp) : "TBCOLL_IB_MAX_QPS"));
}

// Queue pairs a device allows per process: TBCOLL_IB_MAX_QPS, or for auto the device's own max_qp
// (ibv_query_device), at most 10 on Apple's rdma_enN; where it reports none, 10 there and no limit of ours
// elsewhere (the device says EBUSY/ENOMEM itself).
int qp_budget(const env::Settings& settings, const std::string& device, int max_qp) {
  const std::string text = settings.get("TBCOLL_IB_MAX_QPS");
  if (text == "auto") return auto_queue_pair_budget(device, max_qp);
  const long long value = settings.get_int("TBCOLL_IB_MAX_QPS");
  if (value < 0 || value > 1000000) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_IB_MAX_QPS={}: use auto, 0 (no limit) or a count", value));
  }
  return static_cast<int>(value);
}

// A cost-model figure: the knob's value if set (a positive number), else `otherwise`.
double knob_or(const env::Settings& settings, const char* name, double otherwise) {
  const std::string text = settings.get(name);
  if (text.empty() || text == "auto") return otherwise;
  const double value = settings.get_double(name);
  if (!(value > 0) || value > 1e6) {
    throw InvalidArgument(fmt::format("[env] {}={}: a positive number, or auto", name, text));
  }
  return value;
}

PortOptions port_options(const env::Settings& settings, const transport::ContextArgs& args) {
  PortOptions options;
  parse_mode(settings.get("TBCOLL_IB_MODE"), &options);
  options.listen_host = net::listen_host(settings, args.bind_host, fmt::format("[ibverbs] rank {}", args.rank));
  options.token = args.token;
  options.secret = args.secret;
  const long long post_batch = settings.get_int("TBCOLL_IB_POST_BATCH");
  if (post_batch < 0 || post_batch > Connection::kMaxPostBatch) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_IB_POST_BATCH={}: 0 (automatic) to {}", post_batch,
                                      Connection::kMaxPostBatch));
  }
  options.post_batch = static_cast<int>(post_batch);
  const long long slot_bytes = settings.get_int("TBCOLL_IB_SLOT_BYTES");
  if (slot_bytes != 0 && (slot_bytes < static_cast<long long>(wire::kMinSlotBytes) ||
                          slot_bytes > static_cast<long long>(wire::kMaxSlotBytes) ||
                          slot_bytes % static_cast<long long>(wire::kFrameBytes) != 0)) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_IB_SLOT_BYTES={}: 0 (automatic), or a multiple of 4096 from "
                                      "16384 to 1048576",
                                      slot_bytes));
  }
  options.slot_bytes = static_cast<size_t>(slot_bytes);
  options.payload_sum = settings.get_int("TBCOLL_IB_PAYLOAD_SUM") != 0;
  const std::string zero_copy = settings.get("TBCOLL_IB_ZERO_COPY");
  if (zero_copy != "auto" && zero_copy != "0" && zero_copy != "1") {
    throw InvalidArgument(fmt::format("[env] TBCOLL_IB_ZERO_COPY={}: 1, 0 or auto", zero_copy));
  }
  options.zero_copy = zero_copy == "auto" ? -1 : zero_copy == "1" ? 1 : 0;
  return options;
}

int rails_knob(const env::Settings& settings) {
  const long long rails = settings.get_int("TBCOLL_IB_RAILS");
  if (rails < 1 || rails > 16) throw InvalidArgument(fmt::format("[env] TBCOLL_IB_RAILS={}: 1 to 16 per peer", rails));
  return static_cast<int>(rails);
}

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string();
}

class Device final : public transport::Device {
 public:
  Device(const VerbsApi* verbs, std::string name, bool same_process_only)
      : verbs_(verbs), name_(std::move(name)), same_process_only_(same_process_only) {}

  std::string name() const override { return name_; }
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps;
    // The floors: TBCOLL_IB_LATENCY_US and TBCOLL_IB_GBPS (what tbcoll-rdma-check measures), else published
    // figures: Thunderbolt 5 UC SEND, ib_send_lat 4.6 us at 4 KiB and ib_send_bw ~75 Gbit/s on one queue pair.
    const env::Settings settings;
    const bool apple = verbs_ != nullptr && verbs_->provider.find("librdma") != std::string::npos;
    caps.latency_us = knob_or(settings, "TBCOLL_IB_LATENCY_US", apple ? 4.6 : 2.0);
    caps.bandwidth_gbps = knob_or(settings, "TBCOLL_IB_GBPS", apple ? 9.4 : 10.0);
    caps.message_overhead_us = 0.3;  // the transport's CPU per message and end (benchmarks/ibverbs_bench.cc)
    caps.max_message_bytes = wire::kMaxMessageBytes;
    caps.needs_registered_memory = true;  // payloads go through the connection's registered frames and slots
    caps.same_process_only = same_process_only_;
    return caps;
  }
  bool can_connect(const transport::PeerInfo& self, const transport::PeerInfo& peer) const override {
    return !same_process_only_ || (self.host_id == peer.host_id && self.process_id == peer.process_id);
  }

  bool can_connect_addresses(const transport::PeerInfo&, const std::string& self_address,
                             const transport::PeerInfo&, const std::string& peer_address,
                             std::string* why_not) const override {
    std::string why;
    const bool yes = !rails_between(decode_context_address(self_address), decode_context_address(peer_address), &why)
                          .empty();
    if (!yes && why_not != nullptr) *why_not = "[ibverbs] " + why;
    return yes;
  }

  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    const env::Settings settings(args.knobs);
    const PortOptions options = port_options(settings, args);
    const long long stripe_bytes = settings.get_int("TBCOLL_IB_STRIPE_BYTES");
    if (stripe_bytes < 0) {
      throw InvalidArgument(fmt::format("[env] TBCOLL_IB_STRIPE_BYTES={}: a size in bytes", stripe_bytes));
    }
    const std::string presence = fmt::format("{:x}.{}", args.self.process_id, args.self.instance);
    ContextAddress self;
    self.instance = args.self.instance;
    self.host = host_name();
    const std::string spec = device_spec(settings);
    std::vector<std::string> used;  // devices, in the order of first use
    if (names_a_matrix(spec)) {
      used = route_by_matrix(spec, presence, args, &self);
    } else if (!spec.empty()) {
      for (const Found& found : probe_all(*verbs_, split_names(spec))) {
        if (static_cast<int>(used.size()) < rails_knob(settings)) used.push_back(found.name);
      }
      self.kind = ContextAddress::Kind::kEveryPeer;
      self.devices = used;
    } else {
      used = route_by_subnet(settings, &self);
    }
    std::vector<std::shared_ptr<Port>> ports;
    std::map<std::string, int> max_qps;  // what each device reports
    for (const std::string& device : used) {
      ports.push_back(port_for(presence, device, options));
      max_qps[device] = ports.back()->max_qp();
      self.budget[device] = qp_budget(settings, device, ports.back()->max_qp());
    }
    if (!options.auto_mode && self.kind != ContextAddress::Kind::kSubnets) check_budgets(self, args, max_qps);
    return make_context(std::move(ports), std::move(self), static_cast<size_t>(stripe_bytes), args);
  }

 private:
  // The rank's row of a device matrix: its routes and the devices they use.
  std::vector<std::string> route_by_matrix(const std::string& spec, const std::string& presence,
                                           const transport::ContextArgs& args, ContextAddress* self) {
    const DeviceMatrix matrix = matrix_of(spec);
    // N is the job's size: checked by the communicator that opens the rank's ports (the world's, before splits).
    check_device_matrix(matrix, has_ports(presence) ? matrix.size() : args.world_size, self->instance,
                        device_names(*verbs_));
    self->kind = ContextAddress::Kind::kMatrix;
    std::vector<std::string> used;
    const auto& row = matrix.cells[static_cast<size_t>(self->instance)];
    for (int peer = 0; peer < matrix.size(); ++peer) {
      if (row[static_cast<size_t>(peer)].empty()) continue;
      self->routes[peer] = row[static_cast<size_t>(peer)];
      for (const std::string& name : row[static_cast<size_t>(peer)]) {
        if (std::find(used.begin(), used.end(), name) == used.end()) used.push_back(name);
      }
    }
    if (used.empty()) {
      throw IoError(fmt::format("[ibverbs] device matrix {}: row {} has no cable (this rank reaches no peer over "
                                "ibverbs)",
                                matrix.source, self->instance));
    }
    return used;
  }

  // Every usable device, published with its IPv4 subnet: peers pick the cable their own subnets share.
  std::vector<std::string> route_by_subnet(const env::Settings& settings, ContextAddress* self) {
    self->kind = ContextAddress::Kind::kSubnets;
    self->rails = rails_knob(settings);
    std::vector<std::string> used;
    for (const Found& found : probe_all(*verbs_, {})) {
      ContextAddress::Net net;
      net.device = found.name;
      net.ipv4 = ipv4_of(found.gid);
      net.prefix = verbs_->ipv4_prefix != nullptr ? verbs_->ipv4_prefix(found.gid.raw + 12) : -1;
      net.apple = apple_device(*verbs_, found.name);
      self->nets.push_back(net);
      used.push_back(found.name);
    }
    return used;
  }

  // A forced mode: a device whose budget the peers over it would pass is an error naming it (auto: those peers
  // use the next transport, routes.h).
  static void check_budgets(const ContextAddress& self, const transport::ContextArgs& args,
                            const std::map<std::string, int>& max_qps) {
    for (const auto& [device, limit] : self.budget) {
      int peers = self.kind == ContextAddress::Kind::kEveryPeer ? args.world_size - 1 : 0;
      for (const auto& [peer, names] : self.routes) {
        peers += std::count(names.begin(), names.end(), device) > 0 ? 1 : 0;
      }
      if (limit > 0 && peers > limit) throw over_budget(args.rank, device, peers, limit, max_qps.at(device));
    }
  }

  bool has_ports(const std::string& presence) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, port] : ports_) {
      if (key.rfind(presence + "/", 0) == 0 && !port.expired()) return true;
    }
    return false;
  }

  // The rank's port on device: the one its other communicators use, if any, else a new one.
  std::shared_ptr<Port> port_for(const std::string& presence, const std::string& device, const PortOptions& options) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<Port> port = ports_[presence + "/" + device].lock();
    if (!port) {
      port = std::make_shared<Port>(*verbs_, presence, device, options);
      ports_[presence + "/" + device] = port;
    }
    return port;
  }

  const VerbsApi* verbs_;
  std::string name_;
  bool same_process_only_;
  std::mutex mutex_;
  std::map<std::string, std::weak_ptr<Port>> ports_;
};

}  // namespace

int auto_queue_pair_budget(const std::string& device, int max_qp) {
  const bool apple = device.rfind("rdma_en", 0) == 0;
  if (max_qp <= 0) return apple ? kAppleQueuePairs : 0;
  return apple ? std::min(max_qp, kAppleQueuePairs) : max_qp;
}

std::shared_ptr<transport::Device> make_device(const VerbsApi* verbs, std::string name, bool same_process_only) {
  return std::make_shared<Device>(verbs, std::move(name), same_process_only);
}

}  // namespace tbcoll::ibverbs

namespace tbcoll::transport {

std::shared_ptr<Device> make_ibverbs_device() {
  std::string why;
  const ibverbs::VerbsApi* verbs = ibverbs::system_verbs(&why);
  if (verbs == nullptr) {
    log::info("[ibverbs] {} (the ibverbs transport is not offered)", why);
    return nullptr;
  }
  try {
    const std::string spec = ibverbs::device_spec(env::Settings());
    ibverbs::probe(*verbs, ibverbs::names_a_matrix(spec) ? std::vector<std::string>{} : ibverbs::split_names(spec));
  } catch (const Error& error) {
    log::info("{} (the ibverbs transport is not offered)", error.what());
    return nullptr;
  }
  return ibverbs::make_device(verbs, "ibverbs");
}

}  // namespace tbcoll::transport
