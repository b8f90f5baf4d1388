#include "transports/ibverbs/endpoint.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "common/copy.h"
#include "common/log.h"

namespace tbcoll::ibverbs {
namespace {

// A message of this size or more is copied out of the slots with non-temporal stores (on_frame).
constexpr size_t kStreamOutFromBytes = size_t{16} << 20;

// The request of one send or receive: test() drives the endpoint, block() waits in it, and dropping it unfinished
// tells the endpoint its stream is out of sync. It is placed in its operation's RequestSlot, and the operation
// holds itself (Operation::requested) until the request's delete, which runs once the request's destructor is
// done: only then may the operation, and the slot with it, go.
class Request final : public transport::Request {
 public:
  Request(Endpoint* endpoint, Operation* op) : endpoint_(endpoint), op_(op) {}
  ~Request() override {
    if (!op_->complete) endpoint_->abandon(op_->requested);
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  bool test() override {
    if (op_->complete) return true;
    endpoint_->progress();
    return op_->complete;
  }
  void block(std::chrono::microseconds max_wait) override {
    if (!op_->complete) endpoint_->block(max_wait);
  }

  static void* operator new(size_t bytes, Operation* op) {
    if (bytes > sizeof(op->request.bytes)) throw std::bad_alloc();
    op->request.owner = op;
    return op->request.bytes;
  }
  static void operator delete(void* memory, Operation*) { release(memory); }  // a throwing constructor's
  static void operator delete(void* memory) { release(memory); }

 private:
  // The operation's hold on itself, let go of last: nothing of the slot is touched after it.
  static void release(void* memory) {
    auto* slot = reinterpret_cast<RequestSlot*>(static_cast<unsigned char*>(memory) - offsetof(RequestSlot, bytes));
    Operation* op = slot->owner;
    const std::shared_ptr<Operation> last = std::move(op->requested);
    op->request_live.store(false, std::memory_order_release);
  }

  Endpoint* endpoint_;
  Operation* op_;
};
static_assert(sizeof(Request) <= sizeof(RequestSlot::bytes), "RequestSlot holds a Request");

// The lanes a send has pieces for on each rail (wire::Lane bits), without an allocation for the usual few rails.
class LanesPerRail {
 public:
  explicit LanesPerRail(size_t rails) : more_(rails > kInline ? rails : 0, 0) {}
  unsigned& operator[](size_t rail) { return more_.empty() ? inline_[rail] : more_[rail]; }

 private:
  static constexpr size_t kInline = 8;
  unsigned inline_[kInline] = {};
  std::vector<unsigned> more_;
};

}  // namespace

Pace Pace::from(const env::Settings& settings, bool apple) {
  Pace pace;
  const std::string spin = settings.get("TBCOLL_IB_SPIN_US");
  const long long spin_us = spin == "auto" ? (apple ? -1 : 200) : settings.get_int("TBCOLL_IB_SPIN_US");
  const long long nap_us = settings.get_int("TBCOLL_IB_NAP_US");
  if (spin_us < -1 || nap_us < 1 || nap_us > 10000) {
    throw InvalidArgument(fmt::format("[ibverbs] TBCOLL_IB_SPIN_US={} / TBCOLL_IB_NAP_US={}: the spin is -1 (always) or "
                                      "0 us and up, a nap 1 to 10000 us", spin, nap_us));
  }
  pace.spin_after_traffic =
      spin_us < 0 ? std::chrono::microseconds::max() : std::chrono::microseconds(spin_us);
  pace.nap = std::chrono::microseconds(nap_us);
  return pace;
}

Endpoint::Endpoint(std::vector<std::shared_ptr<Connection>> rails, int rank, int peer, uint64_t comm_id,
                   size_t stripe_bytes, std::shared_ptr<const Registry> registry, Pace pace)
    : rails_(std::move(rails)),
      rank_(rank),
      peer_(peer),
      comm_id_(comm_id),
      stripe_bytes_(stripe_bytes),
      registry_(std::move(registry)),
      pace_(pace) {
  rail_cursor_.assign(rails_.size() * wire::kLanes, 0);
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
  LanesPerRail lanes(rails_.size());
  // Only a message that fills a zero-copy slot looks for a registration (none for small ones).
  std::shared_ptr<const Region> region =
      registry_ && bytes >= wire::kMinSlotBytes ? registry_->find(buf, bytes) : nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [made, op] = enqueue_locked(sends_, buf, bytes, tag);
    request = std::move(made);
    op->number = sends_posted_++;
    op->other_plans.resize(rails_.size() - 1);
    for (size_t rail = 0; rail < rails_.size(); ++rail) {
      const wire::Part part = wire::part_of(bytes, rails(), stripe_bytes_, static_cast<int>(rail));
      if (!part.carries) continue;
      plan_rail(*op, rail, part.begin, part.end, region.get());
      const RailPlan& plan = op->plan(rail);
      lanes[rail] = plan.lanes();
      op->lanes_left += static_cast<int>((lanes[rail] & 1u) + ((lanes[rail] >> 1) & 1u));
    }
    if (region) op->region = std::move(region);
  }
  // Small messages leave in this call.
  for (size_t rail = 0; rail < rails_.size(); ++rail) {
    if (lanes[rail] != 0) rails_[rail]->want_to_send(this, static_cast<int>(rail), lanes[rail]);
  }
  return request;
}

void Endpoint::plan_rail(Operation& op, size_t rail, size_t begin, size_t end, const Region* region) {
  const Connection& connection = *rails_[rail];
  RailPlan& plan = op.plan(rail);
  plan.head_at = plan.head_end = plan.zero_copy_at = plan.zero_copy_end = begin;
  if (region != nullptr && connection.noted()) {
    // Whole slots from the first kZeroCopyAlign boundary on (each a slot long, so the next starts aligned too);
    // the bytes before it go in frames, the rest after the last whole slot as from any memory.
    // Every slot inside the registration's piece that holds the first (a message across two pieces copies the
    // rest).
    const size_t slot = connection.slot_bytes();
    const uintptr_t at = reinterpret_cast<uintptr_t>(op.buf + begin);
    const size_t head = (wire::kZeroCopyAlign - at % wire::kZeroCopyAlign) % wire::kZeroCopyAlign;
    const Region::Piece piece = head < end - begin ? region->piece(connection.pd(), op.buf + begin + head)
                                                   : Region::Piece{};
    const size_t reach = piece.lkey != 0 ? std::min<size_t>(end - begin - head,
                                                            static_cast<size_t>(piece.end - (op.buf + begin + head)))
                                         : 0;
    const size_t slots = reach / slot;
    if (slots > 0) {
      plan.lkey = piece.lkey;
      plan.head_end = plan.zero_copy_at = begin + head;
      plan.zero_copy_end = plan.zero_copy_at + slots * slot;
    }
  }
  const wire::LaneSplit split = wire::split_lanes(end - plan.zero_copy_end, connection.slot_payload());
  plan.bulk_at = plan.zero_copy_end;
  plan.bulk_end = plan.small_at = plan.zero_copy_end + split.bulk_bytes;
  plan.end = end;
  plan.empty_frame = op.bytes == 0;
}

std::unique_ptr<transport::Request> Endpoint::irecv(void* buf, size_t bytes, transport::Tag tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [request, op] = enqueue_locked(recvs_, buf, bytes, tag);
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
        retire_front_locked(recvs_);
        ++recv_base_;
      }
    }
  }
  return std::move(request);
}

std::optional<transport::Arrival> Endpoint::probe() {
  progress();
  std::lock_guard<std::mutex> lock(mutex_);
  check_locked();
  if (recvs_posted_ != recv_base_) return std::nullopt;  // receives posted
  const auto early = unexpected_.find(recvs_posted_);
  if (early == unexpected_.end()) return std::nullopt;
  return transport::Arrival{early->second->tag, early->second->bytes};
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

std::pair<std::unique_ptr<transport::Request>, Operation*> Endpoint::enqueue_locked(
    std::deque<std::shared_ptr<Operation>>& queue, const void* buf, size_t bytes, transport::Tag tag) {
  std::shared_ptr<Operation> op;
  // A retired operation no request holds any more is reused: a message then costs no allocation of it.
  for (size_t i = spare_.size(); i-- > 0 && !op;) {
    if (spare_[i]->request_live.load(std::memory_order_acquire) || spare_[i].use_count() != 1) continue;
    op = std::move(spare_[i]);
    spare_[i] = std::move(spare_.back());
    spare_.pop_back();
    op->other_plans.clear();
    op->storage.clear();
    static_cast<transport::QueuedOperation&>(*op) = transport::QueuedOperation{};
    op->number = 0;
    op->matched = op->arrived = false;
    op->plan0 = RailPlan{};
    op->lanes_left = 0;
    op->zero_copy_in_flight = 0;
    op->region.reset();
  }
  if (!op) op = std::make_shared<Operation>();
  op->buf = static_cast<uint8_t*>(const_cast<void*>(buf));
  op->bytes = bytes;
  op->tag = tag;
  queue.push_back(op);
  Operation* raw = op.get();
  raw->requested = std::move(op);
  raw->request_live.store(true, std::memory_order_relaxed);
  return {std::unique_ptr<transport::Request>(new (raw) Request(this, raw)), raw};
}

void Endpoint::retire_front_locked(std::deque<std::shared_ptr<Operation>>& queue) {
  if (spare_.size() < kSpares) spare_.push_back(std::move(queue.front()));
  queue.pop_front();
}

void Endpoint::broken_locked(const std::string& why) {
  if (broken_.empty()) broken_ = why;
  troubled_ = true;
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

bool Endpoint::progress() {
  bool moved = false;
  for (auto& rail : rails_) {
    try {
      moved = rail->progress() || moved;
    } catch (const IoError& error) {
      // The connection names its device and the peer's port key; the caller needs the peer's rank.
      std::lock_guard<std::mutex> lock(mutex_);
      broken_locked(naming_peer(error.what()));
      throw IoError(broken_);
    }
  }
  if (troubled_ || aborted_) {  // (nothing to check on the way of every message)
    std::lock_guard<std::mutex> lock(mutex_);
    check_locked();
  }
  return moved;
}

void Endpoint::block(std::chrono::microseconds max_wait) {
  const auto until = Clock::now() + max_wait;
  for (;;) {
    try {
      if (progress()) return;
    } catch (const Error&) {
      return;  // the caller's test() says why
    }
    const auto now = Clock::now();
    if (now >= until) return;
    uint64_t traffic = 0;
    for (const auto& rail : rails_) traffic += rail->traffic();
    if (traffic != seen_traffic_) {  // completions came since the last look (here or in a test())
      seen_traffic_ = traffic;
      seen_traffic_at_ = now;
    }
    // (max(): never; compared as such, since max() microseconds overflow in nanoseconds)
    const bool quiet = pace_.spin_after_traffic != std::chrono::microseconds::max() &&
                       now - seen_traffic_at_ >= pace_.spin_after_traffic;
    if (quiet) {
      std::this_thread::sleep_for(std::min<Clock::duration>(until - now, pace_.nap));
      return;
    }
    std::this_thread::yield();  // ranks sharing a CPU: let the one we wait for run
  }
}

void Endpoint::abort() {
  aborted_ = true;
  for (auto& rail : rails_) rail->notify_abort(comm_id_);
}

void Endpoint::abandon(const std::shared_ptr<Operation>& op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_locked(fmt::format("[ibverbs] rank {}: connection to peer {} is out of sync (an operation was abandoned)",
                              rank_, peer_));
    transport::forget_buffer(op, sends_, recvs_);
  }
  // Zero-copy slots already posted read the caller's memory until their sends complete (a few slots' wire time):
  // the memory is the caller's again only then.
  const auto give_up = Clock::now() + kZeroCopyDrain;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (op->zero_copy_in_flight == 0) {
        op->region.reset();  // nothing more is sent from it (the endpoint is broken): the caller may deregister
        return;
      }
    }
    bool alive = false;  // a failed link's queue pairs read nothing more
    for (auto& rail : rails_) {
      try {
        rail->progress();
        alive = alive || rail->alive();
      } catch (const Error&) {
      }
    }
    if (!alive) return;
    if (Clock::now() >= give_up) {
      log::warn("[ibverbs] rank {}: a dropped send to peer {} still had zero-copy slots in flight after {} ms", rank_,
                peer_, std::chrono::duration_cast<std::chrono::milliseconds>(kZeroCopyDrain).count());
      return;
    }
    std::this_thread::yield();
  }
}

Piece Endpoint::fill_piece(int rail, int lane, wire::Header* header, uint8_t* payload, size_t capacity, bool* more,
                           ZeroCopySlot* zero_copy) {
  std::lock_guard<std::mutex> lock(mutex_);
  *more = false;
  if (!broken_.empty() || aborted_) return Piece::kNone;
  const size_t r = static_cast<size_t>(rail);
  uint64_t& cursor = rail_cursor_[r * wire::kLanes + static_cast<size_t>(lane)];
  auto has_piece = [&](Operation& op) { return op.plan(r).left(lane); };
  size_t i = cursor > send_base_ ? static_cast<size_t>(cursor - send_base_) : 0;
  while (i < sends_.size() && !has_piece(*sends_[i])) ++i;
  cursor = send_base_ + i;
  if (i == sends_.size()) return Piece::kNone;
  Operation& op = *sends_[i];  // not used once it may have left sends_ below
  RailPlan& plan = op.plan(r);
  // (A send whose request was dropped, its buffer forgotten, never gets here: the endpoint is broken then.)
  const bool zero_copy_piece = lane == wire::kBulk && plan.zero_copy_at < plan.zero_copy_end;
  const bool head = lane == wire::kSmall && plan.head_at < plan.head_end;
  size_t& at = zero_copy_piece    ? plan.zero_copy_at
               : lane == wire::kBulk ? plan.bulk_at
               : head              ? plan.head_at
                                   : plan.small_at;
  const size_t limit = zero_copy_piece    ? plan.zero_copy_end
                       : lane == wire::kBulk ? plan.bulk_end
                       : head              ? plan.head_end
                                           : plan.end;
  const size_t begin = at;
  // A zero-copy region is whole slots, a slot each (it carries no header).
  const size_t bytes = std::min(zero_copy_piece ? rails_[r]->slot_bytes() : capacity, limit - at);
  at += bytes;
  if (lane == wire::kSmall) plan.empty_frame = false;
  header->kind = static_cast<uint8_t>(wire::FrameKind::kData);
  header->flags = static_cast<uint8_t>((begin == 0 ? wire::kFirst : 0) | (begin + bytes == op.bytes ? wire::kLast : 0));
  header->payload = static_cast<uint32_t>(bytes);
  header->comm_id = comm_id_;
  header->tag = op.tag.tag;
  header->meta = op.tag.meta;
  header->total = static_cast<uint32_t>(op.bytes);
  header->message = op.number;
  header->offset = static_cast<uint32_t>(begin);
  if (zero_copy_piece) {
    zero_copy->source = op.buf + begin;
    zero_copy->lkey = plan.lkey;
    zero_copy->bytes = static_cast<uint32_t>(bytes);
    zero_copy->op = sends_[i];
    ++op.zero_copy_in_flight;
  } else if (bytes > 0 && op.buf != nullptr) {
    // The slot is read by the adapter, never by this CPU again: a message that streams past the last-level cache
    // (and so evicts the slots) is copied in without first reading the slot's lines (stream_from_bytes).
    if (op.bytes >= stream_from_bytes()) {
      stream_copy(payload, op.buf + begin, bytes);
    } else {
      std::memcpy(payload, op.buf + begin, bytes);
    }
  }
  op.done += bytes;
  if (!plan.left(lane) && --op.lanes_left == 0) finish_send_locked(op);
  // Pieces left for this rail and lane: this send's, or a later one's.
  const size_t from = cursor > send_base_ ? static_cast<size_t>(cursor - send_base_) : 0;
  for (size_t j = from; j < sends_.size() && !*more; ++j) *more = has_piece(*sends_[j]);
  return zero_copy_piece ? Piece::kZeroCopy : Piece::kCopied;
}

void Endpoint::finish_send_locked(Operation& op) {
  if (op.lanes_left != 0 || op.zero_copy_in_flight != 0 || op.complete) return;
  op.complete = true;  // in registered memory, or read from the caller's by the adapter: the caller's buffer is free
  op.region.reset();
  while (!sends_.empty() && sends_.front()->complete) {
    retire_front_locked(sends_);
    ++send_base_;
  }
}

void Endpoint::zero_copy_sent(Operation* op) {
  std::lock_guard<std::mutex> lock(mutex_);
  --op->zero_copy_in_flight;
  finish_send_locked(*op);
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
  if (header.payload > 0 && op->buf != nullptr) {
    // A message far beyond the caches goes to memory without first reading its lines (stream_copy: a third less
    // DRAM traffic, as shm's two-shot writes its large outputs); a smaller one stays cached for the reduction.
    if (op->bytes >= kStreamOutFromBytes) {
      stream_copy(op->buf + header.offset, payload, header.payload);
    } else {
      std::memcpy(op->buf + header.offset, payload, header.payload);
    }
  }
  op->done += header.payload;
  op->arrived = true;
  if (op->done == op->bytes && header.message < recvs_posted_) {
    op->complete = true;
    while (!recvs_.empty() && recvs_.front()->complete) {
      retire_front_locked(recvs_);
      ++recv_base_;
    }
  }
}

void Endpoint::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  broken_locked(naming_peer(why));
}

}  // namespace tbcoll::ibverbs
