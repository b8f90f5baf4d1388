// Loopback context: endpoints are mailboxes in this process, for ranks that are its threads.
#include <mutex>

#include "transports/loopback/endpoint.h"
#include "transports/loopback/context.h"

namespace tbcoll::loopback {
namespace {

class Context final : public transport::Context {
 public:
  explicit Context(const transport::ContextArgs& args) : args_(args) {}

  std::string address() const override { return "loopback"; }

  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline) override {
    std::vector<std::unique_ptr<transport::Endpoint>> out;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& peer : peers) {
      auto endpoint = std::make_unique<Endpoint>(args_.rank, peer.rank, args_.comm_id);
      endpoints_.push_back(endpoint.get());
      out.push_back(std::move(endpoint));
    }
    return out;
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Endpoint* endpoint : endpoints_) endpoint->abort();
  }

 private:
  transport::ContextArgs args_;
  std::mutex mutex_;
  std::vector<Endpoint*> endpoints_;  // owned by the communicator, which destroys the context last
};

}  // namespace

std::unique_ptr<transport::Context> make_context(const transport::ContextArgs& args) {
  return std::make_unique<Context>(args);
}

}  // namespace tbcoll::loopback
