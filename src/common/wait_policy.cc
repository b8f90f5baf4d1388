// The communicator's wait policy (tbcoll/collective_fast_path.hpp).
#include <fmt/format.h>

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
  return fmt::format("auto (spin up to {} us, then sleep)", cap_.count());
}

}  // namespace tbcoll::transport
