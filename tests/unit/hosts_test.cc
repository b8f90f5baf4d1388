// tbcoll-run's host lists (tools/run/hosts.h): --hosts, text hostfiles, MLX's JSON hostfiles, placement.
#include <gtest/gtest.h>

#include <functional>

#include "tools/run/hosts.h"

namespace tbcoll::run {
namespace {

std::string names(const HostList& list) {
  std::string out;
  for (const Host& host : list.hosts) {
    out += (out.empty() ? "" : ",") + host.name + ":" + std::to_string(host.slots) +
           (host.address.empty() ? "" : "@" + host.address);
  }
  return out;
}

std::string error_of(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const HostError& error) {
    return error.what();
  }
  return "no error";
}

TEST(Hosts, CommandLineList) {
  EXPECT_EQ(names(parse_hosts("m1:2,m2")), "m1:2,m2:1");
  EXPECT_EQ(names(parse_hosts("nsA:1,nsB:1")), "nsA:1,nsB:1");
  EXPECT_EQ(names(parse_hosts("[fd00::1]:2,[fd00::2]")), "fd00::1:2,fd00::2:1");
  EXPECT_EQ(names(parse_hosts("user@mac.local:3")), "user@mac.local:3");
  for (const char* bad : {"", ",", "m1,", "m1:0", "m1:x", "m1:2000", "[fd00::1", "m 1"}) {
    EXPECT_NE(error_of([&] { parse_hosts(bad); }), "no error") << bad;
  }
  EXPECT_NE(error_of([] { parse_hosts("m1:0"); }).find("slots '0'"), std::string::npos);
  // A name ssh would read as an option (-oProxyCommand=... runs a command) is refused, in every kind of list.
  EXPECT_NE(error_of([] { parse_hosts("-oProxyCommand=true:1"); }).find("starts with '-'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("-oProxyCommand=true slots=1\n", "f"); }).find("starts with '-'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile(R"([{"ssh": "-oProxyCommand=true"}])", "h.json"); }).find("starts with '-'"),
            std::string::npos);
}

TEST(Hosts, TextHostfile) {
  const HostList list = parse_hostfile("# two Macs\nmac1 slots=2\n\n  mac2   # the other\nlinux1 slots=1 max_slots=4\n",
                                       "hosts.txt");
  EXPECT_EQ(names(list), "mac1:2,mac2:1,linux1:1");
  EXPECT_EQ(error_of([] { parse_hostfile("m1\nm2 cpus=3\n", "f"); }), "f:2: unknown word 'cpus=3' (expected: host [slots=N])");
  EXPECT_EQ(error_of([] { parse_hostfile("m1 slots=-1\n", "f"); }), "f:1: slots '-1' is not a number in 1..1024");
  EXPECT_EQ(error_of([] { parse_hostfile("# nothing\n", "f"); }), "f: no hosts");
}

TEST(Hosts, MlxJsonHostfiles) {
  // mlx.launch's list form and its object form (backend, envs, hosts with ssh, ips, rdma).
  EXPECT_EQ(names(parse_hostfile(R"([{"ssh": "m1", "ips": ["10.0.5.1"]}, {"ssh": "m2", "ips": []}])", "h.json")),
            "m1:1@10.0.5.1,m2:1");
  const HostList list = parse_hostfile(R"({
    "backend": "jaccl", "envs": ["MLX_METAL_FAST_SYNCH=1"],
    "hosts": [
      {"ssh": "mac1", "ips": ["123.123.123.1"], "rdma": [null, "rdma_en2"]},
      {"ssh": "mac2", "ips": ["123.123.123.2"], "rdma": ["rdma_en3", null], "slots": 2}
    ]})", "h.json");
  EXPECT_EQ(names(list), "mac1:1@123.123.123.1,mac2:2@123.123.123.2");
  ASSERT_EQ(list.env.size(), 1u);
  EXPECT_EQ(list.env[0], "MLX_METAL_FAST_SYNCH=1");
  EXPECT_NE(error_of([] { parse_hostfile(R"([{"ips": ["1.2.3.4"]}])", "h.json"); }).find("host 0 has no \"ssh\""),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile("[{\"ssh\": \"m1\"},\n {\"ssh\": ", "h.json"); }).find("h.json:2: JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_hostfile(R"({"hosts": []})", "h.json"); }), "no error");
  EXPECT_NE(error_of([] { parse_hostfile(R"({"envs": ["X"], "hosts": [{"ssh": "m"}]})", "h.json"); }), "no error");
}

// mlx.launch's "rdma" fields become the ranks' device matrix: a rank's cell for a rank on another host is its
// host's cell for that host, ranks on one host have none between them (they use shm).
TEST(Hosts, TheRdmaFieldsBecomeTheRanksDeviceMatrix) {
  const HostList mesh = parse_hostfile(R"({"hosts": [
      {"ssh": "a", "rdma": [null, "rdma_en2", ["rdma_en3", "rdma_en4"]]},
      {"ssh": "b", "rdma": ["rdma_en5", [], "rdma_en3"], "slots": 2},
      {"ssh": "c", "rdma": [["rdma_en2", "rdma_en6"], "rdma_en4", null]}]})",
                                       "mesh.json");
  ASSERT_TRUE(mesh.hosts[1].has_rdma);
  EXPECT_EQ(mesh.hosts[0].rdma[2], (std::vector<std::string>{"rdma_en3", "rdma_en4"}));
  EXPECT_TRUE(mesh.hosts[1].rdma[1].empty());
  const std::vector<int> placed = place_ranks(mesh, 0);  // a, b, b, c
  EXPECT_EQ(rank_device_matrix(mesh, placed),
            R"([[null, ["rdma_en2"], ["rdma_en2"], ["rdma_en3", "rdma_en4"]], )"
            R"([["rdma_en5"], null, null, ["rdma_en3"]], [["rdma_en5"], null, null, ["rdma_en3"]], )"
            R"([["rdma_en2", "rdma_en6"], ["rdma_en4"], ["rdma_en4"], null]])");
  EXPECT_EQ(rank_device_matrix(parse_hosts("a,b"), {0, 1}), "") << "no rdma fields, no matrix";
  EXPECT_EQ(error_of([] {
              const HostList half = parse_hostfile(R"([{"ssh": "a", "rdma": [null, "x"]}, {"ssh": "b"}])", "h.json");
              rank_device_matrix(half, {0, 1});
            }),
            "the hostfile gives \"rdma\" for 1 of its 2 hosts: give it for all (a device matrix) or none");
  EXPECT_EQ(error_of([] { parse_hostfile(R"([{"ssh": "a", "rdma": [null]}, {"ssh": "b", "rdma": ["x", null]}])", "h"); }),
            "h: host 0: \"rdma\" has 1 cells, one per host needs 2");
  EXPECT_EQ(error_of([] { parse_hostfile(R"([{"ssh": "a", "rdma": ["x", "y"]}, {"ssh": "b", "rdma": ["x", null]}])", "h"); }),
            "h: host 0: \"rdma\" cell 0 (itself) is not null");
  EXPECT_EQ(error_of([] { parse_hostfile(R"([{"ssh": "a", "rdma": [null, 7]}, {"ssh": "b", "rdma": ["x", null]}])", "h"); }),
            "h: host 0: \"rdma\" cell 1 is not null, a device name or a list of them");
}

TEST(Hosts, RanksArePlacedHostByHost) {
  const HostList list = parse_hosts("a:2,b:1,c:3");
  EXPECT_EQ(place_ranks(list, 0), (std::vector<int>{0, 0, 1, 2, 2, 2}));
  EXPECT_EQ(place_ranks(list, 4), (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(error_of([&] { place_ranks(list, 7); }), "-n 7 ranks but the hosts have 6 slots");
}

}  // namespace
}  // namespace tbcoll::run
