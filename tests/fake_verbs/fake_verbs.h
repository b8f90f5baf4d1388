// A fake verbs provider for the tests: an in-process fabric behind VerbsApi (transports/ibverbs/verbs.h), so the
// ibverbs transport, its conformance suite and the collective tests run without RDMA hardware, with Apple's
// Thunderbolt limits enforced (Options::apple_strict) and faults injected on demand.
//
// The fabric is process-wide: ranks are threads, each opening its own device contexts. A context is opened on a
// host: the one the opening thread named with set_thread_host(), else a host of its own (as if each rank were a
// Mac). The contexts of one device on one host are one port: they share its GIDs and its queue pair and
// registration budgets (Apple's limits are per device). Everything the table does happens under one fabric mutex,
// so any thread may call any function; delivery is synchronous inside post_send. The structs handed out
// (ibv_device, ibv_context, ibv_pd, ibv_mr, ibv_cq, ibv_qp) are rdma-core's, allocated by the fake; their ops
// tables are null, so calling rdma-core's inline ibv_post_send() on them crashes: go through the table. Nothing
// links libibverbs.
//
// Two topologies. Switched (Options::cables empty): every port reaches every other, each device's ports on a
// subnet of their own (rdma_en0's 10.9.0.0/16, rdma_en1's 10.10.0.0/16...), like RoCE NICs on rail networks or
// every rank on one rxe device. Cabled (Options::cables given): each
// cable joins one port of one host to one port of another, point to point, on a subnet of its own (cable c:
// 10.77.c.1 and 10.77.c.2, /30, as mlx.distributed_config numbers Thunderbolt cables); a port on no cable is DOWN,
// and a port reaches only the port across its cable, as a Thunderbolt port reaches one Mac.
//
// What the fabric enforces (Apple-strict unless noted; "permissive" = apple_strict false, a RoCE-like device):
// - Devices rdma_en0.. (roce0.. permissive); query_device says Options::active_port ports, of which only active_port is ACTIVE (Apple's
//   active port is not always 1), active_mtu IBV_MTU_1024, max_mtu 4096, link layer Ethernet, max_msg_sz
//   16,773,120 (Apple's) strict, max_mr_size 2^32 strict (Options::max_message_bytes, max_mr_bytes), max_mr
//   Options::max_mrs. GID table: index 0 a link-local fe80::/64 GID, Options::ipv4_gid_index the
//   IPv4-mapped one (switched: ::ffff:10.(9 + device).0.k, k = 1 for the first port made since reset(), 2 for the
//   next...),
//   other indexes an fd00:: GID (not IPv4). query_gid beyond the table, or a port beyond the device's: EINVAL.
//   ipv4_prefix answers for these addresses (16 switched, 30 cabled).
// - reg_mr: strict, only with local write, remote read and remote write (Apple refuses a local-write-only
//   registration, even for SEND/RECV) and at an address on a 16 KiB boundary (Apple silicon's page): EINVAL
//   otherwise; permissive, REMOTE_WRITE/ATOMIC need LOCAL_WRITE (EINVAL). At most max_mrs per port (ENOMEM). Every
//   SGE must lie inside an MR of the QP's PD with that lkey (a receive also needs LOCAL_WRITE): else the WR
//   completes with IBV_WC_LOC_PROT_ERR (a send at once, a receive when a message reaches it) and the QP goes to ERR.
// - create_qp: UC only strict (RC: EOPNOTSUPP; UD and SRQ: EOPNOTSUPP in both modes); at most max_qps live QPs per
//   port, whichever context made them (EBUSY); max_send_sge/max_recv_sge 1 strict (4 permissive),
//   max_send_wr/max_recv_wr <= 4095 strict (16384 permissive), no inline data strict (256 bytes permissive):
//   EINVAL beyond.
// - modify_qp: the transitions and attribute masks of the kernel's ib_modify_qp_is_ok() (what rxe applies):
//   RESET->INIT needs STATE|PKEY_INDEX|PORT|ACCESS_FLAGS (the active port, pkey 0); INIT->RTR needs STATE|AV|
//   PATH_MTU|DEST_QPN|RQ_PSN (RC also MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER), optional ACCESS_FLAGS|PKEY_INDEX|ALT_PATH;
//   RTR->RTS needs STATE|SQ_PSN (RC also TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC), optional CUR_STATE|
//   ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE (RC also MIN_RNR_TIMER); any state -> RESET, and any but RESET -> ERR, with
//   STATE alone. A missing or unexpected mask bit: EINVAL (rxe refuses UC attributes such as TIMEOUT). RTR: path_mtu
//   256..4096, ah_attr.is_global 1, port_num the active port, grh.sgid_index the IPv4-mapped GID (strict; any
//   non-zero GID permissive), grh.dgid some port's GID in the fabric (strict: its IPv4-mapped one): else EINVAL; so
//   no IPv4 GID (ipv4_gid_index -1) means RTR fails EINVAL. Cabled, a dgid that is not across this port's cable:
//   ETIMEDOUT (Apple's errno 60 for an unreachable GID).
// - post_recv: QP in RTS strict (INIT, RTR or RTS permissive), else EINVAL; num_sge <= max_recv_sge; length at most
//   max_msg_sz (Options::max_message_bytes), else EINVAL; posted, not
//   completed receives at most max_outstanding_recvs (strict) and at most max_recv_wr, counted in 4 KiB frames
//   strict (Apple: an 8 KiB receive takes 2 places): ENOMEM beyond.
// - post_send: QP in RTS, else EINVAL; strict: IBV_WR_SEND only (others EINVAL); permissive also SEND_WITH_IMM,
//   RDMA_WRITE and RDMA_WRITE_WITH_IMM (remote range inside an MR of the peer with that rkey and REMOTE_WRITE);
//   num_sge <= max_send_sge; length <= max_msg_sz; strict with Options::aligned_sends (the default), every SGE's
//   address a multiple of 4 KiB (conservative: Apple's stack might refuse a SEND from inside a frame, and MLX's
//   JACCL and llama.cpp's Apple transport only send whole page-aligned buffers): else EINVAL; room in the send
//   queue: a WR holds max_send_wr places (4 KiB frames strict, 1 permissive) until a completion of it or of a later
//   WR of the QP is polled (as mlx5 does: unsignaled WRs are freed only by a later signaled one), else ENOMEM. The
//   WRs of a list are taken in order; the first bad one is returned in *bad and the earlier ones stay posted.
// - Errors of post_send and post_recv are returned as Apple returns them, strict: the negated errno (-12 for
//   ENOMEM), errno itself set to 0; permissive as rdma-core: the errno value. modify_qp and the destroy calls
//   return the errno value; the calls returning a pointer return null with errno set.
// - Delivery: the destination is the QP with number dest_qp_num on the port owning dgid (and reached from the
//   sender's port), in RTR or RTS. With a receive posted: strict, the message and the receive buffer must span the
//   same number of 4 KiB frames (ceil(len / 4096), at least 1), permissive the message must fit; else the receive
//   completes with IBV_WC_LOC_LEN_ERR (and that QP goes to ERR); otherwise the data is copied and the receive
//   completes (IBV_WC_RECV, byte_len, qp_num, src_qp). byte_len: strict with Options::round_byte_len (the default),
//   the message's length rounded up to whole 4 KiB frames (at least one), capped at the posted receive's length
//   (conservative: Apple's provider might report that); only the sent bytes are copied, the rest of the receive
//   buffer keeps what it held, so a receiver must learn the length from the payload; else the message's length.
//   With no receive posted: UC drops the message silently; RC keeps it until a receive is posted (real RC retries),
//   and the RC send completion comes only with the delivery.
//   A UC send completion (IBV_WC_SEND) is written when the WR is signaled or the QP has sq_sig_all, delivered or not.
// - Error completions (any status but success) are always written, and put the QP in ERR: its posted receives are
//   flushed (IBV_WC_WR_FLUSH_ERR), and later posts complete at once with IBV_WC_WR_FLUSH_ERR.
// - CQs: poll_cq returns up to n completions, oldest first. More completions than the CQ's entries is an overrun:
//   every later poll of that CQ returns -1 (real CQs go to error too).
// - destroy_cq with QPs on it, dealloc_pd with QPs or MRs on it: EBUSY. close_device frees what is left.
//
// Thread safety: every function may be called from any thread. reset() invalidates every pointer handed out.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "transports/ibverbs/verbs.h"

namespace tbcoll::ibverbs::fake {

/// A Thunderbolt cable: device device_a of host host_a to device device_b of host host_b (hosts as named by
/// set_thread_host, devices as in rdma_en<device>).
struct Cable {
  int host_a = 0, device_a = 0, host_b = 0, device_b = 0;
};

struct Options {
  /// Enforce Apple's Thunderbolt limits; false: a permissive RoCE-like device that also allows RC and RDMA WRITE.
  bool apple_strict = true;
  /// Devices listed: rdma_en0, rdma_en1, ... strict (Apple's names, for which the transport never tries RC);
  /// roce0, roce1, ... permissive.
  int devices = 1;
  /// Live QPs per port (a device of a host, whatever contexts it has open): the next create_qp fails with EBUSY.
  int max_qps = 10;
  /// Live MRs per port: the next reg_mr fails with ENOMEM.
  int max_mrs = 100;
  /// The ports each device has (query_device), and the one that is ACTIVE: this one, the last.
  int active_port = 1;
  /// Point-to-point cables between the hosts' ports (the cabled topology); empty: one switched subnet.
  std::vector<Cable> cables;
  /// Cabled: every cable end on link-local 169.254.c.1 or .2 /16 (what a Mac gives a Thunderbolt port left to
  /// itself), all on one subnet, instead of a /30 per cable.
  bool link_local = false;
  /// Posted, not yet completed receives per QP (strict): ENOMEM beyond.
  int max_outstanding_recvs = 32;
  /// Where the ::ffff:10.9.0.k GID sits (Apple: usually 1, sometimes 2); -1: none (RTR fails with EINVAL, as on a
  /// Mac whose Thunderbolt interface has no IPv4 address).
  int ipv4_gid_index = 1;
  /// get_device_list returns null with errno ENOSYS, as rdma-core does on a kernel without RDMA.
  bool no_kernel_support = false;
  /// The injected send faults below (drop, corrupt, fail a completion) hit only sends from contexts of device
  /// rdma_en<faulty_device>, as one flaky cable among several would; -1: sends anywhere.
  int faulty_device = -1;
  /// Ports are ACTIVE; false: IBV_PORT_DOWN, and alloc_pd returns null (errno EIO), as Apple's provider does when
  /// the Mac at the other end of the cable has no RDMA.
  bool ports_active = true;
  /// A UC SEND of more than one 4 KiB frame is delivered only after the next SEND posted anywhere (its sender's
  /// completion comes at once): a slot on one queue pair overtaken by a frame posted after it on another, as two
  /// queue pairs are free to deliver.
  bool overtake_slots = false;
  /// The largest SEND and receive (query_port's max_msg_sz says it; post_send and post_recv refuse longer ones
  /// with EINVAL); 0: 16,773,120 strict, 2^31 permissive. 4096 models Apple's stack before macOS 26.3 read
  /// conservatively: MLX's JACCL uses nothing above a 4 KiB frame there.
  uint32_t max_message_bytes = 0;
  /// query_device's max_mr_size; 0: 2^32 strict (a published measurement saw silent corruption past 2^32 bytes in
  /// one registration on Apple's stack), 2^40 permissive. A longer registration is taken, as Apple's was, and
  /// counted (Counters::oversized_registrations): a transport must not ask for one.
  uint64_t max_mr_bytes = 0;
  /// create_qp grants at most this many send and receive work requests (max_send_wr, max_recv_wr written back into
  /// the caller's ibv_qp_init_attr, and enforced as the queue's depth), as a provider that grants less than asked
  /// does; 0: what was asked (within the limits above).
  uint32_t max_granted_wr = 0;
  /// Strict: a successful receive's byte_len is the message's length rounded up to whole 4 KiB frames (at least
  /// 4096), capped at the posted receive's length, as Apple's provider might report it (only the sent bytes
  /// are copied); false: the exact length. Permissive mode always reports the exact length.
  bool round_byte_len = true;
  /// Strict: post_send refuses (EINVAL, negated) a WR with an SGE address that is not a multiple of 4 KiB, as
  /// Apple's stack might refuse a SEND whose source is not frame-aligned; false: any address in the MR. Permissive
  /// mode takes any address.
  bool aligned_sends = true;
};

/// A fresh fabric with these options: every earlier device, context and resource is gone (tests call it first).
void reset(const Options& options = Options{});

/// A test's fabric: reset(options) when made, reset() (every device, context and resource gone) when it ends.
struct ScopedFabric {
  explicit ScopedFabric(const Options& options = Options{}) { reset(options); }
  ~ScopedFabric() { reset(); }
  ScopedFabric(const ScopedFabric&) = delete;
  ScopedFabric& operator=(const ScopedFabric&) = delete;
};

/// The function table, bound to the process-wide fabric; provider "fake". The pointer stays valid across reset().
const VerbsApi* verbs();

/// The host the calling thread's contexts open on from now on (a rank's Mac); -1 (the default): a host of its own
/// for each context. The table's VerbsApi::open_scope names that host (and the fabric since the last reset()), so
/// the transport opens each device once per host, as once per process on a real one; with no host it says every
/// opening is a host of its own.
void set_thread_host(int host);

// ---- fault injection: each applies to the next sends posted anywhere in the fabric (or on
// Options::faulty_device), in posting order (faults of whole ranks and links, for ranks as threads: faults.h) ----

/// The next n messages are lost on the wire (the sender sees a normal completion), like a flaky cable.
void drop_next_sends(int n);
/// The next n non-empty messages arrive with one payload byte flipped (the middle one).
void corrupt_next_sends(int n);
/// The next send is not delivered and completes on the sender with this status (written even if unsignaled); the
/// sending QP goes to ERR.
void fail_next_send_completion(ibv_wc_status status);
/// The next create_qp fails with this errno (e.g. EBUSY).
void fail_next_create_qp(int err);
/// A peer that dies without a word: the context's QPs stop receiving and sending (posts succeed and do nothing),
/// its CQs stay empty, and no error completion appears anywhere. Sends to it are lost (UC) or wait forever (RC).
void vanish(ibv_context* context);

// ---- observation --------------------------------------------------------------------------------------------

/// Calls per VerbsApi member name ("post_send", "modify_qp", ...) since reset() or clear_calls(), failed ones too.
std::map<std::string, uint64_t> calls();
void clear_calls();

/// What happened to the messages posted since reset().
struct Counters {
  uint64_t delivered = 0;           ///< copied into a posted receive (or an RDMA WRITE target)
  uint64_t dropped_no_receive = 0;  ///< UC: no receive posted at the destination
  uint64_t dropped_injected = 0;    ///< drop_next_sends, or sent to/from a vanished context
  uint64_t corrupted = 0;           ///< corrupt_next_sends
  uint64_t length_errors = 0;       ///< frame-count or length mismatch with the posted receive
  uint64_t queued_rc = 0;           ///< RC messages waiting for a receive right now
  std::vector<uint64_t> per_cable;  ///< cabled: messages delivered over each of Options::cables, both ways
  uint64_t watched_bytes_sent = 0;  ///< bytes SENDs gathered from inside watch_sends_from's range
  uint64_t oversized_registrations = 0;  ///< reg_mr calls longer than max_mr_size (Options::max_mr_bytes)
};
Counters counters();
/// Counts the bytes SENDs gather from inside [begin, begin + bytes) from now on (Counters::watched_bytes_sent):
/// whether a transport sent from a caller's memory itself, rather than from a copy.
void watch_sends_from(const void* begin, size_t bytes);

/// Live QPs and MRs of an open context (-1 for an unknown context), and of its port (every context's).
int live_qps(ibv_context* context);
int live_mrs(ibv_context* context);
int port_qps(ibv_context* context);

/// Time spent inside the table's calls since reset() or clear_provider_time(), in nanoseconds (the benchmark
/// leaves it out of the transport's own CPU time: real hardware does this work, not the CPU).
double provider_ns();
void clear_provider_time();

}  // namespace tbcoll::ibverbs::fake
