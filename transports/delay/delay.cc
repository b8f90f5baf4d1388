#include "transports/delay/delay.h"

#include <time.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace tbcoll::transport {
namespace {

using Clock = std::chrono::steady_clock;

class DelayedEndpoint;

// A receive whose completion is held back by the delay, counted from when its bytes arrived. The algorithms test
// only the oldest pending receive of a peer, so each test looks at every pending receive of the endpoint: the
// delays of messages that arrived together overlap, as on a real link.
class DelayedReceive final : public Request {
 public:
  DelayedReceive(DelayedEndpoint* endpoint, std::unique_ptr<Request> inner, std::chrono::microseconds delay);
  ~DelayedReceive() override;

  bool test() override;
  void block(std::chrono::microseconds max_wait) override;
  /// Records the arrival time if the bytes are in (tests the inner request).
  void observe(Clock::time_point now) {
    if (!arrived_ && inner_->test()) {
      arrived_ = true;
      ready_at_ = now + delay_;
    }
  }

 private:
  DelayedEndpoint* endpoint_;
  std::unique_ptr<Request> inner_;
  std::chrono::microseconds delay_;
  bool arrived_ = false;
  Clock::time_point ready_at_{};
};

class DelayedEndpoint final : public Endpoint {
 public:
  DelayedEndpoint(std::unique_ptr<Endpoint> inner, std::chrono::microseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}
  std::unique_ptr<Request> isend(const void* buf, size_t bytes, Tag tag) override {
    return inner_->isend(buf, bytes, tag);
  }
  std::unique_ptr<Request> irecv(void* buf, size_t bytes, Tag tag) override {
    return std::make_unique<DelayedReceive>(this, inner_->irecv(buf, bytes, tag), delay_);
  }
  int peer() const override { return inner_->peer(); }

  void add(DelayedReceive* receive) { pending_.push_back(receive); }
  void remove(DelayedReceive* receive) { pending_.erase(std::find(pending_.begin(), pending_.end(), receive)); }
  void observe_all() {
    const auto now = Clock::now();
    for (DelayedReceive* receive : pending_) receive->observe(now);
  }

 private:
  std::unique_ptr<Endpoint> inner_;
  std::chrono::microseconds delay_;
  std::vector<DelayedReceive*> pending_;  // in posting order; each receive adds and removes itself
};

DelayedReceive::DelayedReceive(DelayedEndpoint* endpoint, std::unique_ptr<Request> inner,
                               std::chrono::microseconds delay)
    : endpoint_(endpoint), inner_(std::move(inner)), delay_(delay) {
  endpoint_->add(this);
}

DelayedReceive::~DelayedReceive() { endpoint_->remove(this); }

bool DelayedReceive::test() {
  // Every test stamps every pending receive that arrived, this one's arrival or not: a message that arrives while
  // an older one waits out its delay starts its own delay then, not once the older one completed.
  endpoint_->observe_all();
  return arrived_ && Clock::now() >= ready_at_;
}

void DelayedReceive::block(std::chrono::microseconds max_wait) {
  if (!arrived_) {
    inner_->block(max_wait);
    return;
  }
  // Arrived, waiting out the delay: sleep through the long part, leave the last stretch to the caller's
  // polling (a sleep overshoots by tens of microseconds). Naps of at most an eighth of the delay, so later
  // messages arriving meanwhile are stamped (by the next test) at most that late.
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(ready_at_ - Clock::now());
  auto nap = std::min({left, max_wait, delay_ / 8}) - std::chrono::microseconds(60);
  if (nap.count() > 0) {
    timespec ts{static_cast<time_t>(nap.count() / 1000000), static_cast<long>(nap.count() % 1000000) * 1000};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace

std::unique_ptr<Endpoint> with_delay(std::unique_ptr<Endpoint> inner, std::chrono::microseconds delay) {
  if (delay.count() <= 0) return inner;
  return std::make_unique<DelayedEndpoint>(std::move(inner), delay);
}

}  // namespace tbcoll::transport
