// tbcoll-perf --pingpong over ibverbs: the raw verbs floors between ranks 0 and 1 (tools/rdma_diag/floors.h,
// the code tbcoll-rdma-check measures with), printed next to the collectives' figures with the goals for
// Thunderbolt 5 Macs. Runs once the communicator is gone (Apple's driver has deadlocked on a second context of one
// device in a process), so the ranks meet through the rendezvous store instead.
#pragma once

#include <cstddef>
#include <memory>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::bench {

/// What the table measured that the goals compare with (0: not in this run's sizes).
struct CollectiveFigures {
  double all_reduce_8b_us = 0;      ///< 2 ranks, 8 B, median (out of place)
  double all_reduce_16m_busbw = 0;  ///< GB/s at 16 MiB
};

/// Collective over the store (every rank calls it; only ranks 0 and 1 measure); prints on rank 0.
void print_verbs_floors(const std::shared_ptr<Store>& store, int rank, int world_size, double timeout_s,
                        const CollectiveFigures& figures, int round_trips, int messages);

/// Returns once every rank reached it (through the store); rank 0, which serves the store, returns last.
void leave_together(const std::shared_ptr<Store>& store, int rank, int world_size, double timeout_s);

}  // namespace tbcoll::bench
