// TCP endpoint: one socket per peer (every transfer non-blocking), driven by the caller's thread (no I/O thread,
// so small messages cost one send and one receive system call). Sends and receives queue FIFO; progress() moves
// as many bytes as the socket takes without blocking. Payloads above kDirectReadBytes are read straight into
// the user's buffer; smaller ones come through a staging buffer so one recv() can take header and payload.
// In the integrity mode (wire.h) a send's tag is computed when it is queued and leaves right after its payload; a
// receive's is computed as the bytes arrive and checked before the receive completes (a mismatch breaks the
// endpoint with IoError: the data may have been altered on the way).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <vector>

#include "common/auth.h"
#include "tbcoll/transport.hpp"
#include "transports/queued_request.h"
#include "transports/tcp/wire.h"

namespace tbcoll::tcp {

// done counts bytes written including the header (sends) or payload bytes received (receives).
struct Operation : transport::QueuedOperation {
  MessageHeader header{};  ///< sends: the header to write
  bool header_done = false;
  auth::MessageMac::Tag mac{};  ///< sends in the integrity mode: the tag written after the payload
  bool later = false;  ///< isend_later: may wait for the next send or a flush
};

/// The integrity mode's state of one connection: a MAC per direction (keys from the handshake) and the number of
/// messages each has carried so far (the nonces).
struct Integrity {
  Integrity(const auth::Proof& send_key, const auth::Proof& receive_key) : send(send_key), receive(receive_key) {}
  auth::MessageMac send;
  auth::MessageMac receive;
  uint64_t sent = 0;
  uint64_t received = 0;
};

class Endpoint final : public transport::Endpoint {
 public:
  /// integrity: null unless the integrity mode is on.
  Endpoint(int fd, int rank, int peer, std::unique_ptr<Integrity> integrity = nullptr);
  ~Endpoint() override;

  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override;
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override;
  std::unique_ptr<transport::Request> isend_later(transport::Tag tag) override;
  void flush() override;
  std::optional<transport::Arrival> probe() override;
  int peer() const override { return peer_; }

  /// Moves bytes without blocking; throws IoError/MismatchError (and the endpoint stays broken).
  void progress();
  /// Waits up to max_wait for the socket to become readable/writable for the queued work: in recv() itself
  /// (a kSleepSlice) when only receives wait and the socket blocks, else in poll().
  void block(std::chrono::microseconds max_wait);
  /// Shuts the socket down; pending and later operations fail. Any thread.
  void abort();
  /// Called when a request is dropped before completion: the stream is out of sync from here on.
  void abandon(const std::shared_ptr<Operation>& op);

 private:
  void progress_sends();
  void progress_recvs();
  bool fill_staging();
  void check_header(Operation& op, const MessageHeader& header);
  void check_blocked_send();
  /// Compacts the staging buffer and receives into it with `flags` (MSG_DONTWAIT, or 0 to sleep in recv()):
  /// recv()'s result (-1 with EAGAIN when the buffer is full).
  ssize_t read_into_staging(int flags);
  /// Only isend_later messages are queued, and they wait (for a send behind them, a flush, or more of them).
  bool sends_wait_for_later() const;
  bool check_tag(Operation& op);
  size_t trailer_bytes() const { return integrity_ ? kTagBytes : 0; }
  [[noreturn]] void fail(const std::string& message);

  static constexpr size_t kStagingBytes = 64 * 1024;
  /// Sends written by one sendmsg at most (queued sends leave together: one system call for several messages).
  static constexpr size_t kSendsPerWrite = 16;
  /// isend_later messages that may wait: one more and they all leave (in one write). Fewer than the deferred
  /// checks a communicator lets wait (Communicator::Impl::kMaxDeferredChecks), so a peer that waits for them does
  /// not wait for a flush.
  static constexpr size_t kLaterAtMost = 3;
  static constexpr size_t kDirectReadBytes = 16 * 1024;
  /// SO_RCVTIMEO: how long one sleep in recv() lasts (a waiting call's slices are this long; the kernel may round
  /// it up to a scheduler tick).
  static constexpr std::chrono::microseconds kSleepSlice{1000};

  int fd_;
  int rank_;
  int peer_;
  std::deque<std::shared_ptr<Operation>> sends_;
  size_t later_count_ = 0;       ///< isend_later messages queued in sends_
  bool flush_requested_ = false;  ///< flush(): the queued sends leave even if they are all isend_later ones
  std::deque<std::shared_ptr<Operation>> recvs_;
  std::vector<uint8_t> staging_;
  size_t staging_begin_ = 0;
  size_t staging_end_ = 0;
  bool sleep_in_recv_ = false;  ///< the socket blocks, with SO_RCVTIMEO = kSleepSlice: block() sleeps in recv()
                                ///< (only where MSG_DONTWAIT covers sends: platform::dontwait_covers_sends)
  std::string broken_;  ///< non-empty once failed: the reason
  std::atomic<bool> aborted_{false};
  std::unique_ptr<Integrity> integrity_;
};

}  // namespace tbcoll::tcp
