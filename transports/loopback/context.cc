// Loopback context: endpoints are mailboxes in this process, for ranks that are its threads.
#include <mutex>

#include "transports/loopback/endpoint.h"
#include "transports/endpoint_list.h"
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
    for (const auto& peer : peers) {
      out.push_back(endpoints_.add<transport::Endpoint>(std::make_unique<Endpoint>(args_.rank, peer.rank,
                                                                                  args_.comm_id)));
    }
    return out;
  }

  void abort() override { endpoints_.abort_all(); }

 private:
  transport::ContextArgs args_;
  transport::EndpointList<Endpoint> endpoints_;
};

}  // namespace

std::unique_ptr<transport::Context> make_context(const transport::ContextArgs& args) {
  return std::make_unique<Context>(args);
}

}  // namespace tbcoll::loopback
