// The fake fabric's records, shared by its two halves: fake_verbs.cc (the VerbsApi table and the test controls)
// and fabric.cc (the wire: delivery, completions, error states). Everything here runs under the fabric mutex that
// fake_verbs.cc holds for every call. Not an interface: tests include fake_verbs.h.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fake_verbs/fake_verbs.h"

namespace tbcoll::ibverbs::fake::detail {

constexpr uint64_t kFrameBytes = 4096;
constexpr uint64_t kPageBytes = 16384;  ///< Apple silicon's page: registrations start on one (strict)
constexpr uint32_t kAppleMaxMessage = 16773120;
constexpr uint32_t kPermissiveMaxMessage = 1u << 31;
constexpr int kMaxCqEntries = 65536;

inline uint64_t frames(uint64_t bytes) { return std::max<uint64_t>(1, (bytes + kFrameBytes - 1) / kFrameBytes); }

struct Context;
struct Pd {
  ibv_pd verbs{};
  Context* context = nullptr;
};
struct Mr {
  ibv_mr verbs{};
  Pd* pd = nullptr;
  int access = 0;
};
struct CqEntry {
  ibv_wc wc{};
  uint64_t send_seq = 0;  ///< a send WR's number on its QP (polling it frees its send-queue places), 0 otherwise
};
struct Cq {
  ibv_cq verbs{};
  Context* context = nullptr;
  std::deque<CqEntry> entries;
  bool overrun = false;
};
struct RecvWr {
  uint64_t wr_id = 0;
  std::vector<ibv_sge> sges;
  uint64_t length = 0;
  bool keys_ok = true;
};
// An RC message waiting at its destination for a receive; the sender's completion waits with it.
struct Queued {
  uint32_t source_qpn = 0;
  uint64_t wr_id = 0;
  uint64_t send_seq = 0;
  bool signaled = false;
  std::vector<uint8_t> data;
  bool has_imm = false;  ///< SEND_WITH_IMM
  uint32_t imm_data = 0;
};
struct Qp {
  ibv_qp verbs{};
  Context* context = nullptr;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  ibv_qp_cap cap{};
  bool sig_all = false;
  ibv_gid dgid{};
  uint32_t dest_qpn = 0;
  std::deque<RecvWr> recvs;
  uint64_t recv_frames = 0;
  std::deque<Queued> queued;
  // Send WRs holding send-queue places (4 KiB frames strict, 1 each permissive) until a completion of theirs or of
  // a later WR of the QP is polled: (WR number, places).
  std::deque<std::pair<uint64_t, uint64_t>> send_queue;
  uint64_t send_places = 0;
  uint64_t next_send_seq = 1;
  uint64_t sending_seq = 0;  ///< the WR transmit() is handling
  uint8_t timeout = 14;      ///< RC: local ACK timeout exponent and retries (modify_qp to RTS); see faults.h
  uint8_t retry_cnt = 7;
};
// A physical port: one device of one host. Its contexts (every open_device of that device on that host) share its
// GIDs and its queue pair and registration budgets, as Apple's limits are per device.
struct Port {
  int host = 0;
  int device = 0;
  std::vector<ibv_gid> gids;
  int cable = -1;       ///< cabled mode: the index in Options::cables; -1 uncabled (the port is DOWN)
  int cable_end = 0;    ///< 0: the cable's a end, 1: its b end
  int prefix = 16;      ///< the IPv4 address's prefix length (ipv4_prefix)
  bool active = true;   ///< ACTIVE on Options::active_port
  int qps = 0;
  int mrs = 0;
};

struct Context {
  ibv_context verbs{};
  Port* port = nullptr;
  uint64_t serial = 0;     ///< opening order since reset()
  bool vanished = false;
  bool paused = false;     ///< faults.h pause(): its data-path calls wait
  bool isolated = false;   ///< faults.h cut(context): every frame to or from it is lost
  std::thread::id opener;  ///< the thread that opened it (faults.h context_of_this_thread)
  int qps = 0;             ///< its own (live_qps)
  int mrs = 0;
  const std::vector<ibv_gid>& gids() const { return port->gids; }
};

// An RC send on a cut link: the sender's HCA retries until `due`, then completes it with IBV_WC_RETRY_EXC_ERR;
// a link mended before then delivers it (a SEND: RDMA WRITEs are not kept).
struct Retrying {
  uint32_t qpn = 0;
  uint32_t dest_qpn = 0;
  uint64_t wr_id = 0;
  uint64_t send_seq = 0;
  ibv_wc_opcode opcode = IBV_WC_SEND;
  std::chrono::steady_clock::time_point due;
  Queued message;  ///< what a mended link delivers
};

template <typename T, typename V>
using Table = std::unordered_map<V*, std::unique_ptr<T>>;

struct Fabric {
  Options options;
  std::vector<std::unique_ptr<ibv_device>> devices;
  std::map<std::pair<int, int>, std::unique_ptr<Port>> ports;  ///< by (host, device)
  int next_own_host = -1;  ///< hosts of contexts opened by threads that named none: -1, -2, ...
  uint64_t next_serial = 1;
  Table<Context, ibv_context> contexts;
  Table<Pd, ibv_pd> pds;
  Table<Mr, ibv_mr> mrs;
  Table<Cq, ibv_cq> cqs;
  Table<Qp, ibv_qp> qps;
  std::unordered_map<uint32_t, Qp*> qp_by_number;
  std::unordered_map<uint32_t, Mr*> mr_by_key;
  uint32_t next_qpn = 0x11;
  uint32_t next_key = 0x100;
  uint32_t next_handle = 1;
  int next_port = 1;
  int drop_sends = 0;
  uintptr_t watch_begin = 0, watch_end = 0;  ///< watch_sends_from's range
  int corrupt_sends = 0;
  bool fail_send = false;
  ibv_wc_status fail_send_status = IBV_WC_SUCCESS;
  int fail_create_qp = 0;
  Counters counters;
  std::map<std::string, uint64_t> calls;
  std::set<std::pair<Context*, Context*>> cut_links;  ///< faults.h cut(a, b), both orders
  std::deque<Retrying> retrying;
  /// Options::overtake_slots: a UC slot not delivered yet (its destination QP, bytes, sender's QP number).
  struct Overtaken {
    ibv_qp* dest = nullptr;
    std::vector<uint8_t> data;
    uint32_t source_qpn = 0;
  };
  std::deque<Overtaken> overtaken;

  bool strict() const { return options.apple_strict; }
  bool cabled() const { return !options.cables.empty(); }
  uint64_t max_mr_bytes() const {
    if (options.max_mr_bytes != 0) return options.max_mr_bytes;
    return strict() ? uint64_t{1} << 32 : uint64_t{1} << 40;
  }
  uint32_t max_message() const {
    if (options.max_message_bytes != 0) return options.max_message_bytes;
    return strict() ? kAppleMaxMessage : kPermissiveMaxMessage;
  }
  template <typename T, typename V>
  static T* find(Table<T, V>& table, V* key) {
    auto it = table.find(key);
    return it == table.end() ? nullptr : it->second.get();
  }
};

/// A fabric with these options and its devices.
std::unique_ptr<Fabric> make_fabric(const Options& options);
/// The port of device `device` on host `host`, made on first use: its GID table (link-local at 0, the
/// IPv4-mapped GID at options.ipv4_gid_index, fd00:: elsewhere), its cable and whether it is active.
Port* port_of(Fabric& fabric, int host, int device);
bool is_zero(const ibv_gid& gid);
bool is_ipv4_mapped(const ibv_gid& gid);
bool has_gid(const Port& port, const ibv_gid& gid);
/// An open context whose port has this GID, or null.
Context* owner_of_gid(Fabric& fabric, const ibv_gid& gid);
/// Whether frames from port `from` reach port `to`: always without cables (one switched subnet); with them only
/// across a cable, either way.
bool reaches(const Fabric& fabric, const Port& from, const Port& to);
/// Every SGE inside an MR of the PD with that lkey (and with LOCAL_WRITE when the HCA writes into it).
bool keys_ok(Fabric& fabric, Pd* pd, const ibv_sge* sges, int count, bool written);
/// Completions that do not fit set the CQ's overrun; a vanished context's CQs take none.
void push(Cq* cq, const ibv_wc& wc, uint64_t send_seq = 0);
ibv_wc completion(Qp* qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode, uint32_t byte_len);
/// ERR: posted receives are flushed, waiting RC messages are lost.
void enter_error(Qp* qp);
/// RC: queued messages meet newly posted receives; the senders' completions come with the delivery.
void drain_queue(Fabric& fabric, Qp* dest);
/// An error completion for the WR and the QP to ERR.
void error_completion(Qp* qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode, uint64_t send_seq);
/// One validated send WR (state, opcode, SGE count and length checked), from its keys to its completions.
void transmit(Fabric& fabric, Qp* qp, const ibv_send_wr* wr, uint64_t length);
/// What a failed post returns: Apple's provider (strict) returns the negated code and leaves errno alone (0 here),
/// rdma-core the code.
int post_error(const Fabric& fabric, int code);

// ---- faults.cc: the thread-level faults of faults.h --------------------------------------------------------

/// Runs fn under the fabric mutex, then wakes the calls a pause holds (fake_verbs.cc).
void with_fabric(const std::function<void(Fabric&)>& fn);
/// True when frames between these two contexts are lost (a cut link or an isolated end).
bool link_cut(const Fabric& fabric, Context* a, Context* b);
/// A send that met a cut link: UC loses it (the sender's completion says success), RC retries and fails later.
void lose_on_cut_link(Fabric& fabric, Qp* qp, Qp* dest, const ibv_send_wr* wr, std::vector<uint8_t> data, bool signaled,
                      ibv_wc_opcode opcode);
/// RC sends whose retries ran out by now, on QPs completing into cq: IBV_WC_RETRY_EXC_ERR, later ones flushed.
void fire_due_retries(Fabric& fabric, Cq* cq);

}  // namespace tbcoll::ibverbs::fake::detail
