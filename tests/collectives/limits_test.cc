// The transport contract's message limit: a transport whose endpoints take at most max_message_bytes per
// message (Capabilities) still carries every collective and send/recv of any size, because the executor splits
// larger transfers. The transport here is loopback behind a wrapper that refuses anything larger.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include <fmt/format.h>

#include "collectives/checks.h"
#include "collectives/harness.h"
#include "collectives/wrapped_device.h"
#include "common/time.h"
#include "tbcoll/transport.hpp"

namespace tbcoll::test {
namespace {

constexpr size_t kLimit = 1000;  // not a multiple of any element size: pieces split elements
std::atomic<size_t> largest_message{0};
std::atomic<size_t> messages{0};

class LimitedEndpoint final : public transport::Endpoint {
 public:
  explicit LimitedEndpoint(std::unique_ptr<transport::Endpoint> inner) : inner_(std::move(inner)) {}
  std::unique_ptr<transport::Request> isend(const void* buf, size_t bytes, transport::Tag tag) override {
    check(bytes);
    return inner_->isend(buf, bytes, tag);
  }
  std::unique_ptr<transport::Request> irecv(void* buf, size_t bytes, transport::Tag tag) override {
    check(bytes);
    return inner_->irecv(buf, bytes, tag);
  }
  int peer() const override { return inner_->peer(); }

 private:
  static void check(size_t bytes) {
    if (bytes > kLimit) throw InvalidArgument(fmt::format("[limited] message of {} B over the {} B limit", bytes, kLimit));
    messages++;
    size_t seen = largest_message.load();
    while (bytes > seen && !largest_message.compare_exchange_weak(seen, bytes)) {
    }
  }
  std::unique_ptr<transport::Endpoint> inner_;
};

class LimitedContext final : public WrappedContext {
 public:
  using WrappedContext::WrappedContext;

 private:
  std::unique_ptr<transport::Endpoint> wrap_endpoint(std::unique_ptr<transport::Endpoint> endpoint) override {
    return std::make_unique<LimitedEndpoint>(std::move(endpoint));
  }
};

class LimitedDevice final : public WrappedDevice {
 public:
  explicit LimitedDevice(std::shared_ptr<transport::Device> inner) : WrappedDevice("limited", std::move(inner)) {}
  transport::Capabilities capabilities() const override {
    transport::Capabilities caps = inner_->capabilities();
    caps.max_message_bytes = kLimit;
    return caps;
  }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return std::make_unique<LimitedContext>(inner_->create_context(args));
  }
};

void register_limited() { register_wrapped<LimitedDevice>(); }

TEST(MessageLimit, CollectivesLargerThanTheLimitArriveIntact) {
  register_limited();
  largest_message = 0;
  messages = 0;
  for (const char* algo : {"direct", "ring", "broadcast:chain", "broadcast:binomial"}) {
    run_ranks(3, {"limited", algo}, [&](Communicator& comm) {
      ASSERT_EQ(comm.transport_name((comm.rank() + 1) % 3), "limited");
      for (size_t count : {size_t{1}, size_t{249}, size_t{251}, size_t{5000}, size_t{(1 << 16) + 3}}) {
        check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 1);
        check_all_gather(comm, DataType::kFloat64, count);
        check_broadcast(comm, DataType::kUint8, count * 3, 1);
        check_reduce_scatter(comm, DataType::kInt32, ReduceOp::kMax, count, 2);
        check_reduce(comm, DataType::kFloat16, ReduceOp::kSum, count, 2);
        check_send_recv(comm, count);
      }
    });
  }
  EXPECT_EQ(largest_message.load(), kLimit) << "messages were split to the limit, not below it";
  EXPECT_GT(messages.load(), 1000u);
}

TEST(MessageLimit, GroupedSendsLargerThanTheLimitArriveIntact) {
  register_limited();
  run_ranks(2, {"limited", ""}, [&](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<uint8_t> out = make_input(DataType::kUint8, comm.rank(), 12345, 4), in(12345);
    comm.group_start();
    comm.send(out.data(), out.size(), DataType::kUint8, peer);
    comm.recv(in.data(), in.size(), DataType::kUint8, peer);
    comm.group_end();
    EXPECT_EQ(in, make_input(DataType::kUint8, peer, 12345, 4));
  });
}

TEST(MessageLimit, TheWrapperReallyRefusesLargerMessages) {
  // Without this, the tests above could pass with a limit nothing enforces.
  register_limited();
  for (const auto& device : transport::available_devices()) {
    if (device->name() != "limited") continue;
    auto context = device->create_context({0, 2, "t", "127.0.0.1", 77, 5});
    auto peer = device->create_context({1, 2, "t", "127.0.0.1", 77, 5});
    auto endpoints = context->connect({{1, peer->address()}}, deadline_after(5));
    std::vector<uint8_t> data(kLimit + 1);
    EXPECT_THROW(endpoints.at(0)->isend(data.data(), data.size(), {1, 1}), InvalidArgument);
    return;
  }
  FAIL() << "the limited transport is not registered";
}

}  // namespace
}  // namespace tbcoll::test
