#include "transports/ibverbs/port.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
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
#include "platform/platform.h"
#include "transports/ibverbs/hints.h"
#include "transports/ibverbs/registry.h"

namespace tbcoll::ibverbs {
namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
constexpr const char* kAuthProtocol = "tbcoll ibverbs";

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
  device_ = opened_device(verbs_, name);  // the process's: opened by its first probe, kept open
  local_.context = device_->context;
  // The port as the device sees it now (each context of a fake fabric is a port of its own).
  std::string why_not;
  const Found found = inspect_port(verbs_, local_.context, name, &why_not);
  if (!why_not.empty()) throw IoError("[ibverbs] " + why_not);
  local_.verbs = &verbs_;
  local_.device = found.name;
  local_.port = found.port;
  local_.gid_index = found.gid_index;
  local_.gid = found.gid;
  local_.lid = found.lid;
  local_.mtu = found.mtu;
  local_.pd = device_->protection_domain();
  local_.auto_mode = options_.auto_mode;
  const bool apple = apple_device(verbs_, found.name);
  local_.apple = apple;
  const bool librdma = verbs_.provider.find("librdma") != std::string::npos;
  {
    // Once per opened device: its registrations are counted across every port of the process.
    ibv_device_attr attr{};
    if (verbs_.query_device(local_.context, &attr) != 0) attr = ibv_device_attr{};
    max_qp_ = std::max(0, attr.max_qp);
    std::lock_guard<std::mutex> lock(device_->mutex);
    if (!device_->configured) {
      const RegistrationLimits limits = registration_limits(apple, librdma, attr.max_mr, attr.max_mr_size);
      device_->registration_limit = limits.count;
      device_->max_registration_bytes = limits.bytes;
      device_->configured = true;
    }
  }
  // Lists of work requests in one ibv_post_send: untried on Apple's librdma, so one at a time there by default.
  local_.post_batch = options_.post_batch > 0 ? options_.post_batch : librdma ? 1 : 16;
  int major = 0, minor = 0;
  platform::macos_version(&major, &minor);
  const size_t slot_bytes = options_.slot_bytes > 0 ? options_.slot_bytes
                                                   : wire::slot_bytes_for(librdma, major, minor, found.max_msg_bytes);
  // No slot size: frames only (the hello still names a valid size; without a bulk queue pair it is not used).
  frames_only_ = slot_bytes == 0;
  if (frames_only_) bulk_lanes_ = false;
  local_.slot_bytes = frames_only_ ? wire::kMinSlotBytes : slot_bytes;
  local_.payload_sum = options_.payload_sum;
  // Zero-copy is unverified on Apple's stack (its peers only ever send whole page-aligned buffers of their own):
  // off there unless asked for, after tbcoll-rdma-check's zero-copy case passed on the machine.
  local_.zero_copy = options_.zero_copy == 1   ? kZeroCopyOn
                     : options_.zero_copy == 0 ? kZeroCopyOff
                     : librdma                 ? kZeroCopyOff
                                               : kZeroCopyOnRc;
  // auto: Apple's Thunderbolt stack is UC only, so its ports are not probed for RC (the probe would spend one of
  // their 10 queue pairs just to be refused).
  local_.mode = !options_.auto_mode                ? options_.mode
                : apple                            ? Mode::kUc
                : has_rc(verbs_, local_)           ? Mode::kRc
                                                   : Mode::kUc;
  std::random_device random;
  key_ = fmt::format("{}.{}.{:08x}", presence, found.name, random());
  try {
    listen_fd_ = net::listen_tcp(options_.listen_host.empty() ? "127.0.0.1" : options_.listen_host, &listen_address_,
                                 "[ibverbs] side channel");
  } catch (...) {
    device_.reset();
    throw;
  }
  log::info("[ibverbs] port {} on {} (GID {} at index {}, {} mode{})", key_, found.name, ipv4_of(found.gid),
            found.gid_index, mode_name(local_.mode), local_.auto_mode ? ", chosen automatically" : "");
}

Port::~Port() {
  connections_.clear();  // queue pairs and MRs before their PD and device
  if (listen_fd_ >= 0) close(listen_fd_);
  device_.reset();  // the process's stays open; a port's own closes now, or once its last registration goes
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
    connection = std::make_shared<Connection>(local_, mode, peer.key, fd, bulk_lanes_);
  } catch (...) {
    close(fd);
    throw;
  }
  // Hello first, then the proof of the secret over the two ports' keys (whose ranks and processes they name):
  // a proof relayed to another port than the one this dialed does not hold there.
  send_hello(fd, *connection, deadline, cancelled);
  if (!options_.secret.empty()) {
    auth::initiate(fd, options_.secret, kAuthProtocol, wire::side_channel_context(options_.token, key_, peer.key),
                   deadline, who, cancelled);
  }
  wire::Hello theirs;
  if (!read_hello(fd, &theirs, deadline, cancelled) || peer.key != theirs.key) {
    throw IoError(fmt::format("{}: the port there is not the one published (another job, or a stale address)", who));
  }
  connection->establish(theirs, deadline, cancelled);
  return connection;
}

// Reads a caller's hello and, with a job secret, checks its proof over both ports' keys; false (logged) if it is
// not one of ours.
bool Port::admit(int fd, wire::Hello* theirs, Deadline limit, const std::atomic<bool>* cancelled) {
  try {
    if (!read_hello(fd, theirs, limit, cancelled)) return false;
    const bool proves = (theirs->flags & wire::kHelloWithSecret) != 0;
    if (proves != !options_.secret.empty()) {
      log::warn("[ibverbs] port {}: rejected a side channel from {}: {}", key_, theirs->key,
                proves ? "it has a job secret and this rank none" : "it has no job secret (TBCOLL_SECRET)");
      return false;
    }
    std::string why;
    if (proves && !auth::respond(fd, options_.secret, kAuthProtocol,
                                 wire::side_channel_context(options_.token, theirs->key, key_), limit,
                                 fmt::format("[ibverbs] port {}: side channel", key_), cancelled, &why)) {
      log::warn("[ibverbs] port {}: rejected a side channel from {}: {}", key_, theirs->key, why);
      return false;
    }
    return true;
  } catch (const TimeoutError&) {
    log::warn("[ibverbs] port {}: dropped a side channel that sent no complete handshake", key_);
  } catch (const RemoteError&) {
  } catch (const IoError&) {
  }
  return false;
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
  wire::Hello theirs;
  if (!admit(fd, &theirs, std::min(deadline, Clock::now() + kHandshakeTimeout), cancelled)) {
    close(fd);
    return;
  }
  const std::string peer_key = theirs.key;
  const std::string who = fmt::format("[ibverbs] port {}: call from {}", key_, peer_key);
  std::shared_ptr<Connection> connection;
  try {
    const Mode mode =
        pair_mode(local_.mode, local_.auto_mode, static_cast<Mode>(theirs.mode & 0x0f), (theirs.mode & 0x10) != 0, who);
    connection = std::make_shared<Connection>(local_, mode, peer_key, fd, bulk_lanes_);
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
  if (!options_.secret.empty()) hello.flags |= wire::kHelloWithSecret;
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
