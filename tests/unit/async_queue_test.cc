// The progress queue behind the asynchronous calls: every call runs once, in the order queued, never two at once,
// whoever runs it (the progress thread, or a thread waiting for it that found it next in line and not started);
// errors reach every wait; destruction waits for queued and inline calls.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "async.h"

namespace tbcoll {
namespace {

struct Recorder {
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::vector<int> order;  // written by whichever thread runs a call; calls never overlap (checked)
  std::atomic<int> inline_runs{0};

  std::function<void()> call(int index, std::thread::id waiter) {
    return [this, index, waiter] {
      if (running.fetch_add(1) != 0) overlapped = true;
      order.push_back(index);
      if (std::this_thread::get_id() == waiter) ++inline_runs;
      running.fetch_sub(1);
    };
  }
};

TEST(AsyncQueue, SubmitThenWaitRunsEveryCallOnceInOrderAndOftenOnTheWaitingThread) {
  Recorder recorder;
  {
    AsyncQueue queue;
    const auto me = std::this_thread::get_id();
    for (int i = 0; i < 2000; ++i) queue.submit(recorder.call(i, me)).wait();
  }
  ASSERT_EQ(recorder.order.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(recorder.order[i], i);
  EXPECT_FALSE(recorder.overlapped.load());
  // The caller waits right after queuing, long before a blocked progress thread wakes: most waits run the call
  // themselves (all but a handful here); none would if waits only blocked.
  EXPECT_GT(recorder.inline_runs.load(), 0) << "no wait ran its call inline";
  std::printf("[ info ] %d of 2000 calls ran on the waiting thread\n", recorder.inline_runs.load());
}

TEST(AsyncQueue, WaitsInAnyOrderFromSeveralThreadsNeverRunCallsOutOfOrderOrTogether) {
  Recorder recorder;
  {
    AsyncQueue queue;
    for (int round = 0; round < 200; ++round) {
      std::vector<Work> works;
      for (int i = 0; i < 8; ++i) works.push_back(queue.submit(recorder.call(round * 8 + i, std::thread::id())));
      // The last first (it is not next in line: it must not jump the queue), the others from two threads.
      works.back().wait();
      std::thread a([&] {
        for (int i = 0; i < 8; i += 2) works[i].wait();
      });
      std::thread b([&] {
        for (int i = 7; i >= 1; i -= 2) works[i].wait();
      });
      a.join();
      b.join();
    }
  }
  ASSERT_EQ(recorder.order.size(), 1600u);
  for (int i = 0; i < 1600; ++i) ASSERT_EQ(recorder.order[i], i);
  EXPECT_FALSE(recorder.overlapped.load());
}

TEST(AsyncQueue, AFailedCallThrowsFromEveryWaitAndTest) {
  AsyncQueue queue;
  Work failed = queue.submit([] { throw std::runtime_error("call 1 failed"); });
  Work copy = failed;
  EXPECT_THROW(failed.wait(), std::runtime_error);
  EXPECT_THROW(copy.wait(), std::runtime_error);
  EXPECT_THROW(copy.test(), std::runtime_error);
  Work next = queue.submit([] {});
  next.wait();
  EXPECT_TRUE(next.test());
}

TEST(AsyncQueue, DestructionWaitsForQueuedCallsAndAWorkOutlivesItsQueue) {
  std::atomic<int> ran{0};
  Work last;
  {
    AsyncQueue queue;
    for (int i = 0; i < 50; ++i)
      last = queue.submit([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ++ran;
      });
  }
  EXPECT_EQ(ran.load(), 50);
  EXPECT_TRUE(last.test());
  last.wait();  // the queue is gone: nothing to run inline, the call is done
}

TEST(AsyncQueue, DestructionWaitsForACallRunningInlineOnAnotherThread) {
  std::atomic<bool> started{false}, finished{false};
  std::thread waiter;
  {
    AsyncQueue queue;
    // Keep the progress thread busy so the second call is left for the waiter... or the progress thread: either
    // way the queue's destruction must not return before it finished.
    Work first = queue.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
    Work second = queue.submit([&] {
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      finished = true;
    });
    first.wait();
    waiter = std::thread([second] { second.wait(); });
    while (!started) std::this_thread::yield();
  }
  EXPECT_TRUE(finished.load());
  waiter.join();
}

}  // namespace
}  // namespace tbcoll
