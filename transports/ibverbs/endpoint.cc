#include "transports/ibverbs/endpoint.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace tbcoll::ibverbs {

Endpoint::Endpoint(std::shared_ptr<Connection> connection, int rank, int peer, uint64_t comm_id)
    : connection_(std::move(connection)), rank_(rank), peer_(peer), comm_id_(comm_id) {
  connection_->attach(comm_id_, this);
}

Endpoint::~Endpoint() { connection_->detach(comm_id_); }

std::unique_ptr<transport::Request> Endpoint::isend(const void* buf, size_t bytes, transport::Tag tag) {
  if (bytes > wire::kMaxMessageBytes) {
    throw InvalidArgument(
        fmt::format("[ibverbs] rank {}: message of {} B to peer {} is over the transport's limit of "
                    "{} B",
                    rank_, bytes, peer_, wire::kMaxMessageBytes));
  }
  std::unique_ptr<transport::Request> request;
  {
    std::lock_guard<std::mutex> lock(connection_->mutex());
    request = transport::enqueue<Endpoint, Operation>(this, sends_, buf, bytes, tag).first;
  }
  connection_->want_to_send(this);
  return request;
}

std::unique_ptr<transport::Request> Endpoint::irecv(void* buf, size_t bytes, transport::Tag tag) {
  std::lock_guard<std::mutex> lock(connection_->mutex());
  auto [request, op] = transport::enqueue<Endpoint, Operation>(this, recvs_, buf, bytes, tag);
  // Messages wait unexpected only while every posted receive has its message: the oldest is this receive's.
  if (!unexpected_.empty()) {
    std::shared_ptr<Operation> early = std::move(unexpected_.front());
    unexpected_.pop_front();
    if (early->tag.tag != tag.tag || early->tag.meta != tag.meta || early->bytes != bytes) {
      std::string what = fmt::format(
          "[ibverbs] rank {}: message from peer {} does not match: expected tag {} meta "
          "{:#x} {} B, got tag {} meta {:#x} {} B",
          rank_, peer_, tag.tag, tag.meta, bytes, early->tag.tag, early->tag.meta, early->bytes);
      if (broken_.empty()) broken_ = what;
      mismatch_.emplace(what, peer_, tag.meta, early->tag.meta, bytes, early->bytes);
      if (incoming_ == early.get()) {  // still arriving: drop the rest of its frames (early goes away here)
        incoming_ = nullptr;
        discard_ = wire::frames_for(early->bytes) - early->done / wire::kPayloadBytes;
      }
    } else {
      if (early->done > 0) std::memcpy(op->buf, early->storage.data(), early->done);
      op->done = early->done;
      op->matched = true;
      op->complete = early->complete;
      if (incoming_ == early.get()) incoming_ = op;
      while (!recvs_.empty() && recvs_.front()->complete) recvs_.pop_front();
    }
  }
  return std::move(request);
}

void Endpoint::check_locked() {
  if (mismatch_) throw *mismatch_;
  if (!broken_.empty()) throw IoError(broken_);
  if (aborted_) {
    broken_ = fmt::format("[ibverbs] rank {}: connection to peer {} was aborted", rank_, peer_);
    throw IoError(broken_);
  }
}

void Endpoint::progress() {
  connection_->progress();
  std::lock_guard<std::mutex> lock(connection_->mutex());
  check_locked();
}

void Endpoint::block(std::chrono::microseconds max_wait) { connection_->block(max_wait); }

void Endpoint::abort() {
  aborted_ = true;
  connection_->notify_abort(comm_id_);
}

void Endpoint::abandon(const std::shared_ptr<Operation>& op) {
  std::lock_guard<std::mutex> lock(connection_->mutex());
  if (broken_.empty()) {
    broken_ = fmt::format("[ibverbs] rank {}: connection to peer {} is out of sync (an operation was abandoned)", rank_,
                          peer_);
  }
  transport::forget_buffer(op, sends_, recvs_);
}

Operation* Endpoint::next_send() {
  if (!broken_.empty() || aborted_) return nullptr;
  return sends_.empty() ? nullptr : sends_.front().get();
}

void Endpoint::framed(Operation* op, size_t payload) {
  op->done += payload;
  if (op->done >= op->bytes) {
    op->complete = true;  // copied into registered frames: the caller's buffer is free
    sends_.pop_front();
  }
}

Operation* Endpoint::match_locked(const wire::Header& header) {
  // The oldest posted receive that no message flows into yet.
  for (auto& op : recvs_) {
    if (op->matched) continue;
    if (op->tag.tag != header.tag || op->tag.meta != header.meta || op->bytes != header.total) {
      std::string what = fmt::format(
          "[ibverbs] rank {}: message from peer {} does not match: expected tag {} meta "
          "{:#x} {} B, got tag {} meta {:#x} {} B",
          rank_, peer_, op->tag.tag, op->tag.meta, op->bytes, header.tag, header.meta, header.total);
      if (broken_.empty()) broken_ = what;
      mismatch_.emplace(what, peer_, op->tag.meta, header.meta, op->bytes, header.total);
      return nullptr;
    }
    op->matched = true;
    return op.get();
  }
  auto early = std::make_shared<Operation>();
  early->bytes = header.total;
  early->tag = {header.tag, header.meta};
  early->storage.resize(header.total);
  early->buf = early->storage.data();
  early->matched = true;
  unexpected_.push_back(early);
  return early.get();
}

void Endpoint::on_frame(const wire::Header& header, const uint8_t* payload) {
  if ((header.flags & wire::kFirst) != 0) {
    discard_ = 0;
    incoming_ = match_locked(header);
    if (incoming_ == nullptr) discard_ = wire::frames_for(header.total);  // a refused message: drop its frames
  }
  if (discard_ > 0) {
    --discard_;
    return;
  }
  if (incoming_ == nullptr) {
    if (broken_.empty()) {
      broken_ =
          fmt::format("[ibverbs] rank {}: a frame from peer {} continues no message (lost frames?)", rank_, peer_);
    }
    return;
  }
  Operation& op = *incoming_;
  const size_t room = op.bytes - op.done;
  if (header.payload > room) {
    if (broken_.empty()) {
      broken_ = fmt::format("[ibverbs] rank {}: peer {} sent {} B more than its message announced", rank_, peer_,
                            header.payload - room);
    }
    incoming_ = nullptr;
    return;
  }
  if (header.payload > 0 && op.buf != nullptr) std::memcpy(op.buf + op.done, payload, header.payload);
  op.done += header.payload;
  if (op.done == op.bytes) {
    op.complete = true;
    incoming_ = nullptr;
    while (!recvs_.empty() && recvs_.front()->complete) recvs_.pop_front();
  }
}

void Endpoint::fail(const std::string& why) {
  if (broken_.empty()) broken_ = why;
}

}  // namespace tbcoll::ibverbs
