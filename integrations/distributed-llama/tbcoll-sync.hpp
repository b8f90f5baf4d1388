// tbcoll for distributed-llama: the nodes' synchronisation and the root's per-token control packet go through
// tbcoll communicators instead of dllama's own sockets, which keep carrying what they carry at start-up (the
// net and node configs, the weights) and, now, the communicator's unique id.
//
// Included by dllama's src/app.cpp (C++11); implemented in tbcoll-sync.cpp (C++17, tbcoll's C++ API). The root
// chooses (`dllama inference|chat ... --sync tbcoll`); it tells every worker over the worker's socket, so a
// worker needs no flag. See README.md beside this file.
#ifndef TBCOLL_SYNC_HPP
#define TBCOLL_SYNC_HPP

#include <memory>

#include "nn/nn-executor.hpp"
#include "nn/nn-network.hpp"

class TbcollSync {
 public:
  /// Root: writes the choice to every worker (after the node configs) and, for tbcoll, builds the communicators
  /// with the workers (blocks until every worker joined or TBCOLL_TIMEOUT passed). nullptr: dllama's sockets.
  static std::unique_ptr<TbcollSync> offer(NnNetwork *network, NnUint nNodes, bool useTbcoll);
  /// Worker: reads the root's choice after its node config and joins the communicators; nullptr: sockets.
  static std::unique_ptr<TbcollSync> accept(NnNetwork *network, NnUint nodeIndex, NnUint nNodes);
  virtual ~TbcollSync() {}

  /// A synchronizer over this session's communicators for one executor (owned by the caller).
  virtual NnNodeSynchronizer *synchronizer(NnNetExecution *execution, NnNetConfig *netConfig,
                                           NnNodeConfig *nodeConfig) = 0;
  /// Root: sends the control packet to every worker; forwardFollows: a forward comes next (not the session's
  /// end). Throws NnTransferSocketException if the job broke (a node died or stopped answering: the message
  /// names it).
  virtual void sendControl(const void *packet, NnSize bytes, bool forwardFollows) = 0;
  /// Worker: waits for the root's next control packet (an idle root keeps its workers' waits alive; a dead or
  /// stopped one fails them within TBCOLL_TIMEOUT). Throws NnTransferSocketException naming the node.
  virtual void receiveControl(void *packet, NnSize bytes) = 0;
};

/// For benchmarks, whatever the sync: with DLLAMA_SYNC_STATS=1 in the environment, wraps synchronizer (taking
/// it) so that the time thread 0 spends in syncs is printed to stderr as the wrapper is destroyed
/// ("dllama sync: N calls, T us in syncs"); otherwise returns synchronizer itself.
NnNodeSynchronizer *timeSyncs(NnNodeSynchronizer *synchronizer);

#endif
