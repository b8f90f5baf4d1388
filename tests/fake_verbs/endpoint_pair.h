// Two ranks' ibverbs endpoints over the fake fabric, connected (through a second thread) and then driven by the
// calling thread: how the transport's own tests and its benchmark put messages through it without communicators.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <string>

#include "common/time.h"
#include "fake_verbs/fake_verbs.h"
#include "tbcoll/transport.hpp"
#include "transports/ibverbs/device.h"
#include "transports/ibverbs/endpoint.h"

namespace tbcoll::ibverbs::fake {

struct EndpointPair {
  std::shared_ptr<transport::Device> device;
  std::unique_ptr<transport::Context> contexts[2];
  std::unique_ptr<transport::Endpoint> endpoints[2];
  Endpoint& ib(int rank) { return dynamic_cast<Endpoint&>(*endpoints[rank]); }
};

/// Ranks 0 and 1 on the fabric as it is (reset() it first), with `knobs` for both and `rank1_knobs` on top for
/// rank 1; through `api` when given (the fake's table with another provider name, say), else the fake's.
inline std::unique_ptr<EndpointPair> connect_endpoint_pair(const std::map<std::string, std::string>& knobs = {},
                                                           const std::map<std::string, std::string>& rank1_knobs = {},
                                                           const VerbsApi* api = nullptr) {
  auto pair = std::make_unique<EndpointPair>();
  pair->device = make_device(api != nullptr ? api : verbs(), "pair", /*same_process_only=*/true);
  for (int r = 0; r < 2; ++r) {
    transport::ContextArgs args{r, 2, "pair", "127.0.0.1", 1, 10};
    args.self = {r, "pair-host", 1, r};
    args.knobs = knobs;
    if (r == 1) {
      for (const auto& [name, value] : rank1_knobs) args.knobs[name] = value;
    }
    pair->contexts[r] = pair->device->create_context(args);
  }
  const transport::PeerAddress to0{0, pair->contexts[0]->address()}, to1{1, pair->contexts[1]->address()};
  const Deadline deadline = deadline_after(10);
  auto other = std::async(std::launch::async, [&] { return pair->contexts[1]->connect({to0}, deadline); });
  auto mine = pair->contexts[0]->connect({to1}, deadline);
  pair->endpoints[0] = std::move(mine.at(0));
  pair->endpoints[1] = std::move(other.get().at(0));
  return pair;
}

}  // namespace tbcoll::ibverbs::fake
