#include "deferred.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "work.h"

namespace tbcoll::torch_pg::deferred {
namespace {

using Clock = std::chrono::steady_clock;

// While calls keep coming the flusher ticks every kGrace; this long after the last held call it sleeps until the
// next one (which then wakes it, once).
constexpr std::chrono::milliseconds kActive{100};

struct Slot {
  std::mutex mutex;
  std::condition_variable wake;
  c10::intrusive_ptr<WorkTbcoll> held;
  Clock::time_point held_since;
  bool flusher_started = false;
  bool flusher_idle = false;  // asleep until notified

  // Queues the held call. Under mutex.
  void start_held() {
    if (!held) return;
    c10::intrusive_ptr<WorkTbcoll> work = std::move(held);
    held.reset();
    work->start_queued();
  }

  void flusher() {
    std::unique_lock<std::mutex> lock(mutex);
    Clock::time_point last_seen = Clock::now();
    while (true) {
      const auto now = Clock::now();
      if (held) {
        last_seen = now;
        if (now - held_since >= kGrace) {
          start_held();
          continue;
        }
        wake.wait_until(lock, held_since + kGrace);
      } else if (now - last_seen < kActive) {
        wake.wait_for(lock, kGrace);
      } else {
        flusher_idle = true;
        wake.wait(lock, [&] { return static_cast<bool>(held); });
        flusher_idle = false;
      }
    }
  }
};

// Never destroyed: the flusher thread (detached) may still run while the process exits.
Slot& slot() {
  static Slot* const instance = new Slot;
  return *instance;
}

}  // namespace

void flush() {
  Slot& s = slot();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.start_held();
}

void hold(const c10::intrusive_ptr<WorkTbcoll>& work) {
  Slot& s = slot();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.start_held();
  s.held = work;
  s.held_since = Clock::now();
  if (!s.flusher_started) {
    s.flusher_started = true;
    std::thread([&s] { s.flusher(); }).detach();
  } else if (s.flusher_idle) {
    s.wake.notify_one();
  }
}

bool take(const WorkTbcoll* work) {
  Slot& s = slot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.held.get() != work) return false;
  s.held.reset();
  return true;
}

void start(const WorkTbcoll* work) {
  Slot& s = slot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.held.get() == work) s.start_held();
}

void flush_owned_by(const void* owner) {
  Slot& s = slot();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.held && s.held->owner() == owner) s.start_held();
}

}  // namespace tbcoll::torch_pg::deferred
