#include "transports/ibverbs/port.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/auth.h"
#include "common/constant_time.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "transports/ibverbs/hints.h"

namespace tbcoll::ibverbs {
namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(5);

bool ipv4_mapped(const ibv_gid& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid.raw[i] != 0) return false;
  }
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

std::string ipv4_of(const ibv_gid& gid) {
  return fmt::format("{}.{}.{}.{}", gid.raw[12], gid.raw[13], gid.raw[14], gid.raw[15]);
}

const char* port_state_name(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    default:
      return "not active";
  }
}

// The device list, freed on every path.
struct DeviceList {
  const VerbsApi& verbs;
  ibv_device** list = nullptr;
  int count = 0;
  explicit DeviceList(const VerbsApi& v) : verbs(v) { list = verbs.get_device_list(&count); }
  ~DeviceList() {
    if (list != nullptr) verbs.free_device_list(list);
  }
};

bool allowed(const std::vector<std::string>& names, const std::string& name) {
  if (names.empty()) return true;
  for (const auto& wanted : names) {
    if (wanted == name) return true;
  }
  return false;
}

// What an opened device offers on port 1; "" in *why_not when usable, else what is wrong.
Found inspect(const VerbsApi& verbs, ibv_context* context, const std::string& name, std::string* why_not) {
  Found found;
  found.name = name;
  ibv_port_attr attr{};
  if (verbs.query_port(context, found.port, &attr) != 0 || attr.state != IBV_PORT_ACTIVE) {
    *why_not = fmt::format("{}: port 1 {} (is the other end's RDMA enabled and the cable in?)", name,
                           port_state_name(attr.state));
    return found;
  }
  found.lid = attr.lid;
  found.mtu = attr.active_mtu;
  for (int index = 0; index < std::max(1, attr.gid_tbl_len) && found.gid_index < 0; ++index) {
    ibv_gid gid{};
    if (verbs.query_gid(context, found.port, index, &gid) == 0 && ipv4_mapped(gid)) {
      found.gid_index = index;
      found.gid = gid;
    }
  }
  *why_not = found.gid_index >= 0 ? "" : fmt::format("{}: no IPv4-mapped GID: {}", name, hints::no_ipv4_gid_fix(name));
  return found;
}

}  // namespace

std::vector<Found> probe_all(const VerbsApi& verbs, const std::vector<std::string>& allowed_names) {
  errno = 0;
  DeviceList devices(verbs);
  if (devices.list == nullptr || devices.count == 0) {
    const int error = errno;
    throw IoError(fmt::format("[ibverbs] no RDMA device: {}", hints::fix(hints::Verb::kGetDeviceList, error, {})));
  }
  std::vector<std::string> seen;
  std::vector<Found> usable;
  for (int d = 0; d < devices.count; ++d) {
    const std::string name = verbs.get_device_name(devices.list[d]);
    if (!allowed(allowed_names, name)) continue;
    ibv_context* context = verbs.open_device(devices.list[d]);
    if (context == nullptr) {
      seen.push_back(fmt::format("{}: cannot open ({})", name, std::strerror(errno)));
      continue;
    }
    std::string why_not;
    const Found found = inspect(verbs, context, name, &why_not);
    verbs.close_device(context);
    if (!why_not.empty()) {
      seen.push_back(why_not);
      continue;
    }
    usable.push_back(found);
  }
  if (!usable.empty()) return usable;
  if (seen.empty()) {
    throw IoError(fmt::format("[ibverbs] none of the RDMA devices is one of TBCOLL_IB_DEVICES={}",
                              fmt::join(allowed_names, ",")));
  }
  throw IoError(fmt::format("[ibverbs] no usable RDMA device: {}", fmt::join(seen, "; ")));
}

std::vector<std::string> device_names(const VerbsApi& verbs) {
  DeviceList devices(verbs);
  std::vector<std::string> names;
  for (int d = 0; devices.list != nullptr && d < devices.count; ++d) names.push_back(verbs.get_device_name(devices.list[d]));
  return names;
}

namespace {

// Whether the device creates an RC queue pair (Apple's refuses with errno 102; rxe and RoCE NICs have it).
bool has_rc(const VerbsApi& verbs, const LocalPort& local) {
  ibv_cq* cq = verbs.create_cq(local.context, 4, nullptr, nullptr, 0);
  if (cq == nullptr) return false;
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 1;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = verbs.create_qp(local.pd, &init);
  const int error = errno;
  if (qp != nullptr) verbs.destroy_qp(qp);
  verbs.destroy_cq(cq);
  if (qp == nullptr) log::info("[ibverbs] {}: no RC queue pair ({}): UC", local.device, std::strerror(error));
  return qp != nullptr;
}

}  // namespace

Port::Port(const VerbsApi& verbs, const std::string& presence, const std::string& device, const PortOptions& options)
    : verbs_(verbs), options_(options) {
  const std::string& name = device;
  {
    DeviceList devices(verbs_);
    for (int d = 0; d < devices.count && local_.context == nullptr; ++d) {
      if (name == verbs_.get_device_name(devices.list[d])) local_.context = verbs_.open_device(devices.list[d]);
    }
  }
  if (local_.context == nullptr) throw IoError(fmt::format("[ibverbs] {}: cannot open the device", name));
  // The port as this context sees it (each context of a fake fabric is a port of its own).
  std::string why_not;
  const Found found = inspect(verbs_, local_.context, name, &why_not);
  if (!why_not.empty()) {
    verbs_.close_device(local_.context);
    throw IoError("[ibverbs] " + why_not);
  }
  local_.verbs = &verbs_;
  local_.device = found.name;
  local_.port = found.port;
  local_.gid_index = found.gid_index;
  local_.gid = found.gid;
  local_.lid = found.lid;
  local_.mtu = found.mtu;
  local_.pd = verbs_.alloc_pd(local_.context);
  if (local_.pd == nullptr) {
    verbs_.close_device(local_.context);
    throw IoError(fmt::format("[ibverbs] {}", hints::describe(hints::Verb::kAllocPd, errno, {found.name})));
  }
  local_.auto_mode = options_.auto_mode;
  // Lists of work requests in one ibv_post_send: untried on Apple's provider, so one at a time there by default.
  local_.post_batch = options_.post_batch > 0 ? options_.post_batch : verbs_.provider == "librdma.dylib" ? 1 : 16;
  local_.mode = options_.auto_mode ? (has_rc(verbs_, local_) ? Mode::kRc : Mode::kUc) : options_.mode;
  std::random_device random;
  key_ = fmt::format("{}.{}.{:08x}", presence, found.name, random());
  try {
    listen_fd_ = net::listen_tcp(options_.listen_host.empty() ? "127.0.0.1" : options_.listen_host, &listen_address_,
                                 "[ibverbs] side channel");
  } catch (...) {
    verbs_.dealloc_pd(local_.pd);
    verbs_.close_device(local_.context);
    throw;
  }
  log::info("[ibverbs] port {} on {} (GID {} at index {}, {} mode{})", key_, found.name, ipv4_of(found.gid),
            found.gid_index, mode_name(local_.mode), local_.auto_mode ? ", chosen automatically" : "");
}

Port::~Port() {
  connections_.clear();  // queue pairs and MRs before their PD and device
  if (listen_fd_ >= 0) close(listen_fd_);
  verbs_.dealloc_pd(local_.pd);
  verbs_.close_device(local_.context);
}

std::string Port::address() const {
  return fmt::format("{}|{}|{}|{}{}", key_, listen_address_, local_.device, mode_name(local_.mode),
                     local_.auto_mode ? "+auto" : "");
}

PortAddress Port::parse(const std::string& address) {
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    const size_t bar = address.find('|', start);
    fields.push_back(address.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  PortAddress out;
  const bool shape = fields.size() == 4 && !fields[0].empty() && fields[0].size() < wire::kMaxKeyBytes &&
                     !fields[1].empty() && !fields[2].empty();
  if (shape) {
    out.key = fields[0];
    out.side_channel = fields[1];
    out.device = fields[2];
    std::string mode = fields[3];
    const std::string suffix = "+auto";
    if (mode.size() > suffix.size() && mode.compare(mode.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.auto_mode = true;
      mode.resize(mode.size() - suffix.size());
    }
    if (mode == "uc" || mode == "rc") {
      out.mode = mode == "rc" ? Mode::kRc : Mode::kUc;
      return out;
    }
  }
  throw InvalidArgument(fmt::format("[ibverbs] malformed port address {:?}", address));
}

std::shared_ptr<Connection> Port::find(const std::string& peer_key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = connections_.find(peer_key);
  return it != connections_.end() && it->second->alive() ? it->second : nullptr;
}

std::shared_ptr<Connection> Port::dial(const PortAddress& peer, Deadline deadline, const std::atomic<bool>* cancelled) {
  if (peer.key == key_) {
    throw InvalidUsage(
        fmt::format("[ibverbs] port {}: asked to connect to itself (two ranks with one identity: "
                    "ContextArgs::self)",
                    key_));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = connections_.find(peer.key);
  if (it != connections_.end() && it->second->alive()) return it->second;
  auto connection = dial_locked(peer, deadline, cancelled);
  connections_[peer.key] = connection;
  return connection;
}

std::shared_ptr<Connection> Port::dial_locked(const PortAddress& peer, Deadline deadline,
                                              const std::atomic<bool>* cancelled) {
  const std::string who = fmt::format("[ibverbs] port {}: dialing {} at {}", key_, peer.key, peer.side_channel);
  const Mode mode = pair_mode(local_.mode, local_.auto_mode, peer.mode, peer.auto_mode, who);
  const int fd =
      net::connect_tcp(net::parse_host_port(peer.side_channel, "ibverbs side channel"), deadline, who, cancelled);
  std::shared_ptr<Connection> connection;
  try {
    if (!options_.secret.empty()) auth::initiate(fd, options_.secret, "tbcoll ibverbs", options_.token, deadline, who, cancelled);
    connection = std::make_shared<Connection>(local_, mode, peer.key, fd);
  } catch (...) {
    close(fd);
    throw;
  }
  send_hello(fd, *connection, deadline, cancelled);
  wire::Hello theirs;
  if (!read_hello(fd, &theirs, deadline, cancelled) || peer.key != theirs.key) {
    throw IoError(fmt::format("{}: the port there is not the one published (another job, or a stale address)", who));
  }
  connection->establish(theirs, deadline, cancelled);
  return connection;
}

void Port::accept_one(Deadline deadline, const std::atomic<bool>* cancelled, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {  // another set-up of this port is accepting: it will file the connection
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  pollfd watch{listen_fd_, POLLIN, 0};
  if (poll(&watch, 1, static_cast<int>(wait.count())) <= 0 || (watch.revents & POLLIN) == 0) return;
  const int fd = net::accept_tcp(listen_fd_);
  if (fd < 0) return;
  const Deadline limit = std::min(deadline, Clock::now() + kHandshakeTimeout);
  wire::Hello theirs;
  bool ours = false;
  try {
    std::string why;
    if (!options_.secret.empty() &&
        !auth::respond(fd, options_.secret, "tbcoll ibverbs", options_.token, limit,
                       fmt::format("[ibverbs] port {}: side channel", key_), cancelled, &why)) {
      log::warn("[ibverbs] port {}: rejected a side channel: {}", key_, why);
    } else {
      ours = read_hello(fd, &theirs, limit, cancelled);
    }
  } catch (const RemoteError&) {
  } catch (const TimeoutError&) {
    log::warn("[ibverbs] port {}: dropped a side channel that sent no complete handshake", key_);
  } catch (const IoError&) {
  }
  if (!ours) {
    close(fd);
    return;
  }
  const std::string peer_key = theirs.key;
  const std::string who = fmt::format("[ibverbs] port {}: call from {}", key_, peer_key);
  std::shared_ptr<Connection> connection;
  try {
    const Mode mode =
        pair_mode(local_.mode, local_.auto_mode, static_cast<Mode>(theirs.mode & 0x0f), (theirs.mode & 0x10) != 0, who);
    connection = std::make_shared<Connection>(local_, mode, peer_key, fd);
  } catch (...) {
    close(fd);
    throw;
  }
  send_hello(fd, *connection, deadline, cancelled);
  connection->establish(theirs, deadline, cancelled);
  connections_[peer_key] = connection;
}

void Port::send_hello(int fd, const Connection& connection, Deadline deadline, const std::atomic<bool>* cancelled) {
  wire::Hello hello = connection.hello(key_);
  hello.token_bytes = static_cast<uint32_t>(options_.token.size());
  const std::string who = fmt::format("[ibverbs] port {}: handshake with {}", key_, connection.peer_key());
  net::write_all(fd, &hello, sizeof(hello), deadline, who, cancelled);
  if (!options_.token.empty())
    net::write_all(fd, options_.token.data(), options_.token.size(), deadline, who, cancelled);
}

bool Port::read_hello(int fd, wire::Hello* hello, Deadline deadline, const std::atomic<bool>* cancelled) {
  const std::string who = fmt::format("[ibverbs] port {}: handshake", key_);
  net::read_exact(fd, hello, sizeof(*hello), deadline, who, cancelled);
  if (!wire::hello_acceptable(*hello)) {
    log::warn("[ibverbs] port {}: rejected a side channel: not a tbcoll ibverbs handshake (or another version)", key_);
    return false;
  }
  std::string token(hello->token_bytes, '\0');
  if (!token.empty()) net::read_exact(fd, token.data(), token.size(), deadline, who, cancelled);
  if (!constant_time_equal(token, options_.token)) {
    log::warn("[ibverbs] port {}: rejected a side channel from {}: wrong job token", key_, hello->key);
    return false;
  }
  if (key_ != hello->peer_key) {
    log::warn("[ibverbs] port {}: rejected a side channel from {} meant for port {}", key_, hello->key,
              hello->peer_key);
    return false;
  }
  return true;
}

}  // namespace tbcoll::ibverbs
