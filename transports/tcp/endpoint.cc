#include "transports/tcp/endpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "common/constant_time.h"
#include "platform/platform.h"
#include "transports/queued_request.h"

namespace tbcoll::tcp {

Endpoint::Endpoint(int fd, int rank, int peer, std::unique_ptr<Integrity> integrity)
    : fd_(fd), rank_(rank), peer_(peer), staging_(kStagingBytes), integrity_(std::move(integrity)) {
  // Every transfer passes MSG_DONTWAIT, so where that flag covers sends too (Linux) the socket itself may block:
  // a wait for data then sleeps in recv(), bounded by SO_RCVTIMEO, which wakes with the data in hand (poll() and a
  // recv() after it cost a system call and a wake-up path more, ~1.5x the time per exchange on a busy machine).
  // Elsewhere the socket stays non-blocking and waits poll().
  if (!platform::dontwait_covers_sends()) return;
  const int flags = fcntl(fd_, F_GETFL, 0);
  timeval slice{0, static_cast<decltype(timeval::tv_usec)>(kSleepSlice.count())};
  sleep_in_recv_ = flags >= 0 && fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) == 0 &&
                   setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof(slice)) == 0;
}

Endpoint::~Endpoint() {
  // What isend_later left waiting leaves before the connection closes (a peer may be waiting for it), as far as
  // the socket takes it without blocking.
  if (later_count_ > 0 && broken_.empty() && !aborted_) {
    try {
      flush();
    } catch (const Error&) {
    }
  }
  close(fd_);
}

void Endpoint::fail(const std::string& message) {
  if (broken_.empty()) broken_ = message;
  throw IoError(message);
}

void Endpoint::abort() {
  aborted_ = true;
  shutdown(fd_, SHUT_RDWR);
}

void Endpoint::abandon(const std::shared_ptr<Operation>& op) {
  if (broken_.empty()) {
    broken_ = fmt::format("[tcp] rank {}: connection to peer {} is out of sync (an operation was abandoned)", rank_,
                          peer_);
  }
  transport::forget_buffer(op, sends_, recvs_);
}

std::unique_ptr<transport::Request> Endpoint::isend(const void* buf, size_t bytes, transport::Tag tag) {
  auto [request, op] = transport::enqueue<Endpoint, Operation>(this, sends_, buf, bytes, tag);
  op->header = MessageHeader{kMessageMagic, 0, tag.tag, tag.meta, bytes};
  if (integrity_) {
    auth::MessageMac& mac = integrity_->send;
    mac.begin(integrity_->sent++);
    mac.update(&op->header, sizeof(op->header));
    mac.update(buf, bytes);
    op->mac = mac.finish();
  }
  // Start right away (with the isend_later messages waiting before it): small messages leave in this call and
  // the caller's first test() finds them done.
  if (sends_.size() == later_count_ + 1 && broken_.empty()) progress_sends();
  return std::move(request);
}

std::unique_ptr<transport::Request> Endpoint::isend_later(transport::Tag tag) {
  auto [request, op] = transport::enqueue<Endpoint, Operation>(this, sends_, nullptr, 0, tag);
  op->header = MessageHeader{kMessageMagic, 0, tag.tag, tag.meta, 0};
  op->later = true;
  ++later_count_;
  if (integrity_) {
    auth::MessageMac& mac = integrity_->send;
    mac.begin(integrity_->sent++);
    mac.update(&op->header, sizeof(op->header));
    op->mac = mac.finish();
  }
  if (later_count_ > kLaterAtMost && broken_.empty()) progress_sends();
  return std::move(request);
}

std::unique_ptr<transport::Request> Endpoint::irecv(void* buf, size_t bytes, transport::Tag tag) {
  return transport::enqueue<Endpoint, Operation>(this, recvs_, buf, bytes, tag).first;
}

void Endpoint::progress() {
  if (!broken_.empty()) throw IoError(broken_);
  if (aborted_) fail(fmt::format("[tcp] rank {}: connection to peer {} was aborted", rank_, peer_));
  progress_sends();
  progress_recvs();
}

std::optional<transport::Arrival> Endpoint::probe() {
  progress();
  if (!recvs_.empty()) return std::nullopt;
  // The next header comes into the staging buffer, where the receive that takes it will find it.
  while (staging_end_ - staging_begin_ < sizeof(MessageHeader)) {
    if (!fill_staging()) return std::nullopt;
  }
  MessageHeader header;
  std::memcpy(&header, staging_.data() + staging_begin_, sizeof(header));
  if (header.magic != kMessageMagic) {
    fail(fmt::format("[tcp] rank {}: garbage from peer {} (bad message magic {:#x})", rank_, peer_, header.magic));
  }
  return transport::Arrival{{header.tag, header.meta}, header.bytes};
}

// Queued sends leave together, up to kSendsPerWrite per sendmsg (header, payload and, in the integrity mode, tag
// of each, from where the last write stopped). isend_later messages alone in the queue wait: for a send behind
// them, a flush(), or more than kLaterAtMost of them.
bool Endpoint::sends_wait_for_later() const {
  return !sends_.empty() && later_count_ == sends_.size() && sends_.front()->done == 0 &&
         later_count_ <= kLaterAtMost && !flush_requested_;
}

void Endpoint::progress_sends() {
  while (!sends_.empty()) {
    if (sends_wait_for_later()) return;
    iovec iov[3 * kSendsPerWrite];
    int count = 0;
    size_t ops = 0;
    for (; ops < sends_.size() && ops < kSendsPerWrite; ++ops) {
      Operation& op = *sends_[ops];
      size_t at = 0;
      auto part = [&](void* base, size_t length) {
        if (op.done < at + length && length > 0) {
          const size_t skip = op.done > at ? op.done - at : 0;
          iov[count++] = {static_cast<uint8_t*>(base) + skip, length - skip};
        }
        at += length;
      };
      part(&op.header, sizeof(MessageHeader));
      part(op.buf, op.bytes);
      part(op.mac.data(), trailer_bytes());
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<decltype(msg.msg_iovlen)>(count);
    ssize_t sent = sendmsg(fd_, &msg, MSG_DONTWAIT | platform::send_flags());
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      fail(fmt::format("[tcp] rank {}: send to peer {} failed: {} (peer gone?)", rank_, peer_, strerror(errno)));
    }
    size_t left = static_cast<size_t>(sent);
    while (!sends_.empty()) {
      Operation& op = *sends_.front();
      const size_t total = sizeof(MessageHeader) + op.bytes + trailer_bytes();
      const size_t take = std::min(left, total - op.done);
      op.done += take;
      left -= take;
      if (op.done < total) return;  // socket full
      op.complete = true;
      if (op.later) --later_count_;
      sends_.pop_front();
      if (left == 0) break;
    }
  }
  flush_requested_ = false;
}

void Endpoint::flush() {
  if (sends_.empty() || !broken_.empty()) return;
  flush_requested_ = true;
  progress_sends();
}

ssize_t Endpoint::read_into_staging(int flags) {
  if (staging_begin_ == staging_end_) staging_begin_ = staging_end_ = 0;
  if (staging_begin_ > 0 && staging_end_ - staging_begin_ < sizeof(MessageHeader)) {
    std::memmove(staging_.data(), staging_.data() + staging_begin_, staging_end_ - staging_begin_);
    staging_end_ -= staging_begin_;
    staging_begin_ = 0;
  }
  if (staging_end_ == staging_.size()) {  // full: progress() has bytes to take first
    errno = EAGAIN;
    return -1;
  }
  const ssize_t got = recv(fd_, staging_.data() + staging_end_, staging_.size() - staging_end_, flags);
  if (got > 0) staging_end_ += static_cast<size_t>(got);
  return got;
}

bool Endpoint::fill_staging() {
  const ssize_t got = read_into_staging(MSG_DONTWAIT);
  if (got > 0) return true;
  if (got == 0) fail(fmt::format("[tcp] rank {}: peer {} closed the connection", rank_, peer_));
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
  fail(fmt::format("[tcp] rank {}: receive from peer {} failed: {}", rank_, peer_, strerror(errno)));
}

// The integrity mode: reads the tag that follows the payload (false while it has not all arrived) and fails the
// endpoint unless it is the MAC of what arrived.
bool Endpoint::check_tag(Operation& op) {
  while (staging_end_ - staging_begin_ < kTagBytes) {
    if (!fill_staging()) return false;
  }
  const auth::MessageMac::Tag expected = integrity_->receive.finish();
  const bool good = constant_time_equal(staging_.data() + staging_begin_, expected.data(), kTagBytes);
  staging_begin_ += kTagBytes;
  if (!good) {
    fail(fmt::format("[tcp] rank {}: message {} from peer {} ({} B) failed its integrity check (TBCOLL_INTEGRITY): "
                     "altered, replayed or reordered on the way", rank_, integrity_->received, peer_, op.bytes));
  }
  integrity_->received++;
  return true;
}

void Endpoint::check_header(Operation& op, const MessageHeader& header) {
  if (header.magic != kMessageMagic) {
    fail(fmt::format("[tcp] rank {}: garbage from peer {} (bad message magic {:#x})", rank_, peer_, header.magic));
  }
  if (header.tag != op.tag.tag || header.meta != op.tag.meta || header.bytes != op.bytes) {
    std::string what = fmt::format(
        "[tcp] rank {}: message from peer {} does not match: expected tag {} meta {:#x} {} B, got tag {} meta "
        "{:#x} {} B",
        rank_, peer_, op.tag.tag, op.tag.meta, op.bytes, header.tag, header.meta, header.bytes);
    broken_ = what;
    throw MismatchError(what, peer_, op.tag.meta, header.meta, op.bytes, header.bytes);
  }
  if (integrity_) {
    integrity_->receive.begin(integrity_->received);
    integrity_->receive.update(&header, sizeof(header));
  }
}

void Endpoint::progress_recvs() {
  while (!recvs_.empty()) {
    Operation& op = *recvs_.front();
    if (!op.header_done) {
      if (staging_begin_ == staging_end_ && op.bytes >= kDirectReadBytes && op.buf != nullptr) {
        // Large expected message and nothing buffered: scatter the read so the header lands in staging and
        // the payload straight in the user's buffer (no staging copy). A mismatching header is still
        // caught below, before the operation completes; the stream is then broken anyway.
        staging_begin_ = staging_end_ = 0;
        iovec iov[2] = {{staging_.data(), sizeof(MessageHeader)}, {op.buf, op.bytes}};
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = 2;
        ssize_t got = recvmsg(fd_, &msg, MSG_DONTWAIT);
        if (got == 0) fail(fmt::format("[tcp] rank {}: peer {} closed the connection", rank_, peer_));
        if (got < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
          fail(fmt::format("[tcp] rank {}: receive from peer {} failed: {}", rank_, peer_, strerror(errno)));
        }
        size_t header_part = std::min(static_cast<size_t>(got), sizeof(MessageHeader));
        staging_end_ = header_part;
        if (header_part < sizeof(MessageHeader)) continue;  // rare: header split; finish it through staging
        MessageHeader header;
        std::memcpy(&header, staging_.data(), sizeof(header));
        staging_begin_ = staging_end_ = 0;
        check_header(op, header);
        op.header_done = true;
        op.done = static_cast<size_t>(got) - sizeof(MessageHeader);
        if (integrity_) integrity_->receive.update(op.buf, op.done);
      }
      while (!op.header_done && staging_end_ - staging_begin_ < sizeof(MessageHeader)) {
        if (!fill_staging()) return;
      }
    }
    if (!op.header_done) {
      MessageHeader header;
      std::memcpy(&header, staging_.data() + staging_begin_, sizeof(header));
      check_header(op, header);
      staging_begin_ += sizeof(header);
      op.header_done = true;
    }
    while (op.done < op.bytes) {
      size_t want = op.bytes - op.done;
      size_t buffered = staging_end_ - staging_begin_;
      if (buffered > 0) {
        size_t take = std::min(want, buffered);
        if (op.buf != nullptr) std::memcpy(op.buf + op.done, staging_.data() + staging_begin_, take);
        if (integrity_) integrity_->receive.update(staging_.data() + staging_begin_, take);
        staging_begin_ += take;
        op.done += take;
        continue;
      }
      if (want >= kDirectReadBytes && op.buf != nullptr) {
        ssize_t got = recv(fd_, op.buf + op.done, want, MSG_DONTWAIT);
        if (got > 0) {
          if (integrity_) integrity_->receive.update(op.buf + op.done, static_cast<size_t>(got));
          op.done += static_cast<size_t>(got);
          continue;
        }
        if (got == 0) fail(fmt::format("[tcp] rank {}: peer {} closed the connection", rank_, peer_));
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        fail(fmt::format("[tcp] rank {}: receive from peer {} failed: {}", rank_, peer_, strerror(errno)));
      }
      if (!fill_staging()) return;
    }
    if (integrity_ && !check_tag(op)) return;
    op.complete = true;
    recvs_.pop_front();
  }
}


void Endpoint::check_blocked_send() {
  // Only sends wait, the socket is full, and the peer sent a message under our send's tag: if its signature
  // differs, the peer runs another call and will not receive ours (ranks that each named themselves the root
  // of a large broadcast would otherwise wait here for the deadline).
  const Operation& op = *sends_.front();
  // Only collectives: send/recv tags count per direction, so the peer's own first send carries ours too.
  if (transport::is_p2p_tag(op.tag.tag)) return;
  MessageHeader header{};
  if (staging_end_ - staging_begin_ >= sizeof(header)) {
    std::memcpy(&header, staging_.data() + staging_begin_, sizeof(header));
  } else if (staging_end_ == staging_begin_) {
    if (recv(fd_, &header, sizeof(header), MSG_PEEK | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof(header))) return;
  } else {
    return;  // part of a header in staging: look again next time
  }
  if (header.magic != kMessageMagic || header.tag != op.tag.tag || header.meta == op.tag.meta) return;
  std::string what = fmt::format(
      "[tcp] rank {}: peer {} sent a message under the tag of this rank's pending send, with another signature "
      "(ours: tag {} meta {:#x} {} B; theirs: meta {:#x} {} B): it runs another call", rank_, peer_, op.tag.tag,
      op.tag.meta, op.bytes, header.meta, header.bytes);
  broken_ = what;
  throw MismatchError(what, peer_, op.tag.meta, header.meta, op.bytes, header.bytes);
}

void Endpoint::block(std::chrono::microseconds max_wait) {
  // isend_later messages that wait for a later send want no room in the socket: waiting for POLLOUT would
  // end every sleep at once (the socket has room), and the wait would spin in system calls.
  const bool sends_want_room = !sends_.empty() && !sends_wait_for_later();
  if (recvs_.empty() && sends_want_room) check_blocked_send();
  // A message already in the staging buffer (read with an earlier one) is not waited for.
  if (!recvs_.empty() && staging_end_ - staging_begin_ >= sizeof(MessageHeader)) return;
  if (!recvs_.empty() && !sends_want_room && sleep_in_recv_ && max_wait >= kSleepSlice && !aborted_) {
    // Sleeps in recv() (a SO_RCVTIMEO slice) for what arrives next; progress() takes it as it takes what
    // fill_staging() reads, and reports an end of stream or an error.
    read_into_staging(0);
    return;
  }
  pollfd pfd{fd_, 0, 0};
  if (!recvs_.empty()) pfd.events |= POLLIN;
  if (sends_want_room) pfd.events |= POLLOUT;
  if (pfd.events == 0) return;
  int ms = static_cast<int>((max_wait.count() + 999) / 1000);
  poll(&pfd, 1, ms);
}

}  // namespace tbcoll::tcp
