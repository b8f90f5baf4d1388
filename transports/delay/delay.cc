#include "transports/delay/delay.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <utility>
#include <vector>

namespace tbcoll::transport {
namespace {

using Clock = std::chrono::steady_clock;

class DelayedEndpoint;

// Sleeps most of the way to until, at most max_wait (the last stretch is left to the caller's polling: a sleep
// overshoots by tens of microseconds).
void nap_towards(Clock::time_point until, std::chrono::microseconds max_wait) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now());
  const auto nap = std::min(left, max_wait) - std::chrono::microseconds(60);
  if (nap.count() <= 0) return;
  timespec ts{static_cast<time_t>(nap.count() / 1000000), static_cast<long>(nap.count() % 1000000) * 1000};
  nanosleep(&ts, nullptr);
}

// A receive whose completion is held back by the emulated link (delay.h), counted from when its bytes arrived.
// The algorithms test only the oldest pending receive of a peer, so each test looks at every pending receive of
// the endpoint whose bytes are in: the latencies of messages that arrived together overlap, as on a real link.
class DelayedReceive final : public Request {
 public:
  DelayedReceive(DelayedEndpoint* endpoint, std::unique_ptr<Request> inner, size_t bytes);
  ~DelayedReceive() override;

  bool test() override;
  void block(std::chrono::microseconds max_wait) override;
  bool arrived() const { return arrived_; }
  /// Records the arrival if the bytes are in (tests the inner request, which may throw): the time the link is done
  /// with them and when the receive completes.
  void observe(Clock::time_point now, Clock::time_point* link_free, Clock::duration latency, double seconds_per_byte) {
    if (arrived_ || !inner_->test()) return;
    arrived_ = true;
    waiting_->fetch_sub(1, std::memory_order_relaxed);
    const Clock::time_point start = std::max(now, *link_free);
    *link_free = start + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(static_cast<double>(bytes_) * seconds_per_byte));
    ready_at_ = *link_free + latency;
  }

 private:
  DelayedEndpoint* endpoint_;
  std::atomic<int>* waiting_;  // the endpoint's communicator's count of receives waiting for their bytes
  std::unique_ptr<Request> inner_;
  size_t bytes_;
  bool arrived_ = false;
  Clock::time_point ready_at_{};
};

// A send, passed through; only its failure (the peer closed, say) waits behind the messages the link still holds
// (DelayedEndpoint::fail).
class DelayedSend final : public Request {
 public:
  DelayedSend(DelayedEndpoint* endpoint, std::unique_ptr<Request> inner)
      : endpoint_(endpoint), inner_(std::move(inner)) {}

  bool test() override;
  void block(std::chrono::microseconds max_wait) override;

 private:
  DelayedEndpoint* endpoint_;
  std::unique_ptr<Request> inner_;  // null when the inner isend itself failed
  bool done_ = false;
};

class DelayedEndpoint final : public Endpoint {
 public:
  DelayedEndpoint(std::unique_ptr<Endpoint> inner, const LinkEmulation& link, std::shared_ptr<std::atomic<int>> waiting)
      : inner_(std::move(inner)),
        waiting_(std::move(waiting)),
        latency_(
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(link.one_way_seconds()))),
        seconds_per_byte_(link.seconds_per_byte()) {}
  std::unique_ptr<Request> isend(const void* buf, size_t bytes, Tag tag) override {
    std::unique_ptr<Request> inner;
    guard([&] { inner = inner_->isend(buf, bytes, tag); });
    return std::make_unique<DelayedSend>(this, std::move(inner));
  }
  std::unique_ptr<Request> irecv(void* buf, size_t bytes, Tag tag) override {
    return std::make_unique<DelayedReceive>(this, inner_->irecv(buf, bytes, tag), bytes);
  }
  /// The inner endpoint's arrival: a receive from any source picks its peer by when the bytes really came; the
  /// receive it then posts waits out the emulated link as any other.
  std::optional<Arrival> probe() override {
    if (!pending_.empty()) return std::nullopt;  // receives posted
    std::optional<Arrival> arrival;
    guard([&] { arrival = inner_->probe(); });
    throw_failure_when_due();
    return arrival;
  }
  int peer() const override { return inner_->peer(); }

  void add(DelayedReceive* receive) { pending_.push_back(receive); }
  void remove(DelayedReceive* receive) { pending_.erase(std::find(pending_.begin(), pending_.end(), receive)); }
  /// Stamps the pending receives whose bytes are in, oldest first, up to the first whose bytes are not: messages
  /// match receives in posting order, so no later one can have its bytes yet (and a transport may report its
  /// peer's close to a receive tested out of turn even though the messages before the close are there).
  void observe_all() {
    const auto now = Clock::now();
    for (DelayedReceive* receive : pending_) {
      const bool failed_before = failed();
      guard([&] { receive->observe(now, &link_free_, latency_, seconds_per_byte_); });
      // A transport may complete this receive and fail on a later one in the same call (tcp reads on to the
      // peer's close): a second look finds it complete.
      if (!receive->arrived() && !failed_before && failed()) {
        guard([&] { receive->observe(now, &link_free_, latency_, seconds_per_byte_); });
      }
      if (!receive->arrived()) break;
    }
  }
  /// Runs an inner call; a failure that came over the link (the peer closed or died, a connection reset, a
  /// mismatching message) is kept, to be reported once due (throw_failure_when_due); others propagate.
  template <typename Call>
  void guard(Call&& call) {
    try {
      call();
    } catch (const IoError&) {
      fail(std::current_exception());
    } catch (const RemoteError&) {
      fail(std::current_exception());
    } catch (const MismatchError&) {
      fail(std::current_exception());
    }
  }
  /// When the endpoint's failure is reported: a real link delivers everything sent before a close (or a reset)
  /// first, so not before the messages that arrived ahead of it have waited out their emulated time (the last one
  /// completes at link_free_ + latency_); no later either: the failure itself pays no emulated time, so a close
  /// waits at most the held messages' remaining delay. Receives already stamped complete as usual.
  Clock::time_point failure_due() const { return std::max(failed_at_, link_free_ + latency_); }
  bool failed() const { return failure_ != nullptr; }
  void throw_failure_when_due() const {
    if (failure_ != nullptr && Clock::now() >= failure_due()) std::rethrow_exception(failure_);
  }
  Clock::duration latency() const { return latency_; }
  /// The communicator's emulated receives still waiting for their bytes.
  std::atomic<int>& waiting() { return *waiting_; }

 private:
  void fail(std::exception_ptr error) {
    if (failure_ != nullptr) return;  // the first failure is the cause; later ones follow from it
    failure_ = std::move(error);
    failed_at_ = Clock::now();
  }

  std::unique_ptr<Endpoint> inner_;
  std::shared_ptr<std::atomic<int>> waiting_;
  Clock::duration latency_;
  double seconds_per_byte_;
  Clock::time_point link_free_{};         // when the link (peer -> this rank) finishes its last message
  std::vector<DelayedReceive*> pending_;  // in posting order; each receive adds and removes itself
  std::exception_ptr failure_;            // the inner endpoint's first failure, reported from failure_due()
  Clock::time_point failed_at_{};
};

DelayedReceive::DelayedReceive(DelayedEndpoint* endpoint, std::unique_ptr<Request> inner, size_t bytes)
    : endpoint_(endpoint), waiting_(&endpoint->waiting()), inner_(std::move(inner)), bytes_(bytes) {
  endpoint_->add(this);
  waiting_->fetch_add(1, std::memory_order_relaxed);
}

DelayedReceive::~DelayedReceive() {
  endpoint_->remove(this);
  if (!arrived_) waiting_->fetch_sub(1, std::memory_order_relaxed);
}

bool DelayedReceive::test() {
  // Every test stamps every pending receive that arrived, this one's arrival or not: a message that arrives while
  // an older one waits out its delay starts its own delay then, not once the older one completed.
  endpoint_->observe_all();
  if (arrived_) return Clock::now() >= ready_at_;
  endpoint_->throw_failure_when_due();
  return false;
}

void DelayedReceive::block(std::chrono::microseconds max_wait) {
  if (!arrived_) {
    if (endpoint_->failed()) {
      nap_towards(endpoint_->failure_due(), max_wait);
    } else {
      endpoint_->guard([&] { inner_->block(max_wait); });
    }
    return;
  }
  // Arrived, waiting out the link: sleep through the long part, leave the last stretch to the caller's
  // polling (a sleep overshoots by tens of microseconds). While other receives (of any endpoint of the
  // communicator) wait for their bytes, naps of at most an eighth of the latency (or a quarter of what is left of a
  // long serialisation), so messages arriving meanwhile are stamped (by the next test) at most that late; with none,
  // one nap: on a busy host every wake-up may cost a scheduler tick, and a step of short naps would pay several.
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(ready_at_ - Clock::now());
  const auto latency = std::chrono::duration_cast<std::chrono::microseconds>(endpoint_->latency());
  const bool others_waiting = endpoint_->waiting().load(std::memory_order_relaxed) > 0;
  const auto slice = others_waiting ? std::max(latency / 8, left / 4) : left;
  nap_towards(Clock::now() + std::min(left, slice), max_wait);
}

bool DelayedSend::test() {
  if (done_) return true;
  if (inner_ != nullptr) endpoint_->guard([&] { done_ = inner_->test(); });
  if (done_) return true;
  endpoint_->throw_failure_when_due();
  return false;
}

void DelayedSend::block(std::chrono::microseconds max_wait) {
  if (endpoint_->failed()) {
    nap_towards(endpoint_->failure_due(), max_wait);
  } else if (inner_ != nullptr) {
    endpoint_->guard([&] { inner_->block(max_wait); });
  }
}

}  // namespace

std::unique_ptr<Endpoint> with_emulation(std::unique_ptr<Endpoint> inner, const LinkEmulation& link,
                                         std::shared_ptr<std::atomic<int>> receives_waiting) {
  if (!link.on()) return inner;
  return std::make_unique<DelayedEndpoint>(std::move(inner), link, std::move(receives_waiting));
}

}  // namespace tbcoll::transport
