#include "transports/ibverbs/endpoint.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace tbcoll::ibverbs {

Endpoint::Endpoint(std::vector<std::shared_ptr<Connection>> rails, int rank, int peer, uint64_t comm_id,
                   size_t stripe_bytes)
    : rails_(std::move(rails)), rank_(rank), peer_(peer), comm_id_(comm_id), stripe_bytes_(stripe_bytes) {
  rail_cursor_.assign(rails_.size(), 0);
  for (size_t rail = 0; rail < rails_.size(); ++rail) rails_[rail]->attach(comm_id_, this, static_cast<int>(rail));
}

Endpoint::~Endpoint() {
  for (auto& rail : rails_) rail->detach(comm_id_);
}

std::unique_ptr<transport::Request> Endpoint::isend(const void* buf, size_t bytes, transport::Tag tag) {
  if (bytes > wire::kMaxMessageBytes) {
    throw InvalidArgument(
        fmt::format("[ibverbs] rank {}: message of {} B to peer {} is over the transport's limit of "
                    "{} B",
                    rank_, bytes, peer_, wire::kMaxMessageBytes));
  }
  std::unique_ptr<transport::Request> request;
  bool striped = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [made, op] = transport::enqueue<Endpoint, Operation>(this, sends_, buf, bytes, tag);
    request = std::move(made);
    op->number = sends_posted_++;
    op->part0 = wire::part_of(bytes, rails(), stripe_bytes_, 0);
    op->parts_left = 1;
    striped = rails() > 1 && wire::part_of(bytes, rails(), stripe_bytes_, 1).carries;
    for (int rail = 1; striped && rail < rails(); ++rail) {
      op->other_parts.push_back(wire::part_of(bytes, rails(), stripe_bytes_, rail));
      op->parts_left += op->other_parts.back().carries ? 1 : 0;
    }
  }
  rails_[0]->want_to_send(this, 0);  // small messages leave in this call
  for (size_t rail = 1; striped && rail < rails_.size(); ++rail) rails_[rail]->want_to_send(this, static_cast<int>(rail));
  return request;
}

std::unique_ptr<transport::Request> Endpoint::irecv(void* buf, size_t bytes, transport::Tag tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [request, op] = transport::enqueue<Endpoint, Operation>(this, recvs_, buf, bytes, tag);
  op->number = recvs_posted_++;
  auto early_it = unexpected_.find(op->number);
  if (early_it != unexpected_.end()) {  // (some of) its message came first
    std::shared_ptr<Operation> early = std::move(early_it->second);
    unexpected_.erase(early_it);
    if (early->tag.tag != tag.tag || early->tag.meta != tag.meta || early->bytes != bytes) {
      mismatch_locked(tag, bytes, early->tag, early->bytes);  // never copies; later frames are dropped
    } else {
      if (bytes > 0) std::memcpy(op->buf, early->storage.data(), bytes);  // the parts not come yet follow here
      op->done = early->done;
      op->matched = true;
      op->arrived = early->arrived;
      op->complete = op->arrived && op->done == op->bytes;
      while (!recvs_.empty() && recvs_.front()->complete) {
        recvs_.pop_front();
        ++recv_base_;
      }
    }
  }
  return std::move(request);
}

void Endpoint::mismatch_locked(const transport::Tag& expected, size_t expected_bytes, const transport::Tag& got,
                               size_t got_bytes) {
  std::string what = fmt::format(
      "[ibverbs] rank {}: message from peer {} does not match: expected tag {} meta {:#x} {} B, got tag {} meta "
      "{:#x} {} B",
      rank_, peer_, expected.tag, expected.meta, expected_bytes, got.tag, got.meta, got_bytes);
  broken_locked(what);
  if (!mismatch_) mismatch_.emplace(what, peer_, expected.meta, got.meta, expected_bytes, got_bytes);
}

void Endpoint::broken_locked(const std::string& why) {
  if (broken_.empty()) broken_ = why;
}

void Endpoint::check_locked() {
  if (mismatch_) throw *mismatch_;
  if (!broken_.empty()) throw IoError(broken_);
  if (aborted_) {
    broken_ = fmt::format("[ibverbs] rank {}: connection to peer {} was aborted", rank_, peer_);
    throw IoError(broken_);
  }
}

std::string Endpoint::naming_peer(const std::string& why) const {
  const std::string self = fmt::format("[ibverbs] rank {}: ", rank_);
  if (why.rfind(self, 0) == 0) return why;  // the endpoint's own words
  std::string_view rest = why;
  constexpr std::string_view kTag = "[ibverbs] ";
  if (rest.substr(0, kTag.size()) == kTag) rest.remove_prefix(kTag.size());
  return fmt::format("{}peer {}: {}", self, peer_, rest);
}

void Endpoint::progress() {
  for (auto& rail : rails_) {
    try {
      rail->progress();
    } catch (const IoError& error) {
      // The connection names its device and the peer's port key; the caller needs the peer's rank.
      std::lock_guard<std::mutex> lock(mutex_);
      broken_locked(naming_peer(error.what()));
      throw IoError(broken_);
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  check_locked();
}

void Endpoint::block(std::chrono::microseconds max_wait) { rails_[0]->block(max_wait); }

void Endpoint::abort() {
  aborted_ = true;
  for (auto& rail : rails_) rail->notify_abort(comm_id_);
}

void Endpoint::abandon(const std::shared_ptr<Operation>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  broken_locked(
      fmt::format("[ibverbs] rank {}: connection to peer {} is out of sync (an operation was abandoned)", rank_, peer_));
  transport::forget_buffer(op, sends_, recvs_);
}

bool Endpoint::fill_frame(int rail, wire::Header* header, uint8_t* payload, bool* more) {
  std::lock_guard<std::mutex> lock(mutex_);
  *more = false;
  if (!broken_.empty() || aborted_) return false;
  const size_t r = static_cast<size_t>(rail);
  auto carries = [r](Operation& op) {
    const wire::Part* part = op.part(r);
    return part != nullptr && part->carries;
  };
  size_t i = rail_cursor_[r] > send_base_ ? static_cast<size_t>(rail_cursor_[r] - send_base_) : 0;
  while (i < sends_.size() && !carries(*sends_[i])) ++i;
  rail_cursor_[r] = send_base_ + i;
  if (i == sends_.size()) return false;
  Operation& op = *sends_[i];  // not used once it may have left sends_ below
  wire::Part& part = *op.part(r);
  const size_t bytes = std::min(wire::kPayloadBytes, part.end - part.begin);
  header->kind = static_cast<uint8_t>(wire::FrameKind::kData);
  header->flags = static_cast<uint8_t>((part.begin == 0 ? wire::kFirst : 0) |
                                       (part.begin + bytes == op.bytes ? wire::kLast : 0));
  header->payload = static_cast<uint16_t>(bytes);
  header->comm_id = comm_id_;
  header->tag = op.tag.tag;
  header->meta = op.tag.meta;
  header->total = static_cast<uint32_t>(op.bytes);
  header->message = op.number;
  header->offset = static_cast<uint32_t>(part.begin);
  if (bytes > 0 && op.buf != nullptr) std::memcpy(payload, op.buf + part.begin, bytes);
  part.begin += bytes;
  op.done += bytes;
  if (part.begin == part.end) {
    part.carries = false;
    if (--op.parts_left == 0) {
      op.complete = true;  // copied into registered frames: the caller's buffer is free
      while (!sends_.empty() && sends_.front()->complete) {
        sends_.pop_front();
        ++send_base_;
      }
    }
  }
  // Frames left for this rail: this send's, or a later one's.
  const size_t from = rail_cursor_[r] > send_base_ ? static_cast<size_t>(rail_cursor_[r] - send_base_) : 0;
  for (size_t j = from; j < sends_.size() && !*more; ++j) *more = carries(*sends_[j]);
  return true;
}

Operation* Endpoint::receive_for_locked(const wire::Header& header) {
  if (header.message < recv_base_) {
    broken_locked(fmt::format("[ibverbs] rank {}: a frame from peer {} belongs to message {}, which is complete "
                              "(lost or repeated frames?)",
                              rank_, peer_, header.message));
    return nullptr;
  }
  if (header.message < recvs_posted_) {
    Operation* op = recvs_[static_cast<size_t>(header.message - recv_base_)].get();
    if (!op->matched) {
      if (op->tag.tag != header.tag || op->tag.meta != header.meta || op->bytes != header.total) {
        mismatch_locked(op->tag, op->bytes, {header.tag, header.meta}, header.total);
        return nullptr;
      }
      op->matched = true;
    }
    return op;
  }
  std::shared_ptr<Operation>& early = unexpected_[header.message];
  if (!early) {
    early = std::make_shared<Operation>();
    early->number = header.message;
    early->bytes = header.total;
    early->tag = {header.tag, header.meta};
    early->storage.resize(header.total);
    early->buf = early->storage.data();
    early->matched = true;
  }
  return early.get();
}

void Endpoint::on_frame(int rail, const wire::Header& header, const uint8_t* payload) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_.empty()) return;  // a mismatch or loss: nothing more is delivered here
  Operation* op = receive_for_locked(header);
  if (op == nullptr) return;
  if (header.total != op->bytes || header.offset > op->bytes || header.payload > op->bytes - header.offset ||
      op->done + header.payload > op->bytes) {
    broken_locked(fmt::format("[ibverbs] rank {}: a frame from peer {} on rail {} ({}) lies outside its message "
                              "({} B at offset {} of {} B)",
                              rank_, peer_, rail, rails_[static_cast<size_t>(rail)]->device(), header.payload,
                              header.offset, op->bytes));
    return;
  }
  if (header.payload > 0 && op->buf != nullptr) std::memcpy(op->buf + header.offset, payload, header.payload);
  op->done += header.payload;
  op->arrived = true;
  if (op->done == op->bytes && header.message < recvs_posted_) {
    op->complete = true;
    while (!recvs_.empty() && recvs_.front()->complete) {
      recvs_.pop_front();
      ++recv_base_;
    }
  }
}

void Endpoint::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  broken_locked(naming_peer(why));
}

}  // namespace tbcoll::ibverbs
