// What a failed verb means and how to fix it: one place for the ibverbs transport and tbcoll-rdma-check, so a
// user sees the same explanation from both. Apple's Thunderbolt stack reports its limits through plain errnos
// (EBUSY for the 11th queue pair, EINVAL at RTR when the GID has no IPv4 address, EOPNOTSUPP/102 for RC...);
// rdma-core's providers use the same ones for the same causes.
#pragma once

#include <string>

namespace tbcoll::ibverbs::hints {

enum class Verb {
  kGetDeviceList,  ///< ibv_get_device_list returned null or an empty list
  kOpenDevice,
  kQueryPort,
  kAllocPd,
  kRegMr,
  kCreateCq,
  kCreateQp,
  kModifyQpInit,
  kModifyQpRtr,
  kModifyQpRts,
  kPostSend,
  kPostRecv,
  kPollCq,
};

/// "ibv_create_qp", "ibv_modify_qp (to RTR)", ...
const char* verb_name(Verb verb);

/// What the verb needs to know to name the fix: the device ("rdma_en3") and whether the queue pair is RC.
struct Where {
  std::string device;
  bool rc = false;
};

/// The fix for `verb` failing with errno `error` (0: the verb returned null without setting errno), e.g. "device
/// QP limit reached (about 10 on macOS): ..."; "" when nothing specific is known.
std::string fix(Verb verb, int error, const Where& where);

/// "errno 16 (Device or resource busy)".
std::string errno_text(int error);

/// One line: "<verb> on <device> failed: errno N (text): <fix>" (the fix left out when none is known).
std::string describe(Verb verb, int error, const Where& where);

/// The network interface paired with an RDMA device: Linux reads it from sysfs (the netdev behind GID 0), macOS
/// names them alike (rdma_en3 -> en3); "" when unknown.
std::string paired_interface(const std::string& device);

/// The fix for a device whose port has no IPv4-mapped GID: "give en3 an IPv4 address (...)".
std::string no_ipv4_gid_fix(const std::string& device);

/// A completion's status with what it means ("IBV_WC_LOC_LEN_ERR: the send and its receive cover a different
/// number of 4 KiB frames ...").
std::string completion_fix(int status);

}  // namespace tbcoll::ibverbs::hints
