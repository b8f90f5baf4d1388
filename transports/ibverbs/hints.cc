#include "transports/ibverbs/hints.h"

#include <errno.h>

#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "transports/ibverbs/verbs.h"

namespace tbcoll::ibverbs::hints {
namespace {

// Apple's stack reports RC refused with errno 102 (EOPNOTSUPP on macOS; ERESTART on Linux, never from a verb).
bool not_supported(int error) { return error == EOPNOTSUPP || error == ENOTSUP || error == 102; }

std::string device_or(const Where& where) { return where.device.empty() ? std::string("the device") : where.device; }

}  // namespace

const char* verb_name(Verb verb) {
  switch (verb) {
    case Verb::kGetDeviceList:
      return "ibv_get_device_list";
    case Verb::kOpenDevice:
      return "ibv_open_device";
    case Verb::kQueryPort:
      return "ibv_query_port";
    case Verb::kAllocPd:
      return "ibv_alloc_pd";
    case Verb::kRegMr:
      return "ibv_reg_mr";
    case Verb::kCreateCq:
      return "ibv_create_cq";
    case Verb::kCreateQp:
      return "ibv_create_qp";
    case Verb::kModifyQpInit:
      return "ibv_modify_qp (to INIT)";
    case Verb::kModifyQpRtr:
      return "ibv_modify_qp (to RTR)";
    case Verb::kModifyQpRts:
      return "ibv_modify_qp (to RTS)";
    case Verb::kPostSend:
      return "ibv_post_send";
    case Verb::kPostRecv:
      return "ibv_post_recv";
    case Verb::kPollCq:
      return "ibv_poll_cq";
  }
  return "a verb";
}

std::string errno_text(int error) {
  if (error == 0) return "no errno";
  return fmt::format("errno {} ({})", error, std::strerror(error));
}

std::string paired_interface(const std::string& device) {
  if (device.empty()) return "";
  // Linux: the netdev behind the port's GIDs (rxe0 -> its netdev, mlx5_0 -> enp1s0f0np0).
  std::ifstream ndev("/sys/class/infiniband/" + device + "/ports/1/gid_attrs/ndevs/0");
  std::string name;
  if (ndev && std::getline(ndev, name) && !name.empty()) return name;
  // macOS: rdma_en3 is the RDMA side of en3.
  if (device.rfind("rdma_", 0) == 0 && device.size() > 5) return device.substr(5);
  return "";
}

std::string no_ipv4_gid_fix(const std::string& device) {
  const std::string netdev = paired_interface(device);
  if (netdev.empty()) {
    return fmt::format("give the network interface paired with {} an IPv4 address (its IPv4-mapped GID appears then)",
                       device);
  }
  return fmt::format(
      "give {} an IPv4 address (the network interface paired with {}; its IPv4-mapped GID appears then: on macOS "
      "the Thunderbolt interface itself, not the Thunderbolt Bridge (disable the bridge: it holds the interfaces), "
      "a /30 per cable, e.g. `sudo ifconfig {} inet 10.10.1.1/30` here and 10.10.1.2/30 at the other end, as "
      "mlx.distributed_config does (a link-local 169.254 address vanishes for minutes when the link renegotiates); "
      "on Linux `ip addr add 10.0.0.1/24 dev {}`)",
      netdev, device, netdev, netdev);
}

std::string fix(Verb verb, int error, const Where& where) {
  const std::string device = device_or(where);
  switch (verb) {
    case Verb::kGetDeviceList:
      if (error == ENOSYS) {
        return "this kernel has no RDMA support (ENOSYS): on Linux load the driver's module (or rdma_rxe for "
               "Soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`); on a Mac, macOS 26.2+ with Thunderbolt 5";
      }
      return "no RDMA device: on a Mac enable RDMA once in Recovery (`rdma_ctl enable`, reboot) and connect a "
             "Thunderbolt 5 cable to a Mac that did the same; on Linux load the driver (or rdma_rxe for Soft-RoCE)";
    case Verb::kOpenDevice:
      if (error == EACCES || error == EPERM)
        return "no permission on /dev/infiniband/uverbs* (add the user to the rdma group)";
      return "";
    case Verb::kQueryPort:
      return "";
    case Verb::kAllocPd:
      return fmt::format(
          "is {}'s port down? (Apple's provider refuses a PD when the Mac at the other end of the cable "
          "has no RDMA enabled)",
          device);
    case Verb::kRegMr:
      if (error == ENOMEM || error == EAGAIN) {
        return "memory registration limit reached (about 100 per device on macOS), or the locked-memory limit "
               "(`ulimit -l`; unlimited for RDMA on Linux)";
      }
      if (error == EFAULT) return "the buffer is not mapped memory";
      return "";
    case Verb::kCreateCq:
      if (error == ENOMEM || error == EINVAL) return "the device refused the completion queue's size";
      return "";
    case Verb::kCreateQp:
      if (error == EBUSY) {
        return "device QP limit reached (about 10 on macOS, per device and process): close other RDMA programs, "
               "or use fewer peers per device";
      }
      if (not_supported(error) && where.rc) return "this device supports UC only: set TBCOLL_IB_MODE=uc";
      if (not_supported(error)) return "this queue pair type is not supported by the device";
      if (error == EINVAL) {
        return "the device refused the queue sizes (Apple: at most 4095 work requests, one SGE, no inline data)";
      }
      if (error == ENOMEM) return "out of queue pair resources (ulimit -l?)";
      return "";
    case Verb::kModifyQpInit:
      return error == EINVAL ? "the device refused the port (is it the active one?) or pkey index 0" : "";
    case Verb::kModifyQpRtr:
      if (not_supported(error) && where.rc) return "this device supports UC only: set TBCOLL_IB_MODE=uc";
      if (error == EINVAL) {
        return fmt::format("no IPv4-mapped GID on {} (or the Thunderbolt Bridge still holds its interface): {}", device,
                           no_ipv4_gid_fix(device));
      }
      if (error == ETIMEDOUT || error == EHOSTUNREACH || error == 60) {
        return "the peer's GID is unreachable (is the cable in, and both ends' interfaces up with IPv4 addresses?)";
      }
      return "";
    case Verb::kModifyQpRts:
      if (not_supported(error) && where.rc) return "this device supports UC only: set TBCOLL_IB_MODE=uc";
      return "";
    case Verb::kPostSend:
      if (error == ENOMEM) return "the send queue is full (more frames in flight than max_send_wr)";
      if (error == EINVAL) {
        return "the queue pair is not in RTS, or the work request uses more than Apple's subset (IBV_WR_SEND, one "
               "SGE, at most 16,773,120 bytes)";
      }
      return "";
    case Verb::kPostRecv:
      if (error == ENOMEM) {
        return "more receives outstanding than the device accepts (about 32 on some macOS versions; queue depth "
               "is counted in 4 KiB frames)";
      }
      if (error == EINVAL) return "receives may be posted only once the queue pair is in RTS (Apple), with one SGE";
      return "";
    case Verb::kPollCq:
      return "the completion queue overran (more completions outstanding than its entries) or the device failed";
  }
  return "";
}

std::string describe(Verb verb, int error, const Where& where) {
  const std::string hint = fix(verb, error, where);
  return fmt::format("{}{} failed: {}{}{}", verb_name(verb), where.device.empty() ? "" : " on " + where.device,
                     errno_text(error), hint.empty() ? "" : ": ", hint);
}

std::string completion_fix(int status) {
  switch (status) {
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR: the send and its receive cover a different number of 4 KiB frames (Apple requires "
             "the same count), or the message is larger than the receive";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR: a buffer outside its memory registration";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR: the queue pair went to the error state (an earlier failure), work flushed";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR: the peer does not answer (RC retries exhausted: cable, or the peer is gone)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR: the peer had no receive posted";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR: the peer refused the request (message larger than its receive?)";
    default:
      return fmt::format("completion status {} ({})", status, wc_status_name(status));
  }
}

}  // namespace tbcoll::ibverbs::hints
