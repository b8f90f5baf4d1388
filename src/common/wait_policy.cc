// The communicator's wait policy (tbcoll/collective_fast_path.hpp).
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "platform/platform.h"
#include "tbcoll/collective_fast_path.hpp"

namespace tbcoll::transport {

const char* WaitPolicy::name(Mode mode) {
  switch (mode) {
    case Mode::kSpin: return "spin";
    case Mode::kBlock: return "block";
    default: return "auto";
  }
}

std::string WaitPolicy::describe() const {
  if (mode_ != Mode::kAuto) return name(mode_);
  return fmt::format("auto (spin up to {} us, then sleep; sleep at once on busy CPUs)", cap_.count());
}

namespace {

// The CPUs a look at the machine compares its runnable threads with: the probe's, else the online ones.
int cpus_of(int probe_cpus) {
  static const int online = static_cast<int>(std::thread::hardware_concurrency());
  return probe_cpus > 0 ? probe_cpus : online;
}

}  // namespace

void WaitPolicy::look_at_machine(Clock::time_point now) {
  next_look_ = now + kLookEvery;
  const int cpus = cpus_of(cpus_);
  const int runnable = probe_ != nullptr ? probe_() : platform::runnable_threads();
  if (cpus > 0 && runnable > cpus) sign_of_contention(now, Clock::duration::zero(), runnable);
}

void WaitPolicy::gap(Clock::time_point now) {
  const long switches = probe_ != nullptr ? -1 : platform::involuntary_switches();
  const bool lost_cpu = switches < 0 || switches_ < 0 || switches != switches_;
  switches_ = switches;
  if (lost_cpu) sign_of_contention(now, now - last_read_, 0);
}

void WaitPolicy::sign_of_contention(Clock::time_point now, Clock::duration lost, int runnable) {
  const bool confirmed = now - last_sign_ < kConfirmWithin;
  last_sign_ = now;
  if (!confirmed) return;
  contended_until_ = now + kContendedFor;
  spin_until_ = now;
  if (told_) return;
  told_ = true;
  // Formatted only when INFO is on: waits allocate nothing otherwise.
  if (log::level() < log::Level::kInfo) return;
  if (runnable > 0) {
    log::info("waits: the CPUs are contended ({} threads runnable on {} CPUs): waits sleep at once while that lasts",
              runnable, cpus_of(cpus_));
  } else {
    log::info("waits: the CPUs are contended (a spinning wait lost its CPU for {} us): waits sleep at once while "
              "that lasts", std::chrono::duration_cast<std::chrono::microseconds>(lost).count());
  }
}

}  // namespace tbcoll::transport
