// Communicator internals shared by communicator.cc (set-up) and collectives.cc (the calls).
#pragma once

#include <atomic>
#include <string>

#include <fmt/format.h>
#include <mutex>
#include <optional>
#include <vector>

#include "algorithms/exec.h"
#include "async.h"
#include "notices.h"
#include "p2p_async.h"
#include "signature.h"
#include "tbcoll/tbcoll.hpp"
#include "tbcoll/transport.h"
#include "transports/delay/emulation.h"
#include "tuner.h"
#include "tuner_measured.h"

namespace tbcoll {

/// Re-throws error with "what failed: " in front, keeping its type.
[[noreturn]] void rethrow_with_context(const Error& error, const std::string& what);

struct Communicator::Impl {
  Config config;
  int rank = 0;
  int size = 1;
  int instance = 0;  ///< rank in the communicator this one's set-up started from (transport::PeerInfo::instance)
  std::shared_ptr<TcpStoreServer> server;  // hosted here (rank 0); children of split() share it
  std::shared_ptr<Store> store;
  // Contexts are declared before endpoints so endpoints are destroyed first.
  std::vector<std::unique_ptr<transport::Context>> contexts;
  std::vector<std::unique_ptr<transport::Endpoint>> owned_endpoints;
  std::vector<transport::Endpoint*> peers;  // by rank; nullptr for self
  std::vector<std::string> transport_names;
  /// host_of[p]: the host of rank p (equal PeerInfo::host_id, TBCOLL_HOST_ID included), hosts numbered 0.. in the
  /// order of their lowest rank; hosts: how many. The hierarchical schedules group ranks by it.
  std::vector<int> host_of;
  int hosts = 1;
  uint64_t collective_seq = 0;
  uint64_t splits = 0;  ///< split() calls so far (collective, so equal on every rank)
  struct GroupedP2p {
    bool is_send;
    void* buf;
    size_t bytes;
    int peer;
    transport::Tag tag;
  };
  int group_depth = 0;
  std::vector<GroupedP2p> group_ops;
  std::vector<uint64_t> p2p_sent, p2p_received;
  std::atomic<bool> broken{false};
  std::mutex broken_mutex;
  std::string broken_reason;
  algo::Scratch scratch;
  algo::RequestTable request_table;
  transport::CollectiveFastPath* fast_path = nullptr;  // owned by one of contexts
  Tuner tuner;
  MeasuredChoices measured;  ///< TBCOLL_TUNER=measure: the trials and decisions per collective and size octave
  transport::LinkEmulation link;    ///< TBCOLL_LINK_EMULATION / TBCOLL_LINK_DELAY_US; off by default
  std::vector<size_t> max_message;  // by peer: the largest message its transport takes
  transport::SpinYield spin_yield = transport::SpinYield::kNowAndThen;  // spin_yield_policy() for this rank
  Notices notices;  // refusals and breakdowns of peers, told through the store (notices.h)
  std::unique_ptr<P2pInFlight> p2p_in_flight;  ///< isend/irecv posted and unfinished; made by the first
  // Declared last, so destroyed first: queued calls finish while every member above still exists.
  AsyncQueue async;

  void mark_broken(const std::string& reason);
  /// Asynchronous calls are refused between group_start and group_end (the group records send/recv only).
  void check_not_in_group(const char* call) const {
    if (group_depth > 0) {
      throw InvalidUsage(fmt::format("rank {}: {} inside a group: groups take send and recv only", rank, call));
    }
  }
  void check_usable(const algo::CallInfo& call) {
    if (broken) throw_broken(call);
    if (group_depth > 0 && std::string(call.name) != "send" && std::string(call.name) != "recv") {
      throw InvalidUsage(fmt::format("rank {}: {} inside a group: groups take send and recv only", rank,
                                     call.describe()));
    }
  }
  [[noreturn]] void throw_broken(const algo::CallInfo& call);
  /// The argument checks of a collective (dtype, op, root, byte count overflow, null buffers, overlapping
  /// buffers, a forced algorithm that cannot run the call). Throws InvalidArgument naming what is wrong.
  /// Asynchronous calls run them before queuing.
  struct Checked {
    size_t bytes;          ///< per rank (the gathered/scattered total for all_gather and reduce_scatter)
    const Choice* choice;  ///< the tuner's choice for the call (null on one rank: nothing to run)
    algo::CallShape shape;  ///< what the tuner chose by
  };
  Checked check_arguments(OpKind kind, const void* send, const void* recv, size_t count, DataType dtype, ReduceOp op,
                          int root) const;
  /// check_arguments; when it refuses the call on a communicator of several ranks, the call's number is used up
  /// here and the peers are told (Notices::kRefused), so those for whom the call is valid fail at once with this
  /// rank's reason, and ranks that all refused it stay in step. Drains the asynchronous queue first then.
  Checked check_or_refuse(OpKind kind, const void* send, const void* recv, size_t count, DataType dtype,
                          ReduceOp op, int root);
  /// Runs body with an Exec for one call; turns transport errors into errors that name the op. The call's
  /// messages carry its signature with the schedule's number (0 for send/recv) added: ranks tuned to different
  /// schedules are told so.
  template <typename Body>
  void run(const algo::CallInfo& call, transport::Tag tag, unsigned schedule, Body&& body);
  /// Runs the chosen algorithm for a collective: its schedule through run(), or the transport's fast path.
  void execute(const algo::CallInfo& call, transport::Tag tag, const Choice& choice, const algo::Args& args);
  /// execute() for a checked call: its choice, or under TBCOLL_TUNER=measure the measured one (a trial, timed,
  /// and after the octave's last trial the ranks' agreement on the fastest: tuner_measured.h).
  void execute_checked(const algo::CallInfo& call, transport::Tag tag, const Checked& checked,
                       const algo::Args& args);
  /// The calls themselves; the public methods drain queued asynchronous calls first.
  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  void all_gather(const void* send, void* recv, size_t count, DataType dtype);
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root);
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root);
  void barrier();
  /// all_to_all, gather and scatter take check_arguments like the collectives above; all_to_allv's counts and
  /// displacements are checked (and null displacements made packed ones) by check_all_to_allv, and the call runs
  /// on its copy of them (the asynchronous form keeps it).
  void all_to_all(const void* send, void* recv, size_t count, DataType dtype);
  void gather(const void* send, void* recv, size_t count, DataType dtype, int root);
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root);
  struct AllToAllvLayout {
    std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;  ///< per peer, in elements
    size_t sent = 0;       ///< elements this rank sends in all (for error messages)
    const Choice* choice = nullptr;  ///< null on one rank
  };
  AllToAllvLayout check_all_to_allv(const void* send, const void* recv, const size_t* send_counts,
                                    const size_t* send_displs, const size_t* recv_counts, const size_t* recv_displs,
                                    DataType dtype) const;
  void all_to_allv(const void* send, void* recv, const AllToAllvLayout& layout, DataType dtype);
  /// send (is_send) or recv of count elements with peer; buf is only read for a send.
  void p2p(bool is_send, void* buf, size_t count, DataType dtype, int peer);
  /// Runs body, turning its errors into errors that name the call, and marking the communicator broken.
  /// call_number: the collective's tag (0 for send/recv), for the notice a failure publishes.
  template <typename Body>
  void guard(const algo::CallInfo& call, uint64_t call_number, Body&& body);
};

}  // namespace tbcoll
