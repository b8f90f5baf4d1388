// The rendezvous records (bootstrap/rendezvous.h): the text each rank publishes and reads back, the communicator
// id with its tombstone, and the records' removal once every rank read them.
#include "bootstrap/rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/time.h"
#include "tbcoll/error.hpp"
#include "tbcoll/store.hpp"

namespace tbcoll::bootstrap {
namespace {

Published sample() {
  Published p;
  p.info = {3, "node7/5.15.0/pidns:4026531836/shm:2a:1", 123456789012345};
  p.kernel = "5.15.0-91-generic #101";
  p.cpus = {0, 1, 2, 3, 6};
  p.world_size = 8;
  p.addresses = {{"tcp", "10.0.0.7:40123"}, {"shm", "tbcoll-1234-3"}};
  return p;
}

void expect_same(const Published& got, const Published& want) {
  EXPECT_EQ(got.info.rank, want.info.rank);
  EXPECT_EQ(got.info.host_id, want.info.host_id);
  EXPECT_EQ(got.info.process_id, want.info.process_id);
  EXPECT_EQ(got.kernel, want.kernel);
  EXPECT_EQ(got.cpus, want.cpus);
  EXPECT_EQ(got.world_size, want.world_size);
  EXPECT_EQ(got.addresses, want.addresses);
}

// Ranks of different builds read each other's records: the text is pinned, so changing it is a decision.
TEST(Rendezvous, RecordFormatIsPinned) {
  EXPECT_EQ(encode(sample()),
            "host=node7/5.15.0/pidns:4026531836/shm:2a:1\npid=123456789012345\nkernel=5.15.0-91-generic #101\n"
            "cpus=0-3,6\nworld=8\ndev.shm=tbcoll-1234-3\ndev.tcp=10.0.0.7:40123\n");
}

TEST(Rendezvous, RecordRoundTrips) {
  expect_same(decode(3, encode(sample())), sample());
  // The rank comes from the key, not the text; unknown CPUs and no devices survive too.
  Published sparse = sample();
  sparse.info.rank = 5;
  sparse.cpus.clear();
  sparse.addresses.clear();
  sparse.info.process_id = UINT64_MAX;
  expect_same(decode(5, encode(sparse)), sparse);
}

TEST(Rendezvous, MalformedNumbersGiveIoErrorNamingTheRecord) {
  const std::vector<std::string> junk = {"", "12x", "-1", "+5", " 7", "0x10", "18446744073709551616"};
  for (const std::string field : {"pid", "world"}) {
    for (const std::string& value : junk) {
      const std::string record = "host=h\n" + field + "=" + value + "\nkernel=k\n";
      try {
        decode(6, record);
        ADD_FAILURE() << field << "=" << value << " was accepted";
      } catch (const IoError& error) {
        const std::string what = error.what();
        const std::string named = field == "pid" ? "rendezvous record of rank 6: pid" : "rank 6: world size";
        EXPECT_NE(what.find(named), std::string::npos) << what;
        EXPECT_NE(what.find("\"" + value + "\""), std::string::npos) << what;
      }
    }
  }
  // A world size beyond int reads as -1 (no rank was started with it), not as a wrapped number.
  EXPECT_EQ(decode(0, "world=4294967298\n").world_size, -1);
}

// Found by fuzz/rendezvous.cc: strtoull stops at an embedded NUL, which passed for the end of the string.
TEST(Rendezvous, NumbersWithAnEmbeddedNulAreMalformed) {
  const std::string nul_inside("12\0junk", 7);
  EXPECT_THROW(record_number(nul_inside, "a number"), IoError);
  EXPECT_THROW(record_number(std::string("7\0", 2), "a number"), IoError);
  EXPECT_THROW(decode(1, "pid=" + nul_inside + "\n"), IoError);
  EXPECT_EQ(record_number("0012", "a number"), 12u);
}

TEST(Rendezvous, UnknownKeysAndOtherLinesAreIgnored) {
  const std::string record = "future=1\nno equals sign here\n\nworld2=abc\nhosts=elsewhere\n" + encode(sample()) +
                             "device.tcp=1.2.3.4:5\npidx=junk\n";
  expect_same(decode(3, record), sample());
  // A CPU list that does not parse means "unknown", not an error.
  EXPECT_TRUE(decode(3, "cpus=0-,x\nworld=2\n").cpus.empty());
}

TEST(Rendezvous, IdIsReadAndRecordsAreForgottenOnceEveryRankReadThem) {
  auto store = make_in_memory_store();
  const Deadline deadline = deadline_after(5);
  store->set("p/comm_id", bytes_of("77"), deadline);
  for (int r = 0; r < 3; ++r) store->set("p/peer/" + std::to_string(r), bytes_of(encode(sample())), deadline);
  EXPECT_EQ(read_comm_id(*store, "p", 1, 3, deadline, nullptr), 77u);

  forget_records(*store, "p", 0, 3, deadline);
  forget_records(*store, "p", 1, 3, deadline);
  EXPECT_EQ(text_of(store->get("p/peer/2", deadline)), encode(sample())) << "removed before the last rank read it";
  forget_records(*store, "p", 2, 3, deadline);
  for (const std::string key : {"p/peer/0", "p/peer/1", "p/peer/2", "p/read"}) {
    EXPECT_THROW(store->get(key, deadline_after(0.05)), TimeoutError) << key << " is still there";
  }
  EXPECT_EQ(text_of(store->get("p/comm_id", deadline)), std::string(kFormedTombstone) + "3");

  // A late rank of another world size is told at once; one of this size waits for the next rank 0's id.
  EXPECT_THROW(read_comm_id(*store, "p", 1, 4, deadline, nullptr), InvalidUsage);
  std::thread next_root([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store->set("p/comm_id", bytes_of("78"), deadline);
  });
  EXPECT_EQ(read_comm_id(*store, "p", 1, 3, deadline, nullptr), 78u);
  next_root.join();
}

TEST(Rendezvous, MalformedIdGivesIoError) {
  auto store = make_in_memory_store();
  store->set("q/comm_id", bytes_of("12 monkeys"), deadline_after(5));
  EXPECT_THROW(read_comm_id(*store, "q", 1, 2, deadline_after(5), nullptr), IoError);
  store->set("q/comm_id", bytes_of(std::string(kFormedTombstone) + "two"), deadline_after(5));
  EXPECT_THROW(read_comm_id(*store, "q", 1, 2, deadline_after(5), nullptr), IoError);
}

}  // namespace
}  // namespace tbcoll::bootstrap
