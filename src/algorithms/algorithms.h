// The schedules. Each takes an Exec (peers, deadline, scratch) and the call's arguments; each file opens
// with a picture of its schedule and its cost.
#pragma once

#include "algorithms/exec.h"

namespace tbcoll::algo {

void all_reduce_ring(Exec& exec, const Args& args);
void all_reduce_direct(Exec& exec, const Args& args);
void all_gather_ring(Exec& exec, const Args& args);
void all_gather_direct(Exec& exec, const Args& args);
void broadcast_tree(Exec& exec, const Args& args);
void broadcast_chain(Exec& exec, const Args& args);
void barrier_dissemination(Exec& exec);
void reduce_scatter_direct(Exec& exec, const Args& args);
void reduce_direct(Exec& exec, const Args& args);
// all_to_all (equal blocks) and all_to_allv (Args::*_counts, *_displs), gather and scatter (Args::root).
void all_to_all_pairwise(Exec& exec, const Args& args);
void all_to_allv_pairwise(Exec& exec, const Args& args);
void all_to_all_direct(Exec& exec, const Args& args);
void all_to_allv_direct(Exec& exec, const Args& args);
void gather_direct(Exec& exec, const Args& args);
void scatter_direct(Exec& exec, const Args& args);
void gather_binomial(Exec& exec, const Args& args);
void scatter_binomial(Exec& exec, const Args& args);

}  // namespace tbcoll::algo
