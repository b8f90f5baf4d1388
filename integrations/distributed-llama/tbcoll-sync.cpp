// tbcoll for distributed-llama (tbcoll-sync.hpp says what and why). dllama node i is tbcoll rank i; the root is
// node 0. Two communicators per session:
//
//   data     the executor's syncs, one collective per sync and per prefill batch (not one per row):
//              SYNC_WITH_ROOT                the root's rows to every node          broadcast from 0
//              SYNC_NODE_SLICES              every node's slice to every node      all_gather (bytes as they are:
//                                                                                  f32 or Q80), or all_reduce of
//                                                                                  f32 partial sums (see below)
//              SYNC_NODE_SLICES_EXCEPT_ROOT  the workers' slices to the root        gather to 0
//   control  the root's control packet before each forward, and keepalives while the root is idle (between
//            chat turns, say), sent from the root to each worker: a worker waiting for the next token then still
//            fails within TBCOLL_TIMEOUT when the root dies or stops, naming it, instead of waiting forever.
//
// The slices of SYNC_NODE_SLICES are partial sums that every node adds into its residual stream in node order
// (dllama's OP_MERGE_ADD). With DLLAMA_TBCOLL_SLICES=reduce (the default from 4 nodes on, f32 pipes only) the
// nodes all-reduce the partial sums instead: the sum lands in slice 0 and the other slices are zeroed, so the
// same merge adds it (adding +0.0 changes nothing), with (N-1)/N of the all-gather's bytes per node at N = 4
// and less beyond, rounded once in tbcoll's order instead of dllama's (identical on every node; the text is
// checked against dllama's own in the tests). `gather` keeps dllama's arithmetic bit for bit.
#include "tbcoll-sync.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <tbcoll/tbcoll.hpp>

namespace {

using tbcoll::Communicator;
using tbcoll::DataType;

// Every failure reaches dllama as the exception type its loops handle, with tbcoll's message (which names the
// rank, the call and the peer) and how ranks map onto nodes.
[[noreturn]] void fail(const std::string &what) {
  throw NnTransferSocketException(0, "tbcoll: " + what + " (tbcoll rank N is dllama node N; node 0 is the root)");
}

enum class SliceMode { kGather, kReduce };

SliceMode slice_mode(NnUint nodes) {
  const char *setting = std::getenv("DLLAMA_TBCOLL_SLICES");
  const std::string mode = setting != nullptr ? setting : "auto";
  if (mode == "gather") return SliceMode::kGather;
  if (mode == "reduce") return SliceMode::kReduce;
  if (mode != "auto" && !mode.empty()) {
    throw std::invalid_argument("DLLAMA_TBCOLL_SLICES=" + mode + ": expected gather, reduce or auto");
  }
  return nodes >= 4 ? SliceMode::kReduce : SliceMode::kGather;
}

// What travels on the control communicator: a packet for the next forward, or a keepalive.
struct ControlFrame {
  uint32_t kind;  // kPacket or kKeepalive
  uint32_t bytes;
  unsigned char packet[24];
};
constexpr uint32_t kPacket = 1, kKeepalive = 2;

class Session;

class Synchronizer : public NnNodeSynchronizer {
 public:
  Synchronizer(Session *session, Communicator *data, NnNetExecution *execution, NnNetConfig *netConfig,
               NnNodeConfig *nodeConfig);
  void sync(NnUint segmentIndex, NnUint nThreads, NnUint threadIndex) override;

 private:
  void slices(NnByte *pipe, NnSize rowBytes, NnUint rows, bool toRootOnly);
  void reduceSlices(NnByte *pipe, NnSize rowBytes, NnUint rows);

  Session *session_;
  Communicator *data_;
  NnNetExecution *execution_;
  NnNetConfig *netConfig_;
  NnNodeConfig *nodeConfig_;
  NnUint node_, nodes_;
  SliceMode mode_;
  NnUint lastSyncSegment_ = 0;  // the forward's last sync: the root is idle once it is done
  std::vector<NnByte> packed_, gathered_;
};

class Session : public TbcollSync {
 public:
  Session(const tbcoll::UniqueId &id, NnUint node, NnUint nodes) : node_(node), nodes_(nodes) {
    tbcoll::Config config = tbcoll::Config::from_env();
    data_ = Communicator::init(id, static_cast<int>(node), static_cast<int>(nodes), config);
    std::optional<Communicator> control = data_->split(0, static_cast<int>(node));
    control_ = std::move(*control);
    // A keepalive every quarter of the deadline; none when there is no deadline.
    if (node_ == 0 && config.timeout_s < 1e8) {
      keepalive_every_ = std::chrono::duration<double>(config.timeout_s / 4);
      heartbeat_ = std::thread([this] { beat(); });
    }
  }
  ~Session() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  NnNodeSynchronizer *synchronizer(NnNetExecution *execution, NnNetConfig *netConfig,
                                   NnNodeConfig *nodeConfig) override {
    return new Synchronizer(this, &*data_, execution, netConfig, nodeConfig);
  }

  void sendControl(const void *packet, NnSize bytes, bool forwardFollows) override {
    sendFrame(kPacket, packet, bytes, forwardFollows);
  }

  void receiveControl(void *packet, NnSize bytes) override {
    ControlFrame frame{};
    do {
      try {
        control_->recv(&frame, sizeof(frame), DataType::kUint8, 0);
      } catch (const tbcoll::Error &error) {
        fail(error.what());
      }
    } while (frame.kind == kKeepalive);
    if (frame.kind != kPacket || frame.bytes != bytes) fail("unexpected control frame from the root");
    std::memcpy(packet, frame.packet, bytes);
  }

  /// The root's forward is over (its last sync done): keepalives may go again.
  void forwardDone() {
    std::lock_guard<std::mutex> lock(mutex_);
    inForward_ = false;
    lastSent_ = std::chrono::steady_clock::now();
  }
  /// A sync failed: no more keepalives (the job is broken), and the control communicator is aborted with the
  /// reason, so a worker waiting there for the root's next packet names the node that failed, not the root.
  void broken(const std::string &reason) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    control_->abort("data communicator failed: " + reason);
  }

 private:
  // During a forward no keepalive may go (the workers are in their syncs, not reading the control
  // communicator); before the first packet neither (they are still reading the weights from dllama's socket).
  void sendFrame(uint32_t kind, const void *packet, NnSize bytes, bool forwardFollows) {
    ControlFrame frame{};
    if (bytes > sizeof(frame.packet)) fail("control packet of " + std::to_string(bytes) + " bytes");
    frame.kind = kind;
    frame.bytes = static_cast<uint32_t>(bytes);
    std::memcpy(frame.packet, packet, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!heartbeatError_.empty()) fail(heartbeatError_);
    try {
      toWorkers(frame);
    } catch (const tbcoll::Error &error) {
      stopping_ = true;
      fail(error.what());
    }
    started_ = true;
    inForward_ = forwardFollows;
    lastSent_ = std::chrono::steady_clock::now();
  }

  // Straight to every worker (no tree: a worker that waits for the root names the root when it fails).
  void toWorkers(const ControlFrame &frame) {
    control_->group_start();
    for (NnUint node = 1; node < nodes_; node++) {
      control_->send(&frame, sizeof(frame), DataType::kUint8, static_cast<int>(node));
    }
    control_->group_end();
  }

  void beat() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, keepalive_every_ / 4);
      if (stopping_ || !started_ || inForward_ || std::chrono::steady_clock::now() - lastSent_ < keepalive_every_) continue;
      ControlFrame frame{};
      frame.kind = kKeepalive;
      try {
        toWorkers(frame);
        lastSent_ = std::chrono::steady_clock::now();
      } catch (const tbcoll::Error &error) {
        heartbeatError_ = error.what();  // told at the next sendControl
        return;
      }
    }
  }

  NnUint node_, nodes_;
  std::optional<Communicator> data_, control_;
  std::mutex mutex_;  // control_ and the fields below (control_ is used by the caller and the heartbeat)
  std::condition_variable wake_;
  std::thread heartbeat_;
  std::chrono::duration<double> keepalive_every_{0};
  std::chrono::steady_clock::time_point lastSent_ = std::chrono::steady_clock::now();
  bool started_ = false, inForward_ = false, stopping_ = false;
  std::string heartbeatError_;
};

Synchronizer::Synchronizer(Session *session, Communicator *data, NnNetExecution *execution, NnNetConfig *netConfig,
                           NnNodeConfig *nodeConfig)
    : session_(session),
      data_(data),
      execution_(execution),
      netConfig_(netConfig),
      nodeConfig_(nodeConfig),
      node_(nodeConfig->nodeIndex),
      nodes_(netConfig->nNodes),
      mode_(slice_mode(netConfig->nNodes)) {
  for (NnUint segment = 0; segment < nodeConfig->nSegments; segment++) {
    if (nodeConfig->segments[segment].nSyncs > 0) lastSyncSegment_ = segment;
  }
}

// Called by every executor thread after a segment with syncs; thread 0 makes the calls (one per sync), the
// others go on to the executor's own wait for the step's end.
void Synchronizer::sync(NnUint segmentIndex, NnUint, NnUint threadIndex) {
  if (threadIndex != 0) return;
  const NnSegmentConfig &segment = nodeConfig_->segments[segmentIndex];
  const NnUint rows = execution_->batchSize;
  try {
    for (NnUint i = 0; i < segment.nSyncs; i++) {
      const NnSyncConfig &sync = segment.syncs[i];
      NnByte *pipe = execution_->pipes[sync.pipeIndex];
      const NnSize3D &size = netConfig_->pipes[sync.pipeIndex].size;
      const NnSize rowBytes = getBytes(size.floatType, size.x);
      if (sync.syncType == SYNC_WITH_ROOT) {
        data_->broadcast(pipe, pipe, rows * rowBytes, DataType::kUint8, 0);
      } else if (sync.syncType == SYNC_NODE_SLICES && mode_ == SliceMode::kReduce && size.floatType == F_32) {
        reduceSlices(pipe, rowBytes, rows);
      } else if (sync.syncType == SYNC_NODE_SLICES || sync.syncType == SYNC_NODE_SLICES_EXCEPT_ROOT) {
        slices(pipe, rowBytes, rows, sync.syncType == SYNC_NODE_SLICES_EXCEPT_ROOT);
      } else {
        throw std::invalid_argument("unknown sync type " + std::to_string(sync.syncType));
      }
    }
  } catch (const tbcoll::Error &error) {
    session_->broken(error.what());
    throw std::runtime_error(std::string("tbcoll: ") + error.what() +
                             " (tbcoll rank N is dllama node N; node 0 is the root)");
  }
  if (segmentIndex == lastSyncSegment_ && node_ == 0) session_->forwardDone();
}

// Row r of the pipe holds nodes_ slices; node n's is slice n. One row: in place. Several (a prefill batch):
// this node's slices packed, one call, the others' unpacked where they belong.
void Synchronizer::slices(NnByte *pipe, NnSize rowBytes, NnUint rows, bool toRootOnly) {
  const NnSize slice = rowBytes / nodes_;
  if (rows == 1) {
    if (toRootOnly) {
      data_->gather(pipe + node_ * slice, pipe, slice, DataType::kUint8, 0);
    } else {
      data_->all_gather(pipe + node_ * slice, pipe, slice, DataType::kUint8);
    }
    return;
  }
  packed_.resize(rows * slice);
  gathered_.resize(nodes_ * rows * slice);
  for (NnUint r = 0; r < rows; r++) std::memcpy(&packed_[r * slice], pipe + r * rowBytes + node_ * slice, slice);
  if (toRootOnly) {
    data_->gather(packed_.data(), gathered_.data(), rows * slice, DataType::kUint8, 0);
    if (node_ != 0) return;
  } else {
    data_->all_gather(packed_.data(), gathered_.data(), rows * slice, DataType::kUint8);
  }
  for (NnUint n = 0; n < nodes_; n++) {
    for (NnUint r = 0; r < rows; r++) {
      std::memcpy(pipe + r * rowBytes + n * slice, &gathered_[(n * rows + r) * slice], slice);
    }
  }
}

void Synchronizer::reduceSlices(NnByte *pipe, NnSize rowBytes, NnUint rows) {
  const NnSize slice = rowBytes / nodes_;
  const size_t floats = slice / sizeof(float);
  if (rows == 1) {
    data_->all_reduce(pipe + node_ * slice, pipe, floats, DataType::kFloat32, tbcoll::ReduceOp::kSum);
    std::memset(pipe + slice, 0, rowBytes - slice);
    return;
  }
  packed_.resize(rows * slice);
  for (NnUint r = 0; r < rows; r++) std::memcpy(&packed_[r * slice], pipe + r * rowBytes + node_ * slice, slice);
  data_->all_reduce(packed_.data(), packed_.data(), rows * floats, DataType::kFloat32, tbcoll::ReduceOp::kSum);
  for (NnUint r = 0; r < rows; r++) {
    std::memcpy(pipe + r * rowBytes, &packed_[r * slice], slice);
    std::memset(pipe + r * rowBytes + slice, 0, rowBytes - slice);
  }
}

// The choice travels after the node config: a length, then that many bytes of unique id (0: dllama's sockets).
std::unique_ptr<TbcollSync> start(const std::string &id, NnUint node, NnUint nodes) {
  try {
    return std::unique_ptr<TbcollSync>(new Session(tbcoll::UniqueId::from_string(id), node, nodes));
  } catch (const tbcoll::Error &error) {
    fail(error.what());
  }
}

class TimedSynchronizer : public NnNodeSynchronizer {
 public:
  explicit TimedSynchronizer(NnNodeSynchronizer *inner) : inner_(inner) {}
  ~TimedSynchronizer() override {
    std::fprintf(stderr, "dllama sync: %llu calls, %.0f us in syncs\n", static_cast<unsigned long long>(calls_),
                 std::chrono::duration<double, std::micro>(spent_).count());
  }
  void sync(NnUint segmentIndex, NnUint nThreads, NnUint threadIndex) override {
    if (threadIndex != 0) {
      inner_->sync(segmentIndex, nThreads, threadIndex);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    inner_->sync(segmentIndex, nThreads, threadIndex);
    spent_ += std::chrono::steady_clock::now() - start;
    ++calls_;
  }

 private:
  std::unique_ptr<NnNodeSynchronizer> inner_;
  std::chrono::steady_clock::duration spent_{0};
  uint64_t calls_ = 0;
};

}  // namespace

NnNodeSynchronizer *timeSyncs(NnNodeSynchronizer *synchronizer) {
  const char *setting = std::getenv("DLLAMA_SYNC_STATS");
  if (setting == nullptr || std::strcmp(setting, "1") != 0) return synchronizer;
  return new TimedSynchronizer(synchronizer);
}

std::unique_ptr<TbcollSync> TbcollSync::offer(NnNetwork *network, NnUint nNodes, bool useTbcoll) {
  std::string id;
  if (useTbcoll) {
    try {
      id = tbcoll::UniqueId::create().to_string();
    } catch (const tbcoll::Error &error) {
      fail(error.what());
    }
  }
  const NnUint length = static_cast<NnUint>(id.size());
  for (NnUint socket = 0; socket < nNodes - 1; socket++) {
    network->write(socket, &length, sizeof(length));
    if (length > 0) network->write(socket, id.data(), length);
  }
  return useTbcoll ? start(id, 0, nNodes) : nullptr;
}

std::unique_ptr<TbcollSync> TbcollSync::accept(NnNetwork *network, NnUint nodeIndex, NnUint nNodes) {
  NnUint length = 0;
  network->read(ROOT_SOCKET_INDEX, &length, sizeof(length));
  if (length == 0) return nullptr;
  if (length > 4096) fail("the root sent a unique id of " + std::to_string(length) + " bytes");
  std::string id(length, '\0');
  network->read(ROOT_SOCKET_INDEX, &id[0], length);
  return start(id, nodeIndex, nNodes);
}
