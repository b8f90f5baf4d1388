// The schedules. Each takes an Exec (peers, deadline, scratch) and the call's arguments; each file opens
// with a picture of its schedule and its cost.
#pragma once

#include <cstring>
#include <vector>

#include "algorithms/exec.h"
#include "algorithms/topology.h"

namespace tbcoll::algo {

void all_reduce_ring(Exec& exec, const Args& args);
void all_reduce_direct(Exec& exec, const Args& args);
void all_gather_ring(Exec& exec, const Args& args);
void all_gather_direct(Exec& exec, const Args& args);
void broadcast_tree(Exec& exec, const Args& args);
void broadcast_chain(Exec& exec, const Args& args);
void barrier_dissemination(Exec& exec, const Args& args);
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

void all_reduce_tree(Exec& exec, const Args& args);
void all_reduce_recursive_doubling(Exec& exec, const Args& args);
void all_reduce_halving_doubling(Exec& exec, const Args& args);
void all_reduce_mesh(Exec& exec, const Args& args);
void all_reduce_hierarchical(Exec& exec, const Args& args);
void all_gather_hierarchical(Exec& exec, const Args& args);
void all_gather_recursive_doubling(Exec& exec, const Args& args);

/// all_gather's own block: copies send to this rank's block of recv unless it is there already (in place);
/// returns the block.
inline uint8_t* copy_own_block(const Args& args, int rank) {
  const size_t bytes = args.count * args.elem_size;
  auto* own = static_cast<uint8_t*>(args.recv) + static_cast<size_t>(rank) * bytes;
  if (args.send != own && bytes > 0) std::memcpy(own, args.send, bytes);
  return own;
}

/// A broadcast's data: the root sends from send (copying it to recv when they differ); others receive into recv.
inline uint8_t* root_copy(Exec& exec, const Args& args) {
  const size_t bytes = args.count * args.elem_size;
  if (exec.rank() == args.root && args.send != args.recv && bytes > 0) std::memcpy(args.recv, args.send, bytes);
  return static_cast<uint8_t*>(args.recv);
}

/// The ranks of each host in rank order, hosts numbered as Exec::host_of numbers them.
inline std::vector<std::vector<int>> hosts_of(const Exec& exec) {
  std::vector<int> host_of(static_cast<size_t>(exec.size()));
  for (int p = 0; p < exec.size(); ++p) host_of[static_cast<size_t>(p)] = exec.host_of(p);
  return ranks_by_host(host_of);
}

/// The ring all-reduce among the ranks of ring only (in that order; this rank among them, at least 2).
void ring_all_reduce(Exec& exec, const Args& args, const std::vector<int>& ring);

}  // namespace tbcoll::algo
