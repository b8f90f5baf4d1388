// Stores, schedules' partition maths and signatures.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "algorithms/chunking.h"
#include "common/cpu.h"
#include "common/env.h"
#include "common/net.h"
#include "common/time.h"
#include "communicator.h"
#include "platform/platform.h"
#include "signature.h"
#include "tbcoll/tbcoll.hpp"

// This binary's getaddrinfo: the name "slow-lookup.invalid" takes 2 s to fail, like a lookup through an
// unreachable DNS server, and "unknown-host.invalid" fails at once (no network needed); every other call goes
// to the C library's (or a sanitizer's) getaddrinfo.
extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** found) {
  using Real = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "getaddrinfo"));
  if (node != nullptr && std::strcmp(node, "slow-lookup.invalid") == 0 &&
      (hints == nullptr || (hints->ai_flags & AI_NUMERICHOST) == 0)) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return EAI_NONAME;
  }
  if (node != nullptr && std::strcmp(node, "unknown-host.invalid") == 0) return EAI_NONAME;
  return real(node, service, hints, found);
}

namespace tbcoll {
namespace {

// second is another client of the same store (a TCP client serialises its calls, so a waiting get
// must be answered by a set from elsewhere).
void exercise_store(Store& store, Store& second) {
  store.set("a", {1, 2}, deadline_after(5));
  EXPECT_EQ(store.get("a", deadline_after(5)), (std::vector<uint8_t>{1, 2}));
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    second.set("late", {9}, deadline_after(5));
  });
  EXPECT_EQ(store.get("late", deadline_after(5)), (std::vector<uint8_t>{9})) << "get waits for the set";
  later.join();
  EXPECT_EQ(store.add("n", 2, deadline_after(5)), 2);
  EXPECT_EQ(store.add("n", 3, deadline_after(5)), 5);
  auto start = Clock::now();
  EXPECT_THROW(store.get("never", deadline_after(0.2)), TimeoutError);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  // The timed-out get must not leave its answer in the way of later calls (the server answers parked gets
  // when the key arrives: a client reusing the connection would read that as the reply to its next call).
  second.set("never", {7}, deadline_after(5));
  EXPECT_EQ(store.get("a", deadline_after(5)), (std::vector<uint8_t>{1, 2}));
  EXPECT_EQ(store.add("n", 1, deadline_after(5)), 6);
  EXPECT_EQ(store.get("never", deadline_after(5)), (std::vector<uint8_t>{7}));
}

TEST(Store, InMemory) {
  auto store = make_in_memory_store();
  exercise_store(*store, *store);
}

TEST(Store, Tcp) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  std::string address = "127.0.0.1:" + std::to_string(server.port());
  auto store = connect_tcp_store(address, "t", deadline_after(5));
  auto second = connect_tcp_store(address, "t", deadline_after(5));
  exercise_store(*store, *second);
  EXPECT_EQ(server.rejected_connections(), 0u);
}

// A launcher binds and listens; the store serves on that socket (no window for another process to take the port).
TEST(Store, TcpServesOnAnInheritedListeningSocket) {
  int fd = platform::open_socket(AF_INET, SOCK_STREAM, 0, false);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  TcpStoreServer server(fd, "t");
  EXPECT_EQ(server.port(), ntohs(addr.sin_port));
  std::string address = "127.0.0.1:" + std::to_string(server.port());
  auto store = connect_tcp_store(address, "t", deadline_after(5));
  auto second = connect_tcp_store(address, "t", deadline_after(5));
  exercise_store(*store, *second);
}

TEST(Store, TcpRefusesADescriptorThatDoesNotListen) {
  int fd = platform::open_socket(AF_INET, SOCK_STREAM, 0, false);
  ASSERT_GE(fd, 0);
  try {
    TcpStoreServer server(fd, "t");  // bound to nothing, not listening
    FAIL() << "a socket that does not listen was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("not a listening TCP socket"), std::string::npos) << error.what();
  }
  EXPECT_EQ(fcntl(fd, F_GETFD), -1) << "the descriptor is owned (closed) even on failure";
  EXPECT_THROW(TcpStoreServer(-1, "t"), InvalidArgument);
}

// One client, two threads: a get waiting for its key does not hold up the set that provides it (communicators
// split from one parent share the parent's client and may initialise on different threads).
TEST(Store, TcpClientServesThreadsConcurrently) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  auto store = connect_tcp_store("127.0.0.1:" + std::to_string(server.port()), "t", deadline_after(5));
  auto start = Clock::now();
  std::thread waiter([&] { EXPECT_EQ(store->get("k", deadline_after(10)), (std::vector<uint8_t>{4})); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  store->set("k", {4}, deadline_after(10));
  waiter.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << "the set waited for the get's deadline";
}

// erase frees what the key held (the 256 MiB cap counts it no more); erasing an absent key is fine. Both stores.
TEST(Store, EraseRemovesKeysAndFreesTheirRoom) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  auto tcp = connect_tcp_store("127.0.0.1:" + std::to_string(server.port()), "t", deadline_after(5));
  for (const auto& store : {tcp, make_in_memory_store()}) {
    store->set("a", std::vector<uint8_t>(1000, 7), deadline_after(5));
    store->add("n", 5, deadline_after(5));
    store->erase("a", deadline_after(5));
    store->erase("never-set", deadline_after(5));
    EXPECT_THROW(store->get("a", deadline_after(0.1)), TimeoutError) << "erased";
    EXPECT_EQ(store->add("n", 1, deadline_after(5)), 6) << "other keys stay";
    store->erase("n", deadline_after(5));
    EXPECT_EQ(store->add("n", 1, deadline_after(5)), 1) << "a counter starts over once erased";
    store->erase("n", deadline_after(5));
  }
  EXPECT_EQ(server.stored_bytes(), 0u);
}

// A get that another thread cancels gives up within ~100 ms, on the TCP client (waiting on its one connection, not
// reconnecting in slices) and on the in-process store; without the flag set it times out as usual.
TEST(Store, CancelledGetGivesUp) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  auto tcp = connect_tcp_store("127.0.0.1:" + std::to_string(server.port()), "t", deadline_after(5));
  for (const auto& store : {tcp, make_in_memory_store()}) {
    std::atomic<bool> cancelled{false};
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      cancelled = true;
    });
    const auto start = Clock::now();
    EXPECT_THROW(store->get("never", deadline_after(20), &cancelled), InvalidUsage);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
    canceller.join();
    std::atomic<bool> quiet{false};
    EXPECT_THROW(store->get("never", deadline_after(0.3), &quiet), TimeoutError);
    store->set("there", {1}, deadline_after(5));
    EXPECT_EQ(store->get("there", deadline_after(5), &quiet), (std::vector<uint8_t>{1}));
  }
}

// Transports listen on the store's local_address(): the interface of the client's connection, 127.0.0.1 in-process.
TEST(Store, LocalAddressIsTheConnectionsInterface) {
  EXPECT_EQ(make_in_memory_store()->local_address(), "127.0.0.1");
  TcpStoreServer server("127.0.0.1", 0, "t");
  auto tcp = connect_tcp_store("127.0.0.1:" + std::to_string(server.port()), "t", deadline_after(5));
  EXPECT_EQ(tcp->local_address(), "127.0.0.1");
}

TEST(Store, ConnectToNothingTimesOut) {
  auto start = Clock::now();
  EXPECT_THROW(connect_tcp_store("127.0.0.1:1", "t", deadline_after(0.3)), TimeoutError);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
}

TEST(Store, ASlowHostLookupEndsAtTheDeadline) {
  auto start = Clock::now();
  EXPECT_THROW(connect_tcp_store("slow-lookup.invalid:29500", "t", deadline_after(0.2)), TimeoutError);
  EXPECT_THROW(TcpStoreServer("slow-lookup.invalid", 0, "t", deadline_after(0.2)), TimeoutError);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1500)) << "waited for the lookup, not the deadline";
  Config config;
  config.rank = 0;
  config.world_size = 2;
  config.root = "slow-lookup.invalid:1";
  config.timeout_s = 0.2;
  start = Clock::now();
  try {
    Communicator::init(config);
    ADD_FAILURE() << "init resolved a name that never resolves";
  } catch (const TimeoutError& error) {
    EXPECT_NE(std::string(error.what()).find("slow-lookup.invalid"), std::string::npos) << error.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1500));
  // A name that resolves in time still works, and an unknown one is reported as such.
  TcpStoreServer server("localhost", 0, "t", deadline_after(5));
  auto store = connect_tcp_store("localhost:" + std::to_string(server.port()), "t", deadline_after(5));
  store->set("k", {1}, deadline_after(5));
  try {
    connect_tcp_store("unknown-host.invalid:1", "t", deadline_after(10));
    ADD_FAILURE() << "an unknown host resolved";
  } catch (const IoError& error) {
    EXPECT_NE(std::string(error.what()).find("unknown-host.invalid"), std::string::npos) << error.what();
  }
}

TEST(HostPort, ParsesAndRejects) {
  auto hp = net::parse_host_port("10.0.0.1:29500", "root");
  EXPECT_EQ(hp.host, "10.0.0.1");
  EXPECT_EQ(hp.port, 29500);
  EXPECT_EQ(net::parse_host_port("[::1]:80", "root").host, "::1");
  EXPECT_THROW(net::parse_host_port("nohost", "root"), InvalidArgument);
  EXPECT_THROW(net::parse_host_port("h:99999", "root"), InvalidArgument);
  EXPECT_THROW(net::parse_host_port("h:12x", "root"), InvalidArgument);
}

TEST(Chunking, SegmentsCoverTheRangeExactly) {
  for (size_t count : {0, 1, 7, 8, 4099}) {
    for (int parts : {1, 2, 3, 7, 8}) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        algo::Piece piece = algo::segment(count, parts, i);
        EXPECT_EQ(piece.offset, next);
        EXPECT_LE(piece.count, count / parts + 1);
        next += piece.count;
      }
      EXPECT_EQ(next, count);
    }
  }
  auto pieces = algo::chunks({10, 25}, 10);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].offset, 30u);
  EXPECT_EQ(pieces[2].count, 5u);
  EXPECT_TRUE(algo::chunks({0, 0}, 10).empty());
  EXPECT_EQ(algo::mod(-1, 5), 4);
}

TEST(Signature, DescribesCalls) {
  EXPECT_EQ(describe_meta(make_meta(OpKind::kAllReduce, DataType::kBfloat16, ReduceOp::kMax, 0, 1024)),
            "all_reduce(count=1024, bf16, max)");
  EXPECT_EQ(describe_meta(make_meta(OpKind::kBroadcast, DataType::kInt8, ReduceOp::kSum, 3, 5)),
            "broadcast(count=5, i8, root=3)");
  EXPECT_EQ(describe_meta(make_meta(OpKind::kReduce, DataType::kFloat64, ReduceOp::kAvg, 1, 9)),
            "reduce(count=9, f64, avg, root=1)");
  EXPECT_EQ(describe_meta(make_meta(OpKind::kReduceScatter, DataType::kUint8, ReduceOp::kMin, 0, 2)),
            "reduce_scatter(count=2, u8, min)");
  EXPECT_NE(make_meta(OpKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 0, 1),
            make_meta(OpKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, 0, 1));
}

TEST(Types, NamesRoundTrip) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto dtype = static_cast<DataType>(i);
    EXPECT_EQ(parse_dtype(to_string(dtype)), dtype);
  }
  for (int i = 0; i < kNumReduceOps; ++i) EXPECT_EQ(parse_op(to_string(static_cast<ReduceOp>(i))), static_cast<ReduceOp>(i));
  EXPECT_THROW(parse_dtype("f128"), InvalidArgument);
  EXPECT_THROW(dtype_size(static_cast<DataType>(77)), InvalidArgument);
  std::string floats, unsigned_types;
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto dtype = static_cast<DataType>(i);
    if (is_floating_point(dtype)) floats += to_string(dtype) + " ";
    if (is_unsigned(dtype)) unsigned_types += to_string(dtype) + " ";
  }
  EXPECT_EQ(floats, "f16 f32 f64 bf16 ");
  EXPECT_EQ(unsigned_types, "u8 u32 u64 ");
}

TEST(Env, EveryKnobHasHelpAndUnknownKnobsThrow) {
  for (const auto& knob : env::knobs()) {
    EXPECT_EQ(std::string(knob.name).rfind("TBCOLL_", 0), 0u);
    EXPECT_GT(std::string(knob.help).size(), 10u) << knob.name;
  }
  EXPECT_THROW(env::get("TBCOLL_NOT_A_KNOB"), Error);
  setenv("TBCOLL_SPIN_US", "abc", 1);
  EXPECT_THROW(env::get_int("TBCOLL_SPIN_US"), InvalidArgument);
  unsetenv("TBCOLL_SPIN_US");
}

TEST(Config, FromEnvFallsBackToLauncherVariables) {
  for (const char* name : {"TBCOLL_RANK", "TBCOLL_WORLD_SIZE"}) unsetenv(name);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  Config config = Config::from_env();
  EXPECT_EQ(config.rank, 2);
  EXPECT_EQ(config.world_size, 4);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "3", 1);
  config = Config::from_env();
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.world_size, 3);
  setenv("TBCOLL_RANK", "0", 1);
  EXPECT_EQ(Config::from_env().rank, 0) << "TBCOLL_RANK wins";
  setenv("TBCOLL_RANK", "x", 1);
  EXPECT_THROW(Config::from_env(), InvalidArgument);
  for (const char* name : {"TBCOLL_RANK", "SLURM_PROCID", "SLURM_NTASKS"}) unsetenv(name);
}

TEST(Config, SpinningYieldsWhenAPeerMayShareTheCpu) {
  const char* saved = std::getenv("TBCOLL_SPIN_YIELD");
  const std::string saved_value = saved != nullptr ? saved : "";
  unsetenv("TBCOLL_SPIN_YIELD");
  using Cpus = std::vector<int>;
  using transport::SpinYield;
  auto policy = [](const Cpus& mine, const std::vector<Cpus>& peers, bool crowded = false) {
    return spin_yield_policy(mine, peers, crowded);
  };
  EXPECT_EQ(policy({0}, {{1}}), SpinYield::kNever) << "pinned to different CPUs";
  EXPECT_EQ(policy({0, 1}, {{2, 3}, {4}}), SpinYield::kNever) << "disjoint sets";
  EXPECT_EQ(policy({0}, {}), SpinYield::kNever) << "alone on this machine";
  EXPECT_EQ(policy({0}, {{0}}), SpinYield::kNowAndThen) << "two ranks pinned to one CPU";
  EXPECT_EQ(policy({0, 1}, {{1, 2}}), SpinYield::kNowAndThen) << "overlapping sets";
  EXPECT_EQ(policy({0}, {{1}, {0, 1}}), SpinYield::kNowAndThen) << "one unpinned peer";
  EXPECT_EQ(policy({0}, {Cpus{}}), SpinYield::kNowAndThen) << "a peer that could not read its mask";
  EXPECT_EQ(policy({}, {{1}}), SpinYield::kNowAndThen) << "this rank could not read its mask";
  EXPECT_EQ(policy({0, 1}, {{0, 1}, {0, 1}}, true), SpinYield::kEveryPoll) << "3 ranks on 2 CPUs";
  setenv("TBCOLL_SPIN_YIELD", "1", 1);
  EXPECT_EQ(policy({0}, {{1}}), SpinYield::kNowAndThen);
  setenv("TBCOLL_SPIN_YIELD", "0", 1);
  EXPECT_EQ(policy({0}, {{0}}, true), SpinYield::kNever);
  setenv("TBCOLL_SPIN_YIELD", "2", 1);
  EXPECT_EQ(policy({0}, {{1}}), SpinYield::kEveryPoll);
  setenv("TBCOLL_SPIN_YIELD", "3", 1);
  EXPECT_THROW(policy({0}, {{1}}), InvalidArgument);
  if (saved != nullptr) {
    setenv("TBCOLL_SPIN_YIELD", saved_value.c_str(), 1);
  } else {
    unsetenv("TBCOLL_SPIN_YIELD");
  }
}

TEST(Config, CrowdingIsTheMostRanksPerCpuOfAnyMachine) {
  using Cpus = std::vector<int>;
  EXPECT_EQ(machine_crowding({Cpus{0}, Cpus{1}}, {"a", "a"}), 1.0) << "a CPU each";
  EXPECT_EQ(machine_crowding({Cpus{0, 1}, Cpus{0, 1}, Cpus{0, 1}}, {"a", "a", "a"}), 1.5) << "3 ranks, 2 CPUs";
  EXPECT_EQ(machine_crowding({Cpus{0}, Cpus{0}, Cpus{0}, Cpus{0, 1}}, {"a", "a", "b", "b"}), 2.0)
      << "the worse of two machines";
  EXPECT_EQ(machine_crowding({Cpus{}, Cpus{}}, {"a", "a"}), 1.0) << "unknown masks count as a CPU each";
  EXPECT_EQ(machine_crowding({}, {}), 1.0);
}

TEST(Config, CpuListsRoundTrip) {
  EXPECT_EQ(format_cpus({0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
  EXPECT_EQ(format_cpus({}), "");
  EXPECT_EQ(parse_cpus("0-3,6,8-9"), (std::vector<int>{0, 1, 2, 3, 6, 8, 9}));
  EXPECT_EQ(parse_cpus(""), std::vector<int>{});
  EXPECT_EQ(parse_cpus(format_cpus(allowed_cpus())), allowed_cpus());
  EXPECT_FALSE(allowed_cpus().empty()) << "the affinity, else every online CPU (macOS, plain POSIX)";
  if (platform::allowed_cpus().empty()) {
    EXPECT_EQ(allowed_cpus().size(), std::thread::hardware_concurrency());
  } else {
    EXPECT_EQ(allowed_cpus(), platform::allowed_cpus());
  }
  for (const char* junk : {"x", "1-", "3-1", "1,,2", "99999999", "0-99999"}) {
    EXPECT_THROW(parse_cpus(junk), InvalidArgument) << junk;
  }
}

}  // namespace
}  // namespace tbcoll
