#include "benchmarks/verbs_floors.h"

#include <cstdio>
#include <string>

#include "common/env.h"
#include "common/time.h"
#include "tools/rdma_diag/floors.h"

namespace tbcoll::bench {

void print_verbs_floors(const std::shared_ptr<Store>& store, int rank, int world_size, double timeout_s,
                        const CollectiveFigures& figures, int round_trips, int messages) {
  if (rank > 1 || world_size < 2) return;
  ibverbs::FloorOptions options;
  options.rank = rank;
  options.mode = env::get("TBCOLL_IB_MODE") == "rc" ? "rc" : "uc";
  options.round_trips = round_trips;
  options.messages = messages;
  const std::string devices = env::get("TBCOLL_IB_DEVICES");
  if (devices.find_first_of(",/[.") == std::string::npos) options.device = devices;  // one plain device name
  const ibverbs::Floors floors = ibverbs::system_floors(
      options, ibverbs::store_exchange(store, "tbcoll-perf/verbs-floors", rank, 1 - rank, timeout_s));
  if (rank != 0) return;
  if (!floors.measured) {
    std::printf("# raw verbs floors between ranks 0 and 1: not measured: %s\n", floors.why_not.c_str());
    std::fflush(stdout);
    return;
  }
  const std::string kind = floors.mode == "rc" ? "RC" : "UC";
  std::printf("# raw verbs floors between ranks 0 and 1 (plain %s SEND, %s <-> %s, path MTU %d, same processes):\n",
              kind.c_str(), floors.device.c_str(), floors.peer_device.c_str(), floors.mtu);
  std::printf("#   %s SEND one-way latency, %zu B: %.2f us (median of %d round trips / 2)\n", kind.c_str(),
              options.latency_bytes, floors.one_way_us, options.round_trips);
  std::printf("#   one queue pair, %zu KiB messages: %.3f GB/s one way; %.3f GB/s per direction both ways at once\n",
              options.bandwidth_bytes >> 10, floors.one_qp_gbps, floors.both_ways_gbps);
  // The goals for Thunderbolt 5 Macs (README, "RDMA"): checkable in this one run.
  if (figures.all_reduce_8b_us > 0 && floors.one_way_us > 0) {
    const double ratio = figures.all_reduce_8b_us / floors.one_way_us;
    std::printf("#   goal: 8 B all_reduce within 2 x the one-way latency: %.2f us = %.2f x (%s)\n",
                figures.all_reduce_8b_us, ratio, ratio <= 2 ? "met" : "not met");
  } else {
    std::printf("#   goal: 8 B all_reduce within 2 x the one-way latency: not checked (2 ranks, all_reduce, -b 8)\n");
  }
  if (figures.all_reduce_16m_busbw > 0 && floors.one_qp_gbps > 0) {
    const double share = figures.all_reduce_16m_busbw / floors.one_qp_gbps;
    std::printf("#   goal: 16 MiB all_reduce busbw at least 80 %% of one queue pair: %.3f GB/s = %.0f %% (%s)\n",
                figures.all_reduce_16m_busbw, 100 * share, share >= 0.8 ? "met" : "not met");
  } else {
    std::printf(
        "#   goal: 16 MiB all_reduce busbw at least 80 %% of one queue pair: not checked (2 ranks, "
        "all_reduce, -e 16M)\n");
  }
  std::fflush(stdout);
}

void leave_together(const std::shared_ptr<Store>& store, int rank, int world_size, double timeout_s) {
  const Deadline deadline = deadline_after(timeout_s);
  const std::string base = "tbcoll-perf/leave/";
  store->set(base + "here/" + std::to_string(rank), {1}, deadline);
  for (int r = 0; r < world_size; ++r) store->get(base + "here/" + std::to_string(r), deadline);
  if (rank != 0) {
    store->set(base + "gone/" + std::to_string(rank), {1}, deadline);
    return;
  }
  for (int r = 1; r < world_size; ++r) store->get(base + "gone/" + std::to_string(r), deadline);
}

}  // namespace tbcoll::bench
