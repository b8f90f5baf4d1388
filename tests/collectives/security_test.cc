// Connections with the wrong job token or protocol version, and garbage bytes, are rejected and logged
// while the job carries on unaffected.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "common/net.h"
#include "common/time.h"
#include "tbcoll/tbcoll.hpp"
#include "transports/tcp/wire.h"

namespace tbcoll {
namespace {

// Sends bytes to host:port and returns what came back before the other side closed (or 1 s passed).
std::string poke(const std::string& address, const std::string& bytes) {
  int fd = net::connect_tcp(net::parse_host_port(address, "test"), deadline_after(5), "test");
  net::write_all(fd, bytes.data(), bytes.size(), deadline_after(5), "test");
  std::string reply;
  char buf[256];
  auto deadline = deadline_after(1);
  while (Clock::now() < deadline) {
    ssize_t got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (got > 0) reply.append(buf, static_cast<size_t>(got));
    else if (got == 0) break;
    else std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  close(fd);
  return reply;
}

std::string hello_bytes(uint16_t version, const std::string& token, int from, int to, uint64_t comm_id) {
  tcp::Hello hello{tcp::kHelloMagic, version, static_cast<uint16_t>(token.size()), from, to, comm_id};
  std::string out(reinterpret_cast<const char*>(&hello), sizeof(hello));
  return out + token;
}

uint32_t welcome_status(const std::string& reply) {
  if (reply.size() < sizeof(tcp::Welcome)) return 999;
  tcp::Welcome welcome;
  std::memcpy(&welcome, reply.data(), sizeof(welcome));
  return welcome.status;
}

TEST(Security, DataPortRejectsBadHandshakesAndTheJobGoesOn) {
  auto store = make_in_memory_store();
  auto make_config = [&](int rank) {
    Config config;
    config.rank = rank;
    config.world_size = 2;
    config.store = store;
    config.prefix = "security";
    config.transport = "tcp";
    config.token = "right-token";
    config.timeout_s = 20;
    return config;
  };
  float result[2] = {0, 0};
  std::string errors[2];
  auto rank_body = [&](int rank) {
    try {
      Communicator comm = Communicator::init(make_config(rank));
      float value = static_cast<float>(rank + 1);
      comm.all_reduce(&value, &result[rank], 1, DataType::kFloat32, ReduceOp::kSum);
    } catch (const std::exception& error) {
      errors[rank] = error.what();
    }
  };
  // Rank 0 accepts rank 1's connection. A placeholder record for rank 1 lets rank 0 reach its accept loop
  // before the real rank 1 starts, so the rogue connections below get there first.
  std::string placeholder = "host=elsewhere\npid=1\nworld=2\ndev.tcp=127.0.0.1:1\n";
  store->set("security/peer/1", {placeholder.begin(), placeholder.end()}, deadline_after(5));
  std::thread rank0(rank_body, 0);
  auto text = store->get("security/peer/0", deadline_after(10));
  std::string info(text.begin(), text.end());
  size_t at = info.find("dev.tcp=");
  ASSERT_NE(at, std::string::npos) << info;
  std::string address = info.substr(at + 8, info.find('\n', at) - at - 8);
  auto comm_id_bytes = store->get("security/comm_id", deadline_after(10));
  uint64_t comm_id = std::stoull(std::string(comm_id_bytes.begin(), comm_id_bytes.end()));

  EXPECT_EQ(poke(address, std::string(200, 'x')), "") << "garbage gets no answer";
  EXPECT_EQ(welcome_status(poke(address, hello_bytes(tcp::kProtocolVersion, "wrong-token", 1, 0, comm_id))),
            static_cast<uint32_t>(tcp::WelcomeStatus::kBadToken));
  EXPECT_EQ(welcome_status(poke(address, hello_bytes(tcp::kProtocolVersion + 1, "right-token", 1, 0, comm_id))),
            static_cast<uint32_t>(tcp::WelcomeStatus::kBadVersion));
  EXPECT_EQ(welcome_status(poke(address, hello_bytes(tcp::kProtocolVersion, "right-token", 5, 0, comm_id))),
            static_cast<uint32_t>(tcp::WelcomeStatus::kBadRank));
  EXPECT_EQ(welcome_status(poke(address, hello_bytes(tcp::kProtocolVersion, "right-token", 1, 0, comm_id + 1))),
            static_cast<uint32_t>(tcp::WelcomeStatus::kBadComm));
  EXPECT_EQ(poke(address, hello_bytes(tcp::kProtocolVersion, "right-token", 1, 0, comm_id).substr(0, 10)), "")
      << "a truncated handshake is dropped";

  // Connections that never say anything do not hold up the real peer behind them (each handshake has 5 s).
  std::vector<int> silent;
  for (int i = 0; i < 3; ++i) {
    silent.push_back(net::connect_tcp(net::parse_host_port(address, "test"), deadline_after(5), "test"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted, waiting for their hellos
  auto start = Clock::now();
  std::thread rank1(rank_body, 1);
  rank0.join();
  rank1.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4)) << "the silent connections were served one by one";
  for (int fd : silent) close(fd);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(result[0], 3.0f);
  EXPECT_EQ(result[1], 3.0f);
}

TEST(Security, StoreRejectsWrongTokenAndGarbage) {
  TcpStoreServer server("127.0.0.1", 0, "store-token");
  std::string address = "127.0.0.1:" + std::to_string(server.port());
  EXPECT_THROW(connect_tcp_store(address, "other-token", deadline_after(5)), InvalidUsage);
  EXPECT_EQ(poke(address, std::string(64, '\xff')).size(), sizeof(store_protocol::Welcome)) << "bad magic answered";
  // A valid hello followed by a malformed request: the server drops that client only.
  store_protocol::Hello hello{store_protocol::kMagic, store_protocol::kVersion, 0, 11};
  std::string bytes(reinterpret_cast<const char*>(&hello), sizeof(hello));
  bytes += "store-token";
  store_protocol::RequestHeader bad{77, 1u << 30, 0, 0};
  bytes.append(reinterpret_cast<const char*>(&bad), sizeof(bad));
  poke(address, bytes);
  EXPECT_GE(server.rejected_connections(), 3u);

  auto store = connect_tcp_store(address, "store-token", deadline_after(5));
  store->set("key", {1, 2, 3}, deadline_after(5));
  EXPECT_EQ(store->get("key", deadline_after(5)), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(store->add("counter", 5, deadline_after(5)), 5);
  EXPECT_EQ(store->add("counter", -2, deadline_after(5)), 3);
}

// Resident memory of this process, in bytes.
size_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%lu %lu", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// A client that knows the token (the default one is no secret) must still not be able to crash, bloat or
// confuse rank 0's store.
TEST(Security, StoreSurvivesAbusiveClients) {
  TcpStoreServer server("127.0.0.1", 0, "store-token");
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  auto store = connect_tcp_store(address, "store-token", deadline_after(5));

  // A counter past 2^63 - 1 (signed overflow: undefined behaviour, which killed a sanitized rank 0).
  EXPECT_EQ(store->add("counter", INT64_MAX, deadline_after(5)), INT64_MAX);
  try {
    store->add("counter", 1, deadline_after(5));
    ADD_FAILURE() << "the counter wrapped";
  } catch (const RemoteError& error) {
    EXPECT_NE(std::string(error.what()).find("overflow"), std::string::npos) << error.what();
  }
  EXPECT_EQ(store->add("counter", -1, deadline_after(5)), INT64_MAX - 1);
  auto memory = make_in_memory_store();
  memory->add("counter", INT64_MIN, deadline_after(5));
  EXPECT_THROW(memory->add("counter", -1, deadline_after(5)), InvalidArgument);

  // Request headers announcing 16 MiB values with no value behind them: the server used to allocate (and zero)
  // each value on the header alone.
  const size_t before = resident_bytes();
  std::vector<int> clients;
  for (int i = 0; i < 16; ++i) {
    store_protocol::Hello hello{store_protocol::kMagic, store_protocol::kVersion, 0, 11};
    std::string bytes(reinterpret_cast<const char*>(&hello), sizeof(hello));
    bytes += "store-token";
    store_protocol::RequestHeader header{static_cast<uint32_t>(store_protocol::Op::kSet), 4,
                                         store_protocol::kMaxValueBytes, 0};
    bytes.append(reinterpret_cast<const char*>(&header), sizeof(header));
    bytes += "big" + std::to_string(i % 10);
    const int fd = net::connect_tcp(net::parse_host_port(address, "test"), deadline_after(5), "test");
    net::write_all(fd, bytes.data(), bytes.size(), deadline_after(5), "test");
    clients.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(resident_bytes(), before + (size_t{64} << 20)) << "the server sized values from their headers";
  for (int fd : clients) close(fd);
  store->set("key", {1}, deadline_after(5));
  EXPECT_EQ(store->get("key", deadline_after(5)), std::vector<uint8_t>{1});

  // A rejected client is told why and disconnected at once, not 10 s later; counted once.
  const uint64_t rejected = server.rejected_connections();
  store_protocol::Hello hello{store_protocol::kMagic, store_protocol::kVersion, 0, 5};
  std::string wrong(reinterpret_cast<const char*>(&hello), sizeof(hello));
  const auto start = Clock::now();
  EXPECT_EQ(poke(address, wrong + "wrong").size(), sizeof(store_protocol::Welcome));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(900)) << "the connection stayed open";
  EXPECT_EQ(server.rejected_connections(), rejected + 1);
}

// Records in the store that no rank wrote (another program, a stale job) are reported, not thrown as
// std::invalid_argument out of init.
TEST(Security, MalformedRendezvousRecordsAreReported) {
  auto store = make_in_memory_store();
  Config config;
  config.rank = 1;
  config.world_size = 2;
  config.store = store;
  config.timeout_s = 5;
  config.prefix = "bad-id";
  store->set("bad-id/comm_id", {'z', 'z', 'z'}, deadline_after(5));
  try {
    Communicator::init(config);
    ADD_FAILURE() << "init accepted a malformed communicator id";
  } catch (const IoError& error) {
    EXPECT_NE(std::string(error.what()).find("communicator id"), std::string::npos) << error.what();
  }
  config.prefix = "bad-world";
  store->set("bad-world/comm_id", {'1', '2'}, deadline_after(5));
  const std::string record = "host=x\npid=1\nworld=2abc\n";
  store->set("bad-world/peer/0", {record.begin(), record.end()}, deadline_after(5));
  try {
    Communicator::init(config);
    ADD_FAILURE() << "init accepted a malformed world size";
  } catch (const IoError& error) {
    EXPECT_NE(std::string(error.what()).find("world size is malformed"), std::string::npos) << error.what();
  }
}

TEST(Security, WrongTokenBetweenRanksFailsInit) {
  TcpStoreServer server("127.0.0.1", 0, "job-a");
  std::string root = "127.0.0.1:" + std::to_string(server.port());
  Config config;
  config.rank = 1;
  config.world_size = 2;
  config.root = root;
  config.token = "job-b";
  config.timeout_s = 5;
  try {
    Communicator::init(config);
    ADD_FAILURE() << "joined a job with the wrong token";
  } catch (const InvalidUsage& error) {
    EXPECT_NE(std::string(error.what()).find("job token"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tbcoll
