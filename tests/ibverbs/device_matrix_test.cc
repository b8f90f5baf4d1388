// The device matrix (MLX_IBV_DEVICES' format) and the routes and queue pair budgets decided from it: pure code.
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "tbcoll/error.hpp"
#include "transports/ibverbs/device_matrix.h"
#include "transports/ibverbs/routes.h"

namespace tbcoll::ibverbs {
namespace {

// What the parser says about text, or "" when it takes it.
std::string error_of(const std::string& text, const std::string& source = "m.json") {
  try {
    parse_device_matrix(text, source);
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

#define EXPECT_SAYS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

TEST(DeviceMatrix, ParsesMlxFiles) {
  // A 4-Mac mesh as MLX's docs write it, with two cables between ranks 1 and 2 and none between 0 and 3.
  const DeviceMatrix matrix = parse_device_matrix(R"([
      [null, "rdma_en3", "rdma_en4", null],
      ["rdma_en3", null, ["rdma_en4", "rdma_en5"], "rdma_en6"],
      ["rdma_en3", ["rdma_en5","rdma_en6"], null, "rdma_en4"],
      [null, "rdma_en4", "rdma_en5", null]
    ])",
                                                  "mesh.json");
  ASSERT_EQ(matrix.size(), 4);
  EXPECT_EQ(matrix.source, "mesh.json");
  EXPECT_TRUE(matrix.cells[0][0].empty());
  EXPECT_TRUE(matrix.cells[0][3].empty());
  EXPECT_EQ(matrix.cells[0][1], std::vector<std::string>{"rdma_en3"});
  EXPECT_EQ(matrix.cells[1][2], (std::vector<std::string>{"rdma_en4", "rdma_en5"}));
  EXPECT_EQ(matrix.cells[2][1], (std::vector<std::string>{"rdma_en5", "rdma_en6"}));
  EXPECT_EQ(parse_device_matrix("[[null]]", "one").size(), 1);
  EXPECT_EQ(parse_device_matrix("[[null,\"a\\/b\"],[\"c\",null]]", "x").cells[0][1][0], "a/b");
}

TEST(DeviceMatrix, MalformedJsonIsReportedWithFileLineAndColumn) {
  EXPECT_SAYS(error_of("[[null, \"rdma_en3\"],\n [\"rdma_en3\" null]]"), "m.json: malformed JSON at line 2, column 14");
  EXPECT_SAYS(error_of("[[null, 3], [3, null]]"), "column 9: expected null, a device name in quotes or a list");
  EXPECT_SAYS(error_of("[[null, \"rdma_en3], [\"rdma_en3\", null]]"), "malformed JSON");
  EXPECT_SAYS(error_of("[[null, \"rdma_en3\"], [\"rdma_en3\", null]"), "missing ']'");
  EXPECT_SAYS(error_of("[[null, \"a\"], [\"a\", null]] x"), "unexpected text after the matrix");
  EXPECT_SAYS(error_of("[[null, \"a\"], [\"a\", nul]]"), "expected null");
  EXPECT_SAYS(error_of(""), "ends where a value was expected");
  EXPECT_SAYS(error_of("{\"a\": 1}"), "line 1, column 1");
  EXPECT_SAYS(error_of("[[null, \"a\\u0041\"], [\"a\", null]]"), "escape \\u");
  EXPECT_SAYS(error_of("[[[[[null]]]]]"), "nested deeper");
}

TEST(DeviceMatrix, WrongShapesAndCellsAreReportedWithRowAndColumn) {
  EXPECT_SAYS(error_of("null"), "m.json (line 1, column 1): expected an N x N list of lists");
  EXPECT_SAYS(error_of("[]"), "expected an N x N list");
  EXPECT_SAYS(error_of("[[null, \"a\"], [\"a\"]]"), "row 1 has 1 cells; a matrix of 2 ranks needs 2");
  EXPECT_SAYS(error_of("[[null, \"a\"], \"a\"]"), "row 1 has 0 cells");
  EXPECT_SAYS(error_of("[[\"rdma_en1\", \"a\"], [\"a\", null]]"),
              "row 0, column 0: the diagonal must be null (a rank does not cable itself), found \"rdma_en1\"");
  EXPECT_SAYS(error_of("[[null, [\"a\", null]], [\"a\", null]]"), "row 0, column 1: a list of cables holds device names only");
  EXPECT_SAYS(error_of("[[null, \"\"], [\"a\", null]]"), "row 0, column 1: an empty device name");
  EXPECT_SAYS(error_of("[[null, [\"a\", \"a\"]], [[\"a\", \"b\"], null]]"), "row 0, column 1: device a twice");
  EXPECT_SAYS(error_of("[[null, \"a\", null], [\"a\", null, \"b\"], [null, null, null]]"),
              "row 1, column 2 is \"b\" but row 2, column 1 is null");
  EXPECT_SAYS(error_of("[[null, [\"a\", \"b\"]], [\"a\", null]]"),
              "row 0, column 1 is [\"a\", \"b\"] but row 1, column 0 is \"a\"");
}

// exo writes [] where MLX writes null: no cable, on the diagonal too.
TEST(DeviceMatrix, AnEmptyListIsNoCable) {
  const DeviceMatrix matrix =
      parse_device_matrix(R"([[[], ["rdma_en2"], []], [["rdma_en3"], [], "rdma_en4"], [null, ["rdma_en2"], []]])", "x");
  EXPECT_TRUE(matrix.cells[0][0].empty());
  EXPECT_TRUE(matrix.cells[0][2].empty());
  EXPECT_TRUE(matrix.cells[2][0].empty());
  EXPECT_EQ(matrix.cells[1][2], std::vector<std::string>{"rdma_en4"});
  EXPECT_SAYS(error_of("[[null, []], [\"a\", null]]"), "row 0, column 1 is null but row 1, column 0 is \"a\"");
}

TEST(DeviceMatrix, CheckedAgainstTheJobAndTheDevicesHere) {
  const DeviceMatrix matrix = parse_device_matrix("[[null, \"rdma_en3\"], [\"rdma_en5\", null]]", "pair.json");
  EXPECT_NO_THROW(check_device_matrix(matrix, 2, 0, {"rdma_en3", "rdma_en4"}));
  auto error = [&](int world, int rank, std::vector<std::string> here) {
    try {
      check_device_matrix(matrix, world, rank, here);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_SAYS(error(3, 0, {"rdma_en3"}), "device matrix pair.json is 2 x 2, but the job has 3 ranks");
  EXPECT_SAYS(error(2, 1, {"rdma_en3", "rdma_en4"}),
              "pair.json: row 1, column 0 names rdma_en5, which this host does not have (its RDMA devices: rdma_en3, "
              "rdma_en4)");
  EXPECT_SAYS(error(2, 0, {}), "its RDMA devices: none");
  EXPECT_SAYS(error(2, 5, {"rdma_en3"}), "has no row 5");
}

TEST(DeviceMatrix, FilesAndInlineValuesAreTold) {
  EXPECT_TRUE(names_a_matrix("/etc/mlx/devices.json"));
  EXPECT_TRUE(names_a_matrix("devices.json"));
  EXPECT_TRUE(names_a_matrix(" [[null]]"));
  EXPECT_FALSE(names_a_matrix("rdma_en3,rdma_en4"));
  EXPECT_FALSE(names_a_matrix("rxe0"));
  char path[] = "/tmp/tbcoll-matrix-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "[[null, \"rxe0\"],\n [\"rxe0\", null]]\n";
  const DeviceMatrix matrix = load_device_matrix(path);
  EXPECT_EQ(matrix.cells[1][0], std::vector<std::string>{"rxe0"});
  std::ofstream(path) << "[[null, \"rxe0\"],\n [\"rxe0\", 7]]\n";
  try {
    load_device_matrix(path);
    ADD_FAILURE() << "a malformed file loaded";
  } catch (const InvalidArgument& e) {
    EXPECT_SAYS(std::string(e.what()), std::string(path) + ": malformed JSON at line 2, column 11");
  }
  std::remove(path);
  try {
    load_device_matrix(path);
    ADD_FAILURE() << "a missing file loaded";
  } catch (const InvalidArgument& e) {
    EXPECT_SAYS(std::string(e.what()), "cannot read the file");
  }
}

// ---- routes --------------------------------------------------------------------------------------------------

ContextAddress rank_of(const DeviceMatrix& matrix, int rank, int budget = 0) {
  ContextAddress address;
  address.instance = rank;
  address.kind = ContextAddress::Kind::kMatrix;
  for (int peer = 0; peer < matrix.size(); ++peer) {
    const auto& cell = matrix.cells[static_cast<size_t>(rank)][static_cast<size_t>(peer)];
    if (cell.empty()) continue;
    address.routes[peer] = cell;
    for (const auto& device : cell) {
      address.budget[device] = budget;
      const std::string port = "k" + std::to_string(rank) + "." + device + "|h:1|" + device + "|uc";
      if (std::find(address.ports.begin(), address.ports.end(), port) == address.ports.end()) {
        address.ports.push_back(port);
      }
    }
  }
  return address;
}

TEST(IbverbsRoutes, AddressesRoundTrip) {
  ContextAddress address;
  address.instance = 3;
  address.ports = {"a.0.x|10.0.0.1:5|rdma_en3|uc+auto", "a.0.y|10.0.0.1:6|rdma_en4|uc+auto"};
  address.budget = {{"rdma_en3", 10}, {"rdma_en4", 0}};
  address.kind = ContextAddress::Kind::kMatrix;
  address.host = "mac-1";
  address.routes = {{0, {"rdma_en3"}}, {5, {"rdma_en3", "rdma_en4"}}};
  const ContextAddress back = decode_context_address(encode(address));
  EXPECT_EQ(back.instance, 3);
  EXPECT_EQ(back.ports, address.ports);
  EXPECT_EQ(back.budget, address.budget);
  EXPECT_EQ(back.kind, ContextAddress::Kind::kMatrix);
  EXPECT_EQ(back.host, "mac-1");
  EXPECT_EQ(back.routes, address.routes);
  address.kind = ContextAddress::Kind::kEveryPeer;
  address.devices = {"rxe0"};
  EXPECT_EQ(decode_context_address(encode(address)).devices, address.devices);
  address.kind = ContextAddress::Kind::kSubnets;
  address.nets = {{"rdma_en3", "10.77.0.1", 30, true}, {"rdma_en4", "10.77.1.2", -1, true}};
  address.rails = 2;
  const ContextAddress subnets = decode_context_address(encode(address));
  EXPECT_EQ(subnets.kind, ContextAddress::Kind::kSubnets);
  ASSERT_EQ(subnets.nets.size(), 2u);
  EXPECT_EQ(subnets.nets[1].ipv4, "10.77.1.2");
  EXPECT_EQ(subnets.nets[1].prefix, -1);
  EXPECT_TRUE(subnets.nets[0].apple);
  EXPECT_EQ(subnets.rails, 2);
  EXPECT_EQ(encode(address).find('\n'), std::string::npos) << "one line: the communicator's records are lines";
  for (const std::string& bad : {std::string(), std::string("tbcoll-ibverbs-2;instance 0;port k|h:1|d|uc;route * d"),
                                 std::string("tbcoll-ibverbs-3;instance 0;port k|h:1|d|uc;net d 10.0.0.1 40 apple;route ~ 1"),
                                 std::string("tbcoll-ibverbs-3;instance 0;port k|h:1|d|uc;route ~ 0"),
                                 std::string("tbcoll-ibverbs-3;instance 0;route * rxe0"),
                                 std::string("tbcoll-ibverbs-3;instance 0;port bad;route * rxe0"),
                                 std::string("tbcoll-ibverbs-3;instance 0;port k|h:1|d|uc;budget d -1;route * d"),
                                 std::string("tbcoll-ibverbs-3;instance 0;port k|h:1|d|uc;what"),
                                 std::string("tbcoll-ibverbs-3;instance 0;port k|h:1|d|uc;route x d")}) {
    EXPECT_THROW(decode_context_address(bad), InvalidArgument) << bad;
  }
}

TEST(IbverbsRoutes, RailsFollowTheMatrixCableByCable) {
  const DeviceMatrix matrix = parse_device_matrix(R"([
      [null, "rdma_en3", null],
      ["rdma_en3", null, ["rdma_en4", "rdma_en5"]],
      [null, ["rdma_en5", "rdma_en6"], null]])",
                                                  "m");
  const ContextAddress r0 = rank_of(matrix, 0), r1 = rank_of(matrix, 1), r2 = rank_of(matrix, 2);
  std::string why;
  EXPECT_TRUE(rails_between(r0, r2, &why).empty());
  EXPECT_SAYS(why, "no cable between ranks 0 and 2");
  EXPECT_TRUE(rails_between(r2, r0, nullptr).empty());
  const auto one = rails_between(r0, r1, nullptr);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].device, "rdma_en3");
  EXPECT_EQ(one[0].peer.key, "k1.rdma_en3");
  const auto two = rails_between(r1, r2, nullptr);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].device, "rdma_en4");
  EXPECT_EQ(two[0].peer.device, "rdma_en5") << "the k-th names of both rows are one cable";
  EXPECT_EQ(two[1].device, "rdma_en5");
  EXPECT_EQ(two[1].peer.device, "rdma_en6");
  const auto back = rails_between(r2, r1, nullptr);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].device, "rdma_en6");
  EXPECT_EQ(back[1].peer.device, "rdma_en5");
}

// The budget goes to peers in world-rank order, and both ends of a pair decide alike.
TEST(IbverbsRoutes, PeersPastADevicesQueuePairBudgetAreDeclinedSymmetrically) {
  const int n = 12, budget = 10;
  std::vector<ContextAddress> ranks(n);
  for (int r = 0; r < n; ++r) {
    ranks[r].instance = r;
    ranks[r].ports = {"k" + std::to_string(r) + "|h:1|rdma_en0|uc"};
    ranks[r].budget = {{"rdma_en0", budget}};
    ranks[r].devices = {"rdma_en0"};
    ranks[r].kind = ContextAddress::Kind::kEveryPeer;
  }
  int connected = 0;
  for (int a = 0; a < n; ++a) {
    int peers = 0;
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      std::string why;
      const bool ab = !rails_between(ranks[a], ranks[b], &why).empty();
      EXPECT_EQ(ab, !rails_between(ranks[b], ranks[a], nullptr).empty()) << a << "-" << b;
      if (!ab) {
        EXPECT_SAYS(why, "queue pairs for 10 peers (TBCOLL_IB_MAX_QPS=10");
      }
      peers += ab ? 1 : 0;
    }
    EXPECT_LE(peers, budget) << "rank " << a;
    connected += peers;
  }
  EXPECT_EQ(connected, 11 * 10) << "ranks 0-10 fully connected, rank 11 past every budget";
  ranks[0].budget["rdma_en0"] = 0;  // no limit on rank 0's side: rank 11 has room for rank 0
  EXPECT_FALSE(rails_between(ranks[0], ranks[11], nullptr).empty());
  EXPECT_TRUE(rails_between(ranks[1], ranks[11], nullptr).empty()) << "rank 1's budget still counts";
}

// ---- routes by subnet ------------------------------------------------------------------------------------------

ContextAddress by_subnet(int rank, std::vector<ContextAddress::Net> nets, int rails = 1) {
  ContextAddress address;
  address.instance = rank;
  address.host = "mac-" + std::to_string(rank);
  address.kind = ContextAddress::Kind::kSubnets;
  address.rails = rails;
  for (const auto& net : nets) {
    address.ports.push_back("k" + std::to_string(rank) + "." + net.device + "|h:1|" + net.device + "|uc");
  }
  address.nets = std::move(nets);
  return address;
}

// Each Thunderbolt cable on a /30 of its own (mlx.distributed_config's numbering): every pair finds its cable.
TEST(IbverbsRoutes, EachPeerOverThePortOnItsSubnet) {
  const ContextAddress a = by_subnet(0, {{"rdma_en2", "192.168.0.1", 30, true}, {"rdma_en3", "192.168.0.5", 30, true}});
  const ContextAddress b = by_subnet(1, {{"rdma_en3", "192.168.0.2", 30, true}, {"rdma_en4", "192.168.0.9", 30, true}});
  const ContextAddress c = by_subnet(2, {{"rdma_en5", "192.168.0.10", 30, true}, {"rdma_en2", "192.168.0.6", 30, true}});
  const auto ab = rails_between(a, b, nullptr), ba = rails_between(b, a, nullptr);
  ASSERT_EQ(ab.size(), 1u);
  EXPECT_EQ(ab[0].device, "rdma_en2");
  EXPECT_EQ(ab[0].peer.device, "rdma_en3") << "the names of a cable's ends differ";
  ASSERT_EQ(ba.size(), 1u);
  EXPECT_EQ(ba[0].device, "rdma_en3");
  EXPECT_EQ(ba[0].peer.device, "rdma_en2");
  const auto ac = rails_between(a, c, nullptr);
  ASSERT_EQ(ac.size(), 1u);
  EXPECT_EQ(ac[0].device, "rdma_en3");
  EXPECT_EQ(ac[0].peer.device, "rdma_en2");
  const auto cb = rails_between(c, b, nullptr);
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_EQ(cb[0].device, "rdma_en5");
  EXPECT_EQ(cb[0].peer.device, "rdma_en4");
}

TEST(IbverbsRoutes, NoPortOnAPeersSubnetIsNamedWithBothHosts) {
  const ContextAddress a = by_subnet(0, {{"rdma_en2", "192.168.0.1", 30, true}});
  const ContextAddress c = by_subnet(2, {{"rdma_en2", "192.168.0.10", 30, true}});
  std::string why;
  EXPECT_TRUE(rails_between(a, c, &why).empty());
  EXPECT_SAYS(why, "no RDMA port of rank 0 on host mac-0 (rdma_en2 192.168.0.1/30) shares a subnet with one of rank "
                   "2 on host mac-2 (rdma_en2 192.168.0.10/30)");
  EXPECT_TRUE(rails_between(c, a, nullptr).empty());
}

// Link-local 169.254/16 on every Thunderbolt port: which cable is which cannot be told.
TEST(IbverbsRoutes, OneSubnetOnSeveralThunderboltPortsIsAmbiguous) {
  const ContextAddress a = by_subnet(0, {{"rdma_en2", "169.254.1.1", 16, true}, {"rdma_en3", "169.254.2.1", 16, true}});
  const ContextAddress b = by_subnet(1, {{"rdma_en2", "169.254.3.1", 16, true}});
  std::string why;
  EXPECT_TRUE(rails_between(b, a, &why).empty());
  EXPECT_SAYS(why, "share one subnet on several Thunderbolt ports");
  EXPECT_SAYS(why, "give each cable a subnet of its own");
  EXPECT_TRUE(rails_between(a, b, nullptr).empty());
  // A switched network (RoCE, rxe) may share a subnet: the ports pair in order, up to TBCOLL_IB_RAILS.
  const ContextAddress x = by_subnet(0, {{"mlx5_0", "10.0.0.1", 24, false}, {"mlx5_1", "10.0.0.2", 24, false}}, 2);
  const ContextAddress y = by_subnet(1, {{"mlx5_0", "10.0.0.3", 24, false}, {"mlx5_1", "10.0.0.4", 24, false}}, 2);
  const auto rails = rails_between(y, x, nullptr);
  ASSERT_EQ(rails.size(), 2u);
  EXPECT_EQ(rails[0].device, "mlx5_0");
  EXPECT_EQ(rails[1].peer.device, "mlx5_1");
  EXPECT_EQ(rails_between(by_subnet(0, x.nets, 1), y, nullptr).size(), 1u) << "rails: the smaller of both ends'";
  // An unknown prefix: the address alone (every rank on one rxe device has the same address).
  const ContextAddress one = by_subnet(0, {{"rxe0", "10.9.0.1", -1, false}});
  EXPECT_EQ(rails_between(one, by_subnet(1, {{"rxe0", "10.9.0.1", -1, false}}), nullptr).size(), 1u);
}

}  // namespace
}  // namespace tbcoll::ibverbs
