#include "tools/rdma_diag/preflight.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "transports/ibverbs/connection.h"
#include "transports/ibverbs/device.h"
#include "transports/ibverbs/hints.h"
#include "transports/ibverbs/memory.h"
#include "transports/ibverbs/probe.h"
#include "transports/ibverbs/registry.h"
#include "tools/rdma_diag/raw_link.h"

namespace tbcoll::ibverbs {
namespace {

constexpr int kMaxGidsShown = 256;
constexpr size_t kProbeFrame = 4096;
// The probes' ceilings where the device sets none of ours (RoCE NICs and rxe report tens of thousands).
constexpr int kMaxProbedQueuePairs = 64;
constexpr int kMaxProbedRegistrations = 256;

std::string link_layer_name(int layer) {
  switch (layer) {
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_UNSPECIFIED:
      return "unspecified";
    default:
      return fmt::format("{}", layer);  // Apple's Thunderbolt devices
  }
}

bool is_zero(const ibv_gid& gid) {
  for (uint8_t byte : gid.raw) {
    if (byte != 0) return false;
  }
  return true;
}

bool is_ipv4_mapped(const ibv_gid& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid.raw[i] != 0) return false;
  }
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

// The local interface that has this IPv4 address, "" if none.
std::string interface_with(const std::string& ipv4) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* at = list; at != nullptr && name.empty(); at = at->ifa_next) {
    if (at->ifa_addr == nullptr || at->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(at->ifa_addr)->sin_addr, text, sizeof(text));
    if (ipv4 == text) name = at->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

std::string provider_of(const VerbsApi& verbs) {
  if (verbs.provider == "fake") return "fake (the tests' in-process fabric)";
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(verbs.get_device_list), &info) != 0 && info.dli_fname != nullptr) {
    char resolved[PATH_MAX] = {};
    const char* path = realpath(info.dli_fname, resolved) != nullptr ? resolved : info.dli_fname;
    return fmt::format("{} ({})", verbs.provider, path);  // the file name carries rdma-core's version
  }
  return verbs.provider;
}

std::string ordinal(int n) {
  const int tens = n % 100;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : n % 10 == 1              ? "st"
                       : n % 10 == 2              ? "nd"
                       : n % 10 == 3              ? "rd"
                                                  : "th";
  return fmt::format("{}{}", n, suffix);
}

// The process's opened device (probe.h: opened once, shared with the transport and the link checks) and its
// protection domain; IoError naming the device when it does not open or gives no protection domain.
struct Opened {
  std::shared_ptr<OpenDevice> device;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  Opened(const VerbsApi& verbs, const std::string& name, bool with_pd = true) : device(opened_device(verbs, name)) {
    context = device->context;
    if (with_pd) pd = device->protection_domain();
  }
};

struct Cq {
  const VerbsApi& verbs;
  ibv_cq* cq = nullptr;
  Cq(const VerbsApi& v, ibv_context* context, int entries, const std::string& device) : verbs(v) {
    errno = 0;
    cq = verbs.create_cq(context, entries, nullptr, nullptr, 0);
    if (cq == nullptr) throw IoError(hints::describe(hints::Verb::kCreateCq, errno, {device, false}));
  }
  ~Cq() { verbs.destroy_cq(cq); }
  Cq(const Cq&) = delete;
  Cq& operator=(const Cq&) = delete;
};

ibv_qp* create_qp(const VerbsApi& verbs, ibv_pd* pd, ibv_cq* cq, Mode mode, int send_wr, int recv_wr) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = mode == Mode::kRc ? IBV_QPT_RC : IBV_QPT_UC;
  init.cap.max_send_wr = static_cast<uint32_t>(send_wr);
  init.cap.max_recv_wr = static_cast<uint32_t>(recv_wr);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  errno = 0;
  return verbs.create_qp(pd, &init);
}

void probe_queue_pairs(const VerbsApi& verbs, const Found& found, Mode mode, LimitProbe* probe) {
  Opened device(verbs, found.name);
  Cq cq(verbs, device.context, 16, found.name);
  std::vector<ibv_qp*> made;
  for (int i = 0; i < probe->cap; ++i) {
    ibv_qp* qp = create_qp(verbs, device.pd, cq.cq, mode, 4, 4);
    if (qp == nullptr) {
      probe->stopped = fmt::format("the {} failed: {}", ordinal(i + 1),
                                   hints::describe(hints::Verb::kCreateQp, errno, {found.name, mode == Mode::kRc}));
      break;
    }
    made.push_back(qp);
  }
  probe->accepted = static_cast<int>(made.size());
  for (ibv_qp* qp : made) verbs.destroy_qp(qp);
}

void probe_registrations(const VerbsApi& verbs, const Found& found, LimitProbe* probe) {
  Opened device(verbs, found.name);
  RegisteredMemory memory(static_cast<size_t>(probe->cap) * kRegistrationPage);
  std::vector<ibv_mr*> made;
  for (int i = 0; i < probe->cap; ++i) {
    errno = 0;
    ibv_mr* mr = verbs.reg_mr(device.pd, memory.data() + static_cast<size_t>(i) * kRegistrationPage, kProbeFrame, kAccessFlags);
    if (mr == nullptr) {
      probe->stopped = fmt::format("the {} failed: {}", ordinal(i + 1),
                                   hints::describe(hints::Verb::kRegMr, errno, {found.name, false}));
      break;
    }
    made.push_back(mr);
  }
  probe->accepted = static_cast<int>(made.size());
  for (ibv_mr* mr : made) verbs.dereg_mr(mr);
}

// Two queue pairs of one context connected to each other (receives may be posted only in RTS), then 4 KiB
// receives on one of them until the device refuses.
void probe_receives(const VerbsApi& verbs, const Found& found, Mode mode, LimitProbe* probe) {
  Opened device(verbs, found.name);
  Cq cq(verbs, device.context, probe->cap + 16, found.name);
  const hints::Where where{found.name, mode == Mode::kRc};
  RegisteredMemory memory(static_cast<size_t>(probe->cap) * kProbeFrame);
  uint8_t* base = memory.data();
  errno = 0;
  ibv_mr* mr = verbs.reg_mr(device.pd, base, memory.size(), kAccessFlags);
  if (mr == nullptr) {
    probe->error = hints::describe(hints::Verb::kRegMr, errno, where);
    return;
  }
  ibv_qp* qps[2] = {create_qp(verbs, device.pd, cq.cq, mode, 4, probe->cap), nullptr};
  if (qps[0] != nullptr) qps[1] = create_qp(verbs, device.pd, cq.cq, mode, 4, probe->cap);
  auto cleanup = [&] {
    for (ibv_qp* qp : qps) {
      if (qp != nullptr) verbs.destroy_qp(qp);
    }
    verbs.dereg_mr(mr);
  };
  if (qps[1] == nullptr) {
    probe->error = hints::describe(hints::Verb::kCreateQp, errno, where);
    cleanup();
    return;
  }
  QpPeer self;  // this context's own GID: both queue pairs are on it
  int gid_index = found.gid_index;
  if (!find_ipv4_gid(verbs, device.context, found.port, &gid_index, &self.gid)) {
    probe->error = fmt::format("{}: no IPv4-mapped GID: {}", found.name, hints::no_ipv4_gid_fix(found.name));
  }
  self.lid = found.lid;
  for (int side = 0; side < 2 && probe->error.empty(); ++side) {
    QpPeer peer = self;
    peer.qp_num = qps[1 - side]->qp_num;
    int error = qp_to_init(verbs, qps[side], found.port);
    if (error != 0) {
      probe->error = hints::describe(hints::Verb::kModifyQpInit, error, where);
    } else if ((error = qp_to_rtr(verbs, qps[side], mode, found.mtu, found.port, gid_index, peer)) != 0) {
      probe->error = hints::describe(hints::Verb::kModifyQpRtr, error, where);
    } else if ((error = qp_to_rts(verbs, qps[side], mode, 0)) != 0) {
      probe->error = hints::describe(hints::Verb::kModifyQpRts, error, where);
    }
  }
  for (int i = 0; probe->error.empty() && i < probe->cap; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(base + static_cast<size_t>(i) * kProbeFrame), static_cast<uint32_t>(kProbeFrame),
                mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = static_cast<uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    errno = 0;
    const int rc = verbs.post_recv(qps[0], &wr, &bad);
    if (rc != 0) {
      probe->stopped = fmt::format("the {} failed: {}", ordinal(i + 1),
                                   hints::describe(hints::Verb::kPostRecv, error_of(rc), where));
      break;
    }
    probe->accepted = i + 1;
  }
  cleanup();
}

std::string format_probe(const LimitProbe& probe) {
  if (!probe.skipped.empty()) return fmt::format("  {}: not probed: {}\n", probe.what, probe.skipped);
  if (!probe.error.empty()) return fmt::format("  {}: not probed: {}\n", probe.what, probe.error);
  if (probe.stopped.empty()) {
    return fmt::format("  {}: {} accepted (the probe's cap, what tbcoll takes here: no limit below it)\n", probe.what,
                       probe.accepted);
  }
  return fmt::format("  {}: {} accepted; {}\n", probe.what, probe.accepted, probe.stopped);
}

}  // namespace

namespace {

// The GIDs of `port` on an open device, the first IPv4-mapped one noted in report.
void read_gids(const VerbsApi& verbs, ibv_context* context, uint8_t port, int entries, PortReport* report) {
  for (int index = 0; index < std::min(entries, kMaxGidsShown); ++index) {
    ibv_gid gid{};
    if (verbs.query_gid(context, port, index, &gid) != 0 || is_zero(gid)) continue;
    GidEntry entry;
    entry.index = index;
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
    entry.text = text;
    entry.ipv4_mapped = is_ipv4_mapped(gid);
    if (entry.ipv4_mapped) {
      entry.ipv4 = ipv4_of(gid);
      if (report->ipv4_gid_index < 0) {
        report->ipv4_gid_index = index;
        report->ipv4 = entry.ipv4;
        report->ipv4_owner = interface_with(entry.ipv4);
        report->prefix = verbs.ipv4_prefix != nullptr ? verbs.ipv4_prefix(gid.raw + 12) : -1;
      }
    }
    report->gids.push_back(entry);
  }
}

// One device: its active port (else port 1), that port's state, MTUs and GIDs, and whether it is usable.
PortReport inspect(const VerbsApi& verbs, const std::string& name) {
  PortReport port;
  port.device = name;
  port.interface = hints::paired_interface(name);
  try {
    Opened device(verbs, name, /*with_pd=*/false);
    ibv_port_attr attr{};
    std::string states;
    port.port = active_port(verbs, device.context, &attr, &states);
    if (port.port == 0) {
      port.port = 1;
      const int queried = verbs.query_port(device.context, 1, &attr);
      if (queried != 0) throw IoError(hints::describe(hints::Verb::kQueryPort, error_of(queried), {name, false}));
    }
    port.state = port_state_name(attr.state);
    port.link_layer = link_layer_name(attr.link_layer);
    port.active_mtu = mtu_bytes(attr.active_mtu);
    port.max_mtu = mtu_bytes(attr.max_mtu);
    port.max_msg_bytes = attr.max_msg_sz;
    port.gid_table = attr.gid_tbl_len;
    read_gids(verbs, device.context, port.port, attr.gid_tbl_len, &port);
    if (attr.state != IBV_PORT_ACTIVE) {
      port.problem = fmt::format("no port is ACTIVE ({})", states);
      port.fix =
          "connect the cable to a host whose RDMA is enabled too (a Mac: `rdma_ctl enable` in Recovery); on "
          "Linux bring the network interface up";
    } else if (port.ipv4_gid_index < 0) {
      port.problem = "no IPv4-mapped GID";
      port.fix = hints::no_ipv4_gid_fix(name);
    } else {
      port.usable = true;
    }
  } catch (const Error& error) {
    port.problem = error.what();
  }
  return port;
}

}  // namespace

PreflightReport preflight(const VerbsApi* verbs, const std::string& why_no_verbs) {
  PreflightReport report;
  if (verbs == nullptr) {
    report.problem = fmt::format("not available: {}", why_no_verbs);
    report.fix =
        "install rdma-core's library and providers (Debian: apt-get install libibverbs1 ibverbs-providers); on a "
        "Mac, macOS 26.2 or later provides librdma.dylib";
    return report;
  }
  report.provider = provider_of(*verbs);
  errno = 0;
  int count = 0;
  ibv_device** list = verbs->get_device_list(&count);
  if (list == nullptr || count == 0) {
    const int error = list == nullptr ? errno : 0;
    if (list != nullptr) verbs->free_device_list(list);
    report.problem = fmt::format("not available: {} (no RDMA device{})", hints::verb_name(hints::Verb::kGetDeviceList),
                                 error != 0 ? ", " + hints::errno_text(error) : "");
    report.fix = hints::fix(hints::Verb::kGetDeviceList, error, {});
    return report;
  }
  std::vector<std::string> names;
  for (int d = 0; d < count; ++d) names.push_back(verbs->get_device_name(list[d]));
  verbs->free_device_list(list);
  for (const std::string& name : names) report.ports.push_back(inspect(*verbs, name));
  report.available = true;
  return report;
}

std::string format_preflight(const PreflightReport& report) {
  std::string out = fmt::format("verbs library: {}\n", report.provider.empty() ? "none" : report.provider);
  if (!report.problem.empty()) {
    return out + fmt::format("FAIL preflight: {}\n     fix: {}\n", report.problem, report.fix);
  }
  out += fmt::format("devices: {}\n", report.ports.size());
  for (const PortReport& port : report.ports) {
    out += fmt::format(
        "  {}{}: port {} {}, link layer {}, active MTU {}, max MTU {}, max message {} B, GID table {} "
        "entries\n",
        port.device, port.interface.empty() ? "" : " (network interface " + port.interface + ")", port.port, port.state,
        port.link_layer, port.active_mtu, port.max_mtu, port.max_msg_bytes, port.gid_table);
    for (const GidEntry& gid : port.gids) {
      out += fmt::format("    GID[{}] {}", gid.index, gid.text);
      if (gid.ipv4_mapped) {
        const std::string owner = interface_with(gid.ipv4);
        out += fmt::format("  IPv4-mapped: {} ({})", gid.ipv4,
                           owner.empty() ? "no local interface has this address now" : "on " + owner);
      }
      out += "\n";
    }
  }
  // A port that is down is a failure only when no other one is usable (a Mac has Thunderbolt ports without a
  // cable, or with a cable to a Mac outside this job).
  const bool any_usable =
      std::any_of(report.ports.begin(), report.ports.end(), [](const PortReport& port) { return port.usable; });
  for (const PortReport& port : report.ports) {
    if (!port.usable && any_usable) {
      out += fmt::format("SKIP preflight {}: {} (another device is usable)\n", port.device, port.problem);
    } else if (port.usable) {
      out += fmt::format("PASS preflight {}: usable: port {} ACTIVE, IPv4-mapped GID at index {} ({}{}), active MTU {}\n",
                         port.device, port.port, port.ipv4_gid_index, port.ipv4,
                         port.prefix >= 0 ? fmt::format("/{}", port.prefix) : "", port.active_mtu);
    } else {
      out += fmt::format("FAIL preflight {}: {}\n", port.device, port.problem);
      if (!port.fix.empty()) out += fmt::format("     fix: {}\n", port.fix);
    }
  }
  return out;
}

LimitCaps limit_caps(const VerbsApi& verbs, const std::string& device, const LimitCaps& given) {
  LimitCaps caps = given;
  const bool apple = apple_device(verbs, device);
  ibv_device_attr attr{};
  if (caps.queue_pairs <= 0 || caps.registrations <= 0) {
    Opened opened(verbs, device, /*with_pd=*/false);
    if (verbs.query_device(opened.context, &attr) != 0) attr = ibv_device_attr{};
  }
  if (caps.queue_pairs <= 0) {
    const int budget = auto_queue_pair_budget(device, attr.max_qp);
    caps.queue_pairs = budget > 0 ? std::min(budget, kMaxProbedQueuePairs) : kMaxProbedQueuePairs;
  }
  if (caps.registrations <= 0) {
    // A link registers one buffer (at most one link per queue pair); callers get the rest of max_mr (registry.h).
    const bool librdma = verbs.provider.find("librdma") != std::string::npos;
    const RegistrationLimits limits = registration_limits(apple, librdma, attr.max_mr, attr.max_mr_size);
    const int callers = limits.count > 0 ? limits.count : kMaxProbedRegistrations;
    caps.registrations = std::min(caps.queue_pairs + callers, kMaxProbedRegistrations);
  }
  if (caps.receives <= 0) caps.receives = Connection::kSmallDepth;
  if (caps.loopback < 0) caps.loopback = apple ? 0 : 1;
  return caps;
}

LimitReport probe_limits(const VerbsApi& verbs, const std::string& device, Mode mode, const LimitCaps& given) {
  std::vector<std::string> allowed;
  if (!device.empty()) allowed.push_back(device);
  const Found found = probe(verbs, allowed);
  const LimitCaps caps = limit_caps(verbs, found.name, given);
  LimitReport report;
  report.device = found.name;
  report.queue_pairs.what = fmt::format("queue pairs ({})", mode_name(mode));
  report.queue_pairs.cap = caps.queue_pairs;
  report.registrations.what = "memory registrations (4 KiB each)";
  report.registrations.cap = caps.registrations;
  report.receives.what = "outstanding receives (4 KiB each, one queue pair)";
  report.receives.cap = caps.receives;
  auto guarded = [](LimitProbe* probe, auto&& run) {
    try {
      run();
    } catch (const Error& error) {
      probe->error = error.what();
    }
  };
  guarded(&report.queue_pairs, [&] { probe_queue_pairs(verbs, found, mode, &report.queue_pairs); });
  guarded(&report.registrations, [&] { probe_registrations(verbs, found, &report.registrations); });
  if (caps.loopback != 0) {
    guarded(&report.receives, [&] { probe_receives(verbs, found, mode, &report.receives); });
  } else {
    report.receives.skipped =
        "receives are posted only in RTS, which needs a queue pair connected to one of this device's own (tbcoll "
        "never loops one back on Apple's Thunderbolt); the link check posts the transport's receives";
  }
  return report;
}

std::string format_limits(const LimitReport& report) {
  std::string out = fmt::format("limits of {} (each probed up to what tbcoll takes there, then freed):\n",
                                report.device);
  out += format_probe(report.queue_pairs);
  out += format_probe(report.registrations);
  out += format_probe(report.receives);
  // What tbcoll itself needs: two queue pairs and a registration per peer, Connection::kSmallDepth receives on
  // one of them (the bulk lane posts fewer).
  constexpr int kReceives = Connection::kSmallDepth;
  std::vector<std::string> short_of;
  if (!report.queue_pairs.error.empty() || report.queue_pairs.accepted < kQueuePairsPerPeer) {
    short_of.push_back(fmt::format("fewer than the {} queue pairs a peer takes", kQueuePairsPerPeer));
  }
  if (!report.registrations.error.empty() || report.registrations.accepted < 1) short_of.push_back("no registration");
  if (report.receives.skipped.empty() && (!report.receives.error.empty() || report.receives.accepted < kReceives)) {
    short_of.push_back(fmt::format("fewer than the {} outstanding receives the transport posts per peer", kReceives));
  }
  if (short_of.empty()) {
    out += fmt::format("PASS limits {}: room for tbcoll (up to {} peers on this device{})\n", report.device,
                       std::min(report.queue_pairs.accepted / kQueuePairsPerPeer, report.registrations.accepted),
                       report.receives.skipped.empty() ? fmt::format("; {} receives per peer", kReceives) : "");
  } else {
    out += fmt::format("FAIL limits {}: {}\n", report.device, fmt::format("{}", fmt::join(short_of, "; ")));
  }
  return out;
}

}  // namespace tbcoll::ibverbs
