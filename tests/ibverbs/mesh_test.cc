// Thunderbolt meshes on the fake fabric, cabled (fake::Options::cables): each Mac (a rank, a host of the fake) has
// one rdma_enN per other Mac, each a cable of its own, and a port reaches only the Mac at the other end of its
// cable. Without a device matrix every pair must find its cable by subnet; with the cables on one link-local
// subnet (which cable is which cannot be told), a device matrix from an mlx.launch hostfile's "rdma" fields, which
// tbcoll-run hands to every rank.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/checks.h"
#include "collectives/harness.h"
#include "fake_verbs/fake_verbs.h"
#include "tbcoll/tbcoll.hpp"
#include "tools/run/hosts.h"

namespace tbcoll::ibverbs {
namespace {

// The device of host `host` cabled to host `other`: rdma_en<k>, k its place among the other hosts.
int device_to(int host, int other) { return other < host ? other : other - 1; }

// A full mesh of n hosts: one cable per pair.
fake::Options full_mesh(int n, bool link_local) {
  fake::Options options;
  options.devices = n - 1;
  options.link_local = link_local;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) options.cables.push_back({a, device_to(a, b), b, device_to(b, a)});
  }
  return options;
}

// n ranks as threads, rank r on host r, over the fake only; what init or the body threw on each ("" if nothing).
std::vector<std::string> run_on_hosts(int n, const std::map<std::string, std::string>& knobs,
                                      const std::function<void(Communicator&)>& body, double timeout_s = 20) {
  auto store = make_in_memory_store();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      fake::set_thread_host(rank);
      Config config;
      config.rank = rank;
      config.world_size = n;
      config.store = store;
      config.transport = "fakeverbs";
      config.timeout_s = timeout_s;
      config.knobs = knobs;
      errors[static_cast<size_t>(rank)] = test::error_of([&] {
        Communicator comm = Communicator::init(config);
        body(comm);
      });
      fake::set_thread_host(-1);
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

void collectives(Communicator& comm) {
  test::check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, 300001, 0);  // slots and frames
  test::check_all_reduce(comm, DataType::kInt32, ReduceOp::kMax, 7, 1);
  test::check_all_gather(comm, DataType::kUint8, 70001);
  test::check_broadcast(comm, DataType::kFloat64, 4099, 3);
}

void every_cable_carried_traffic(const fake::Options& mesh) {
  const fake::Counters counters = fake::counters();
  ASSERT_EQ(counters.per_cable.size(), mesh.cables.size());
  for (size_t c = 0; c < mesh.cables.size(); ++c) {
    EXPECT_GT(counters.per_cable[c], 0u) << "the cable between hosts " << mesh.cables[c].host_a << " and "
                                         << mesh.cables[c].host_b;
  }
  EXPECT_EQ(counters.length_errors, 0u);
}

TEST(IbverbsMesh, FourMacsCabledPairwiseEachReachEveryPeerOverItsOwnCable) {
  const fake::Options mesh = full_mesh(4, false);
  fake::ScopedFabric fabric(mesh);
  const auto errors = run_on_hosts(4, {}, collectives);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
  every_cable_carried_traffic(mesh);
}

// Link-local addresses everywhere (one subnet on every port) cannot tell the cables apart; an mlx.launch
// hostfile's "rdma" fields can.
// Two Macs joined by two cables whose ports enumerate in opposite orders (host 0's rdma_en0 goes to host 1's
// rdma_en1 and the other way round): both ends pair the same cables into rails whatever the order (exo 2160
// deadlocked when its two ends paired them differently), and large messages go striped over both.
TEST(IbverbsMesh, TwoCablesCrossedPairAlikeOnBothEnds) {
  fake::Options crossed;
  crossed.devices = 2;
  crossed.cables = {{0, 0, 1, 1}, {0, 1, 1, 0}};
  fake::ScopedFabric fabric(crossed);
  const auto errors = run_on_hosts(2, {{"TBCOLL_IB_RAILS", "2"}}, [](Communicator& comm) {
    test::check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, (size_t{1} << 20) + 3, 0);
    test::check_all_gather(comm, DataType::kUint8, 300001);
  });
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  every_cable_carried_traffic(crossed);
}

TEST(IbverbsMesh, AnMlxLaunchHostfilesRdmaFieldsRouteAMeshOnOneSubnet) {
  const fake::Options mesh = full_mesh(4, true);
  fake::ScopedFabric fabric(mesh);
  const auto unsure = run_on_hosts(4, {}, collectives, 3);
  EXPECT_NE(unsure[0].find("share one subnet on several Thunderbolt ports"), std::string::npos) << unsure[0];
  EXPECT_NE(unsure[0].find("mlx.distributed_config gives each a /30"), std::string::npos) << unsure[0];

  fake::reset(mesh);
  // As mlx.distributed_config writes it: host i's "rdma" names, for each host, the device cabled to it.
  std::string hostfile = R"({"backend": "jaccl", "hosts": [)";
  for (int host = 0; host < 4; ++host) {
    hostfile += std::string(host == 0 ? "" : ", ") + "{\"ssh\": \"mac" + std::to_string(host) + "\", \"rdma\": [";
    for (int other = 0; other < 4; ++other) {
      hostfile += (other == 0 ? "" : ", ") +
                  (other == host ? std::string("null") : "\"rdma_en" + std::to_string(device_to(host, other)) + "\"");
    }
    hostfile += "]}";
  }
  hostfile += "]}";
  const run::HostList hosts = run::parse_hostfile(hostfile, "mesh.json");
  const std::string matrix = run::rank_device_matrix(hosts, run::place_ranks(hosts, 0));
  const auto errors = run_on_hosts(4, {{"TBCOLL_IB_DEVICES", matrix}}, collectives);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
  every_cable_carried_traffic(mesh);
}

// What a command printed (stdout and stderr) and its exit status.
std::pair<int, std::string> run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char buffer[4096];
  for (size_t got; (got = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, got);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, output};
}

void write_file(const std::string& path, const std::string& text) {
  FILE* file = fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr) << path;
  fputs(text.c_str(), file);
  fclose(file);
}

// tbcoll-run hands every rank the hostfile's "rdma" matrix as TBCOLL_IB_DEVICES, through the agent that starts the
// ranks on their hosts (here one that runs the command on this host, whatever the host), as the matrix of the
// ranks placed there; a TBCOLL_IB_DEVICES given with -x wins.
TEST(IbverbsMesh, TbcollRunHandsAHostfilesRdmaFieldsToEveryRank) {
  char made[] = "/tmp/tbcoll-hostfile.XXXXXX";
  ASSERT_NE(mkdtemp(made), nullptr);
  const std::string dir = made;
  write_file(dir + "/agent", "#!/bin/sh\nshift\nexec \"$@\"\n");
  ASSERT_EQ(chmod((dir + "/agent").c_str(), 0755), 0);
  const std::string hostfile = R"({"backend": "jaccl", "hosts": [
      {"ssh": "mac0", "ips": ["127.0.0.1"], "rdma": [null, "rdma_en1", "rdma_en2"]},
      {"ssh": "mac1", "ips": ["127.0.0.1"], "rdma": ["rdma_en3", null, ["rdma_en4", "rdma_en5"]], "slots": 2},
      {"ssh": "mac2", "ips": ["127.0.0.1"], "rdma": ["rdma_en6", "rdma_en7", null]}]})";
  write_file(dir + "/hosts.json", hostfile);
  const run::HostList hosts = run::parse_hostfile(hostfile, "hosts.json");
  const std::string matrix = run::rank_device_matrix(hosts, run::place_ranks(hosts, 0));
  const std::string launch = std::string(TBCOLL_RUN_PATH) + " --hostfile " + dir + "/hosts.json --launcher " + dir +
                             "/agent --timeout 60 ";
  const std::string print = " -- sh -c 'echo \"rank $TBCOLL_RANK devices $TBCOLL_IB_DEVICES\"'";
  const auto [status, output] = run_command(launch + print);
  EXPECT_EQ(status, 0) << output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(output.find("rank " + std::to_string(rank) + " devices " + matrix + "\n"), std::string::npos)
        << "rank " << rank << " in:\n" << output;
  }
  const auto [forced_status, forced] = run_command(launch + "-x TBCOLL_IB_DEVICES=rdma_en9" + print);
  EXPECT_EQ(forced_status, 0) << forced;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(forced.find("rank " + std::to_string(rank) + " devices rdma_en9\n"), std::string::npos) << forced;
  }
  std::remove((dir + "/agent").c_str());
  std::remove((dir + "/hosts.json").c_str());
  rmdir(dir.c_str());
}

// Two Macs with no cable between them: the error names both ranks, their hosts and their ports.
TEST(IbverbsMesh, APeerWithNoCableIsNamedWithBothHosts) {
  fake::Options line = full_mesh(3, false);
  line.cables.pop_back();  // hosts 1 and 2 have no cable
  fake::ScopedFabric fabric(line);
  const auto errors = run_on_hosts(3, {}, [](Communicator&) {}, 3);
  EXPECT_NE(errors[1].find("no RDMA port of rank 1 on host "), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("(rdma_en0 10.77.0.2/30) shares a subnet with one of rank 2 on host "), std::string::npos)
      << errors[1];
}

}  // namespace
}  // namespace tbcoll::ibverbs
