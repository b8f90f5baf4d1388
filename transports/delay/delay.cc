#include "transports/delay/delay.h"

#include <time.h>

#include <utility>

namespace tbcoll::transport {
namespace {

using Clock = std::chrono::steady_clock;

class DelayedReceive final : public Request {
 public:
  DelayedReceive(std::unique_ptr<Request> inner, std::chrono::microseconds delay)
      : inner_(std::move(inner)), delay_(delay) {}

  bool test() override {
    if (!arrived_) {
      if (!inner_->test()) return false;
      arrived_ = true;
      ready_at_ = Clock::now() + delay_;
    }
    return Clock::now() >= ready_at_;
  }

  void block(std::chrono::microseconds max_wait) override {
    if (!arrived_) {
      inner_->block(max_wait);
      return;
    }
    // Arrived, waiting out the delay: sleep through the long part, leave the last stretch to the caller's
    // polling (a sleep overshoots by tens of microseconds).
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(ready_at_ - Clock::now());
    auto nap = std::min(left, max_wait) - std::chrono::microseconds(60);
    if (nap.count() > 0) {
      timespec ts{static_cast<time_t>(nap.count() / 1000000), static_cast<long>(nap.count() % 1000000) * 1000};
      nanosleep(&ts, nullptr);
    }
  }

 private:
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
    return std::make_unique<DelayedReceive>(inner_->irecv(buf, bytes, tag), delay_);
  }
  int peer() const override { return inner_->peer(); }

 private:
  std::unique_ptr<Endpoint> inner_;
  std::chrono::microseconds delay_;
};

}  // namespace

std::unique_ptr<Endpoint> with_delay(std::unique_ptr<Endpoint> inner, std::chrono::microseconds delay) {
  if (delay.count() <= 0) return inner;
  return std::make_unique<DelayedEndpoint>(std::move(inner), delay);
}

}  // namespace tbcoll::transport
