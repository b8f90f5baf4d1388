// Connections with the wrong job token or protocol version, and garbage bytes, are rejected and logged
// while the job carries on unaffected.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "common/auth.h"
#include "common/net.h"
#include "common/time.h"
#include "tbcoll/tbcoll.hpp"
#include "transports/tcp/wire.h"
#include "bootstrap/store_auth.h"
#include "collectives/harness.h"

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

// A 2-rank tcp job (token "right-token") whose rank 0 sits in its accept loop before the real rank 1 starts: a
// placeholder record for rank 1 lets it get there, so connections a test makes meanwhile reach rank 0's data
// port first. finish() starts rank 1 and waits for both; each all-reduces rank + 1 (3 when the job goes on).
struct WaitingJob {
  WaitingJob(const std::string& prefix, std::map<std::string, std::string> knobs) : store(make_in_memory_store()) {
    auto rank_body = [this, prefix, knobs](int rank) {
      try {
        Config config;
        config.rank = rank;
        config.world_size = 2;
        config.store = store;
        config.prefix = prefix;
        config.transport = "tcp";
        config.token = "right-token";
        config.timeout_s = 20;
        config.knobs = knobs;
        Communicator comm = Communicator::init(config);
        float value = static_cast<float>(rank + 1);
        comm.all_reduce(&value, &result[rank], 1, DataType::kFloat32, ReduceOp::kSum);
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
    };
    body = rank_body;
    // The test reads and writes records as a rank does: sealed with the job secret when there is one.
    const auto secret = knobs.find("TBCOLL_SECRET");
    const std::shared_ptr<Store> records =
        secret == knobs.end() ? store : bootstrap::authenticated(store, secret->second, "right-token");
    const std::string placeholder = "host=elsewhere\npid=1\nworld=2\ndev.tcp=127.0.0.1:1\n";
    records->set(prefix + "/peer/1", {placeholder.begin(), placeholder.end()}, deadline_after(5));
    rank0 = std::thread(body, 0);
    const auto text = records->get(prefix + "/peer/0", deadline_after(10));
    const std::string info(text.begin(), text.end());
    const size_t at = info.find("dev.tcp=");
    if (at != std::string::npos) address = info.substr(at + 8, info.find('\n', at) - at - 8);
    const auto id = records->get(prefix + "/comm_id", deadline_after(10));
    comm_id = std::stoull(std::string(id.begin(), id.end()));
  }
  ~WaitingJob() {
    if (rank0.joinable()) finish();
  }
  void finish() {
    std::thread rank1(body, 1);
    rank0.join();
    rank1.join();
  }

  std::shared_ptr<Store> store;
  std::function<void(int)> body;
  std::thread rank0;
  std::string address;  ///< rank 0's data port, host:port ("" if its record had none)
  uint64_t comm_id = 0;
  float result[2] = {0, 0};
  std::string errors[2];
};

TEST(Security, DataPortRejectsBadHandshakesAndTheJobGoesOn) {
  WaitingJob job("security", {});
  const std::string& address = job.address;
  const uint64_t comm_id = job.comm_id;
  ASSERT_NE(address, "");

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
  job.finish();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4)) << "the silent connections were served one by one";
  for (int fd : silent) close(fd);
  EXPECT_EQ(job.errors[0], "");
  EXPECT_EQ(job.errors[1], "");
  EXPECT_EQ(job.result[0], 3.0f);
  EXPECT_EQ(job.result[1], 3.0f);
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

  // Request headers announcing 16 MiB values with no value behind them: the server must not allocate (and zero)
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


// ---- the job secret (TBCOLL_SECRET): HMAC-SHA256 challenge-response on every connection ----------------------------

#define SKIP_WITHOUT_LIBCRYPTO()                                                    \
  do {                                                                              \
    std::string why;                                                                \
    if (!auth::available(&why)) GTEST_SKIP() << "no libcrypto: " << why;             \
  } while (0)

TEST(Secret, HmacSha256MatchesRfc4231AndProofsDependOnEverything) {
  SKIP_WITHOUT_LIBCRYPTO();
  const std::string data = "what do ya want for nothing?";
  const auth::Proof mac = auth::hmac_sha256("Jefe", data.data(), data.size());
  std::string hex;
  char pair[3];
  for (uint8_t byte : mac) {
    std::snprintf(pair, sizeof(pair), "%02x", byte);
    hex += pair;
  }
  EXPECT_EQ(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");  // RFC 4231, case 2
  const auth::Nonce a = auth::nonce(), b = auth::nonce();
  EXPECT_NE(a, b) << "nonces from the random source";
  const auth::Proof p = auth::proof("secret", "label", a, b, "ctx");
  EXPECT_TRUE(auth::same(p, auth::proof("secret", "label", a, b, "ctx")));
  EXPECT_FALSE(auth::same(p, auth::proof("secreT", "label", a, b, "ctx")));
  EXPECT_FALSE(auth::same(p, auth::proof("secret", "other", a, b, "ctx")));
  EXPECT_FALSE(auth::same(p, auth::proof("secret", "label", b, a, "ctx")));
  EXPECT_FALSE(auth::same(p, auth::proof("secret", "label", a, b, "ctX")));
}

TEST(Secret, SettingBothOrAnEmptyFileIsRefused) {
  EXPECT_EQ(auth::job_secret(env::Settings(std::map<std::string, std::string>{})), "");
  EXPECT_NE(test::error_of([] {
              auth::job_secret(env::Settings(std::map<std::string, std::string>{{"TBCOLL_SECRET", "a"}, {"TBCOLL_SECRET_FILE", "/etc/hostname"}}));
            }).find("both"), std::string::npos);
  EXPECT_NE(test::error_of([] { auth::job_secret(env::Settings(std::map<std::string, std::string>{{"TBCOLL_SECRET_FILE", "/nonexistent/x"}})); })
                .find("cannot read"), std::string::npos);
  SKIP_WITHOUT_LIBCRYPTO();
  char path[] = "/tmp/tbcoll-secret-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "from-a-file\n", 12), 12);
  close(fd);
  EXPECT_EQ(auth::job_secret(env::Settings(std::map<std::string, std::string>{{"TBCOLL_SECRET_FILE", path}})), "from-a-file");
  unlink(path);
}

// With a secret, the store serves nobody who cannot prove it: not a client with the right token and no secret
// or the wrong one, not a wrong version, not garbage; each is rejected and counted (and logged) while proven
// clients are served.
TEST(Secret, StoreServesOnlyClientsThatProveTheSecret) {
  SKIP_WITHOUT_LIBCRYPTO();
  namespace sp = store_protocol;
  const std::string secret = "0123456789abcdef-job-secret";
  TcpStoreServer server("127.0.0.1", 0, "store-token", deadline_after(5), secret);
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  auto store = connect_tcp_store(address, "store-token", deadline_after(5), secret);
  store->set("key", {'v', 'a', 'l', 'u', 'e'}, deadline_after(5));
  uint64_t rejected = server.rejected_connections();

  // The token but no secret: the hello and a get right behind it (not waiting for the welcome).
  sp::Hello hello{sp::kMagic, sp::kVersion, 0, 11};
  std::string bytes(reinterpret_cast<const char*>(&hello), sizeof(hello));
  bytes += "store-token";
  sp::RequestHeader get{static_cast<uint32_t>(sp::Op::kGet), 3, 0, 0};
  bytes.append(reinterpret_cast<const char*>(&get), sizeof(get));
  bytes += "key";
  std::string reply = poke(address, bytes);
  ASSERT_EQ(reply.size(), sizeof(sp::Welcome)) << "a rejection and nothing else";
  sp::Welcome welcome{};
  std::memcpy(&welcome, reply.data(), sizeof(welcome));
  EXPECT_EQ(welcome.status, static_cast<uint32_t>(sp::Status::kNeedSecret));
  EXPECT_EQ(reply.find("value"), std::string::npos);
  EXPECT_EQ(server.rejected_connections(), ++rejected);

  // The token, a nonce and a made-up proof, with a get behind it: the store's challenge, then a rejection.
  hello.flags = sp::kFlagSecret;
  bytes.assign(reinterpret_cast<const char*>(&hello), sizeof(hello));
  bytes += "store-token" + std::string(auth::kNonceBytes, 'n') + std::string(auth::kProofBytes, 'p');
  bytes.append(reinterpret_cast<const char*>(&get), sizeof(get));
  bytes += "key";
  reply = poke(address, bytes);
  ASSERT_EQ(reply.size(), 2 * sizeof(sp::Welcome) + auth::kNonceBytes + auth::kProofBytes) << "challenge, verdict";
  std::memcpy(&welcome, reply.data() + reply.size() - sizeof(welcome), sizeof(welcome));
  EXPECT_EQ(welcome.status, static_cast<uint32_t>(sp::Status::kBadSecret));
  EXPECT_EQ(reply.find("value"), std::string::npos);
  EXPECT_EQ(server.rejected_connections(), ++rejected);

  // Clients of the library: no secret, the wrong secret, the wrong token with the right secret.
  EXPECT_NE(test::error_of([&] { connect_tcp_store(address, "store-token", deadline_after(5), ""); })
                .find("requires the job secret"), std::string::npos);
  EXPECT_NE(test::error_of([&] { connect_tcp_store(address, "store-token", deadline_after(5), "guess"); })
                .find("could not prove"), std::string::npos) << "a store that does not know our secret is not ours";
  EXPECT_NE(test::error_of([&] { connect_tcp_store(address, "other-token", deadline_after(5), secret); })
                .find("wrong job token"), std::string::npos);
  rejected += 2;  // the client that found the store wrong hung up itself: the store saw it go, nothing to reject
  // Wrong version, garbage.
  sp::Hello old{sp::kMagic, static_cast<uint16_t>(sp::kVersion - 1), sp::kFlagSecret, 11};
  poke(address, std::string(reinterpret_cast<const char*>(&old), sizeof(old)) + "store-token");
  poke(address, std::string(200, '\x5a'));
  rejected += 2;
  EXPECT_EQ(server.rejected_connections(), rejected);
  // A store without a secret refuses a client that has one (TBCOLL_SECRET set on some ranks only).
  TcpStoreServer plain("127.0.0.1", 0, "store-token", deadline_after(5), "");
  EXPECT_NE(test::error_of([&] {
              connect_tcp_store("127.0.0.1:" + std::to_string(plain.port()), "store-token", deadline_after(5), secret);
            }).find("the store has none"), std::string::npos);
  // The proven client is still served.
  EXPECT_EQ(store->get("key", deadline_after(5)), (std::vector<uint8_t>{'v', 'a', 'l', 'u', 'e'}));
  auto second = connect_tcp_store(address, "store-token", deadline_after(5), secret);
  EXPECT_EQ(second->add("counter", 2, deadline_after(5)), 2);
}

// The tcp transport's handshake with a secret: impostors (no secret, a made-up proof, the wrong token or version,
// garbage) are rejected while the job runs on and gets the right result.
TEST(Secret, DataPortRejectsImpostorsAndTheJobGoesOn) {
  SKIP_WITHOUT_LIBCRYPTO();
  const std::string secret = "data-port-secret-0123456789";
  WaitingJob job("secret", {{"TBCOLL_SECRET", secret}});
  const std::string& address = job.address;
  const uint64_t comm_id = job.comm_id;
  ASSERT_NE(address, "");
  auto hello = [&](uint16_t version, const std::string& token, uint32_t flags) {
    tcp::Hello h{tcp::kHelloMagic, version, static_cast<uint16_t>(token.size()), 1, 0, comm_id, flags, 0};
    return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + token;
  };
  const std::string nonce(auth::kNonceBytes, 'n'), proof(auth::kProofBytes, 'p');
  EXPECT_EQ(welcome_status(poke(address, hello(tcp::kProtocolVersion, "right-token", 0))),
            static_cast<uint32_t>(tcp::WelcomeStatus::kNeedSecret));
  std::string reply = poke(address, hello(tcp::kProtocolVersion, "right-token", tcp::kFlagSecret) + nonce + proof);
  ASSERT_EQ(reply.size(), 2 * sizeof(tcp::Welcome) + auth::kNonceBytes + auth::kProofBytes) << "challenge, verdict";
  EXPECT_EQ(welcome_status(reply.substr(reply.size() - sizeof(tcp::Welcome))),
            static_cast<uint32_t>(tcp::WelcomeStatus::kBadSecret));
  EXPECT_EQ(welcome_status(poke(address, hello(tcp::kProtocolVersion + 1, "right-token", tcp::kFlagSecret) + nonce)),
            static_cast<uint32_t>(tcp::WelcomeStatus::kBadVersion));
  EXPECT_EQ(poke(address, std::string(300, 'x')), "") << "garbage gets no answer";
  // One that knows the secret but not the token: through the challenge, then refused for the token.
  {
    int fd = net::connect_tcp(net::parse_host_port(address, "test"), deadline_after(5), "test");
    const auth::Nonce mine = auth::nonce();
    tcp::Hello h{tcp::kHelloMagic, tcp::kProtocolVersion, 11, 1, 0, comm_id, tcp::kFlagSecret, 0};
    std::string out = std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + "wrong-token";
    out.append(reinterpret_cast<const char*>(mine.data()), mine.size());
    net::write_all(fd, out.data(), out.size(), deadline_after(5), "test");
    tcp::Welcome welcome{};
    auth::Nonce theirs{};
    auth::Proof their_proof{};
    net::read_exact(fd, &welcome, sizeof(welcome), deadline_after(5), "test");
    net::read_exact(fd, theirs.data(), theirs.size(), deadline_after(5), "test");
    net::read_exact(fd, their_proof.data(), their_proof.size(), deadline_after(5), "test");
    const std::string context = tcp::proof_context("wrong-token", h);
    EXPECT_TRUE(auth::same(their_proof, auth::proof(secret, tcp::kResponderLabel, mine, theirs, context)));
    const auth::Proof ours = auth::proof(secret, tcp::kInitiatorLabel, theirs, mine, context);
    net::write_all(fd, ours.data(), ours.size(), deadline_after(5), "test");
    net::read_exact(fd, &welcome, sizeof(welcome), deadline_after(5), "test");
    EXPECT_EQ(welcome.status, static_cast<uint32_t>(tcp::WelcomeStatus::kBadToken));
    close(fd);
  }
  job.finish();
  EXPECT_EQ(job.errors[0], "");
  EXPECT_EQ(job.errors[1], "");
  EXPECT_EQ(job.result[0], 3.0f);
  EXPECT_EQ(job.result[1], 3.0f);
}

// Every transport runs with a secret; ranks whose secrets differ do not connect (init fails, naming the secret).
TEST(Secret, JobsRunWithASecretAndRanksWithAnotherOneAreRefused) {
  SKIP_WITHOUT_LIBCRYPTO();
  for (const std::string& transport : test::test_transports()) {
    test::RankOptions options{transport, "", 20};
    options.knobs = {{"TBCOLL_SECRET", "same-secret-for-every-rank"}};
    test::run_ranks(3, options, [&](Communicator& comm) {
      std::vector<float> buf(1000, 1.0f);
      comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      EXPECT_EQ(buf[999], 3.0f) << transport;
    });
  }
  // Over TCP (the side channel of ibverbs too, where built): rank 1 has another secret.
  for (const std::string& transport : {std::string("tcp"), std::string("fakeverbs")}) {
    if (std::count(test::test_transports().begin(), test::test_transports().end(), transport) == 0) continue;
    const std::vector<std::string> errors = test::init_errors(2, [&](int rank) {
      Config config;
      config.rank = rank;
      config.world_size = 2;
      config.transport = transport;
      config.timeout_s = 1.5;  // the accepting rank waits for a proper peer until then
      config.knobs = {{"TBCOLL_SECRET", rank == 0 ? "secret-of-rank-zero" : "secret-of-rank-one!"}};
      return config;
    });
    EXPECT_TRUE(errors[0].find("secret") != std::string::npos || errors[1].find("secret") != std::string::npos)
        << transport << ": " << errors[0] << " | " << errors[1];
    EXPECT_NE(errors[0], "");
    EXPECT_NE(errors[1], "");
  }
}

}  // namespace
}  // namespace tbcoll
