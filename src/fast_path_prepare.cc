// The fast-path interface's default preparation (collective_fast_path.hpp): a prepared call that runs the fast
// path's run() every time, for transports with nothing to decide once.
#include <memory>

#include "common/time.h"
#include "tbcoll/collective_fast_path.hpp"

namespace tbcoll::transport {
namespace {

class RunEachTime final : public PreparedFastCall {
 public:
  RunEachTime(CollectiveFastPath& fast_path, size_t index) : fast_path_(fast_path), index_(index) {}
  void run(const CollectiveArgs& args) override {
    if (args.deadline != Deadline::min()) return fast_path_.run(index_, args);
    CollectiveArgs with_deadline = args;  // the deadline read now, cheaply (the clock a scheduler tick behind)
    with_deadline.deadline = CallTimeout::deadline_in(args.timeout);
    fast_path_.run(index_, with_deadline);
  }

 private:
  CollectiveFastPath& fast_path_;
  size_t index_;
};

}  // namespace

std::unique_ptr<PreparedFastCall> CollectiveFastPath::prepare(size_t index, const CollectiveArgs&) {
  return std::make_unique<RunEachTime>(*this, index);
}

}  // namespace tbcoll::transport
