// Set-up phase 2: this rank's identity, its contexts and its published record (setup.h).
#include <unistd.h>

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "common/cpu.h"
#include "common/log.h"
#include "platform/platform.h"
#include "setup/setup.h"

namespace tbcoll::setup {
namespace {

uint64_t process_id() {
  static const uint64_t id = (uint64_t{static_cast<uint32_t>(getpid())} << 32) ^ (random_u64() & 0xffffffffu);
  return id;
}

}  // namespace

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

Identity publish_identity(const Config& config, const env::Settings& settings, const Devices& devices,
                          const Rendezvous& rendezvous, const std::string& secret, int instance, Deadline deadline,
                          const std::atomic<bool>* cancelled) {
  const int rank = config.rank, size = config.world_size;
  Identity out;
  bootstrap::Published& self = out.self;
  self.info = {rank, host_id(settings), process_id(), instance};
  self.kernel = platform::kernel_id();
  self.cpus = allowed_cpus();
  self.world_size = size;
  if (!config.transport.empty() && std::none_of(devices.begin(), devices.end(), [&](const auto& device) {
        return device->name() == config.transport;
      })) {
    std::string names;
    for (const auto& device : devices) names += (names.empty() ? "" : ", ") + device->name();
    throw InvalidArgument(fmt::format("rank {}: TBCOLL_TRANSPORT={:?} names no transport of this process: {} "
                                      "(RDMA, InfiniBand and RoCE are ibverbs; a plug-in joins them through "
                                      "TBCOLL_TRANSPORT_PLUGINS)", rank, config.transport, names));
  }
  for (const auto& device : devices) {
    if (!config.transport.empty() && device->name() != config.transport) continue;
    const transport::Capabilities caps = device->capabilities();
    if (!caps.reliable || !caps.ordered) {  // the schedules need both (transport.hpp)
      log::warn("rank {}: transport {} is not {}: not used", rank, device->name(), caps.reliable ? "ordered" : "reliable");
      continue;
    }
    transport::ContextArgs args{rank,      size,         config.token, rendezvous.bind_host, rendezvous.comm_id,
                                config.timeout_s, cancelled, config.knobs, self.info, secret};
    try {
      out.contexts[device->name()] = device->create_context(args);
    } catch (const InvalidArgument&) {
      throw;  // a setting is wrong (say, TBCOLL_TCP_BUFFER_BYTES): say so rather than drop the transport
    } catch (const Error& error) {
      // A transport that cannot start here (say, /dev/shm too small) is simply not offered: peers then pick
      // the next transport for this rank. Forced, it is an error.
      if (!config.transport.empty()) throw;
      log::warn("rank {}: transport {} unavailable, using the next one: {}", rank, device->name(), error.what());
      continue;
    }
    self.addresses[device->name()] = out.contexts[device->name()]->address();
  }
  if (out.contexts.empty()) {
    throw InvalidArgument(fmt::format("rank {}: transport {:?} is not available here (TBCOLL_TRANSPORT): not built, "
                                      "or nothing it needs on this machine (TBCOLL_DEBUG=INFO says why; tbcoll-info "
                                      "lists the transports)", rank, config.transport));
  }
  rendezvous.store->set(fmt::format("{}/peer/{}", config.prefix, rank), bootstrap::bytes_of(bootstrap::encode(self)),
                        deadline);
  return out;
}

}  // namespace tbcoll::setup
