// Non-blocking send and receive (Communicator::isend, irecv): the messages are posted on the peer's endpoint at
// once and move whenever the communicator waits (their Works' test() and wait(), and every later call's waits).
#pragma once

#include <list>
#include <memory>
#include <string>
#include <vector>

#include "async.h"
#include "tbcoll/tbcoll.hpp"
#include "tbcoll/transport.hpp"

namespace tbcoll {

/// The posted, unfinished isend/irecv calls of one communicator. Driven by the thread that drives the
/// communicator's endpoints: its user's, or its progress thread while that runs a queued call (then the user's
/// test() leaves them alone); owned by Communicator::Impl.
class P2pInFlight {
 public:
  explicit P2pInFlight(Communicator::Impl& impl) : impl_(impl) {}
  /// Fails the Works still pending: their buffers are no longer touched.
  ~P2pInFlight();
  P2pInFlight(const P2pInFlight&) = delete;
  P2pInFlight& operator=(const P2pInFlight&) = delete;

  /// Posts bytes at buf to (is_send) or from peer under tag, split as the peer's transport needs; never blocks.
  Work post(bool is_send, void* buf, size_t bytes, size_t count, DataType dtype, int peer, transport::Tag tag);
  /// Posts a receive from any peer: it waits unposted until a peer's next message has arrived (Endpoint::probe),
  /// then takes that message as irecv(peer) would. Never blocks.
  Work post_any(void* buf, size_t bytes, size_t count, DataType dtype);
  /// Tests every pending call once; completes the finished ones. Never blocks. Cheap with none pending (every
  /// poll of every wait calls it).
  void sweep();
  size_t pending() const { return ops_.size(); }

 private:
  struct Op {
    bool is_send = false;
    int peer = -1;  ///< -1: a receive from any peer not matched yet
    bool any = false;  ///< a receive from any peer (irecv_any)
    void* buf = nullptr;
    size_t bytes = 0;
    size_t count = 0;
    DataType dtype = DataType::kUint8;
    Deadline deadline;
    std::vector<std::unique_ptr<transport::Request>> chunks;  // complete in order
    size_t next = 0;                                           // first chunk not complete
    std::shared_ptr<Work::State> state;
  };
  std::shared_ptr<Op> make_op(bool is_send, void* buf, size_t bytes, size_t count, DataType dtype, int peer);
  // Tests op's chunks; true once all completed (its Work completed, op removed by the caller). Errors, and the
  // deadline passing (now), complete the Work with the error and break the communicator.
  bool advance(Op& op, Clock::time_point now);
  // A receive from any peer: looks at the peers in turn for one whose next message arrived and no receive takes;
  // posts op's receive there and returns true, or false with none yet.
  bool match(Op& op);
  // Posts op's receive or send chunks on its peer's endpoint, under tag.
  void post_chunks(Op& op, transport::Tag tag);
  void drive(const std::shared_ptr<Op>& op, bool block);
  void fail(Op& op, std::exception_ptr error);
  std::string describe(const Op& op) const;

  Communicator::Impl& impl_;
  std::list<std::shared_ptr<Op>> ops_;  // in posting order
  int next_any_ = 0;                    // the peer a receive from any peer looks at first (turns, so none starves)
};

}  // namespace tbcoll
