// shm context: ranks on the same host exchange messages through POSIX shared memory.
//
// Set-up: each rank creates its segment (named after its pid, the communicator and its rank) and publishes
// the name; every peer maps it and counts itself in the segment's mapped_by; once all peers have, the owner
// unlinks the name, so nothing is left in /dev/shm even if the job is killed later. Segments of ranks killed
// during set-up carry a dead pid in their name: their peers remove them when the set-up fails, tbcoll-run when
// the job ends, and the next context created on the machine in any case.
#include <sys/mman.h>
#include <unistd.h>

#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/env.h"
#include "common/log.h"
#include "common/time.h"
#include "platform/platform.h"
#include "transports/shm/context.h"
#include "transports/shm/endpoint.h"
#include "transports/shm/fast_path.h"
#include "transports/shm/process_watch.h"
#include "transports/shm/stale_segments.h"

namespace tbcoll::shm {
namespace {

class Context final : public transport::Context {
 public:
  explicit Context(const transport::ContextArgs& args) : args_(args) {
    remove_stale_segments();
    name_ = segment_name(static_cast<int>(getpid()), args.comm_id, args.rank);
    mapping_ = Mapping::create(name_, segment_bytes(args.world_size));
    SegmentHeader* header = mapping_.header();
    header->magic = kSegmentMagic;
    header->version = kSegmentVersion;
    header->comm_id = args.comm_id;
    header->owner_rank = args.rank;
    header->world_size = args.world_size;
    header->owner_pid = static_cast<int32_t>(getpid());
    // A word peers try to read with a cross-memory read (platform::read_process_memory) at set-up, to learn whether direct collectives work.
    DirectControl& direct = collective_area(mapping_.base(), args.world_size)->direct;
    direct.probe = kSegmentMagic;
    direct.send_addr = reinterpret_cast<uint64_t>(&direct.probe);
  }

  ~Context() override {
    if (mapping_.base() != nullptr) mapping_.header()->closed.store(1, std::memory_order_release);
    if (!unlinked_) {  // set-up failed: perhaps because a peer died, leaving its segment
      platform::shm_remove(name_);
      remove_stale_segments();
    }
  }

  std::string address() const override { return name_; }

  std::vector<std::unique_ptr<transport::Endpoint>> connect(const std::vector<transport::PeerAddress>& peers,
                                                            Deadline deadline) override {
    map_peers(peers);
    const bool can_read_all = probe_cross_memory_reads(peers);
    DirectControl& mine = collective_area(mapping_.base(), args_.world_size)->direct;
    mine.cma_ok.store(can_read_all ? 1 : 2, std::memory_order_release);
    std::vector<ProcessWatch> processes;
    for (size_t i = 0; i < peers.size(); ++i) processes.emplace_back(peer_mappings_[i].header()->owner_pid);
    wait_until_mapped(peers, processes, deadline);
    platform::shm_remove(name_);
    unlinked_ = true;
    // Every peer's answer is awaited whatever ours: it also says the peer finished its part of the set-up.
    const bool every_peer_can = every_peer_reads_all(peers, processes, deadline);
    const bool direct = can_read_all && every_peer_can;
    if (static_cast<int>(peers.size()) == args_.world_size - 1) make_fast_path(peers, direct);
    std::vector<std::unique_ptr<transport::Endpoint>> out;
    for (size_t i = 0; i < peers.size(); ++i) {
      int peer = peers[i].rank;
      void* remote = peer_mappings_[i].base();
      out.push_back(std::make_unique<Endpoint>(args_.rank, peer, queue_at(mapping_.base(), peer),
                                               queue_at(remote, args_.rank), mapping_.header(),
                                               peer_mappings_[i].header()));
    }
    return out;
  }

  void abort() override { mapping_.header()->closed.store(1, std::memory_order_release); }
  transport::CollectiveFastPath* fast_path() override { return fast_path_.get(); }

 private:
  // Maps every peer's segment, checked to be this communicator's and its owner's, and counts this rank in it.
  void map_peers(const std::vector<transport::PeerAddress>& peers) {
    const size_t bytes = segment_bytes(args_.world_size);
    for (const auto& peer : peers) {
      Mapping mapping = Mapping::open(peer.address, bytes);
      SegmentHeader* header = mapping.header();
      if (header->magic != kSegmentMagic || header->version != kSegmentVersion || header->comm_id != args_.comm_id ||
          header->owner_rank != peer.rank || header->world_size != args_.world_size) {
        throw RemoteError(fmt::format("[shm] rank {}: segment {} of peer {} does not belong to this communicator",
                                      args_.rank, peer.address, peer.rank));
      }
      const std::string impostor = owner_pid_problem(header->owner_pid, peer.info.process_id);
      if (!impostor.empty()) {
        throw RemoteError(fmt::format("[shm] rank {}: segment {} of peer {} {}: not the peer's", args_.rank,
                                      peer.address, peer.rank, impostor));
      }
      header->mapped_by.fetch_add(1, std::memory_order_acq_rel);
      peer_mappings_.push_back(std::move(mapping));
    }
  }

  // Cross-memory attach: can we read every peer's memory? (ptrace rules decide; root or same-uid with a
  // permissive yama scope can.) Each rank publishes its answer; the direct paths run only if all said yes.
  bool probe_cross_memory_reads(const std::vector<transport::PeerAddress>& peers) {
    bool can_read_all = env::Settings(args_.knobs).get("TBCOLL_SHM_CMA") != "0";
    for (size_t i = 0; can_read_all && i < peers.size(); ++i) {
      const DirectControl& theirs = collective_area(peer_mappings_[i].base(), args_.world_size)->direct;
      uint64_t probe = 0;
      try {
        FastPath::read_peer(peer_mappings_[i].header()->owner_pid, theirs.send_addr, &probe, sizeof(probe), args_.rank,
                            peers[i].rank);
      } catch (const IoError& error) {
        log::info("{} (direct shared-memory collectives disabled)", error.what());
      }
      can_read_all &= probe == kSegmentMagic;
    }
    return can_read_all;
  }

  // A peer that died or closed during set-up fails it at once, naming the peer, instead of at the deadline.
  void check_peers(const std::vector<transport::PeerAddress>& peers, std::vector<ProcessWatch>& processes) {
    for (size_t i = 0; i < peers.size(); ++i) {
      const SegmentHeader* header = peer_mappings_[i].header();
      const bool dead = processes[i].exited();
      if (dead || header->closed.load(std::memory_order_acquire) != 0) {
        // A dead peer cannot unlink its segment, and not yet reaped (a zombie) the sweeps by pid keep it.
        if (dead) platform::shm_remove(peers[i].address);
        throw IoError(fmt::format("[shm] rank {}: peer {} (pid {}) {} during set-up", args_.rank, peers[i].rank,
                                  header->owner_pid, dead ? "died" : "closed its end"));
      }
    }
  }

  // Waits until every peer mapped our segment. A peer that published its cross-memory answer has mapped every
  // segment, so those that did not are the ones to name.
  void wait_until_mapped(const std::vector<transport::PeerAddress>& peers, std::vector<ProcessWatch>& processes,
                         Deadline deadline) {
    for (unsigned polls = 1; mapping_.header()->mapped_by.load(std::memory_order_acquire) < peers.size(); ++polls) {
      if (Clock::now() >= deadline) {
        std::vector<int> missing;
        for (size_t i = 0; i < peers.size(); ++i) {
          const DirectControl& theirs = collective_area(peer_mappings_[i].base(), args_.world_size)->direct;
          if (theirs.cma_ok.load(std::memory_order_acquire) == 0) missing.push_back(peers[i].rank);
        }
        throw TimeoutError(fmt::format("[shm] rank {}: only {} of {} peers mapped segment {} before the deadline "
                                       "(still setting up: peer(s) {})",
                                       args_.rank, mapping_.header()->mapped_by.load(), peers.size(), name_,
                                       fmt::join(missing, ", ")));
      }
      if (polls % 50 == 0) {  // every ~10 ms
        check_peers(peers, processes);
        check_cancelled(args_.cancelled, fmt::format("[shm] rank {}", args_.rank));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Whether every peer said it can read every segment's owner's memory (each publishes its answer).
  bool every_peer_reads_all(const std::vector<transport::PeerAddress>& peers, std::vector<ProcessWatch>& processes,
                            Deadline deadline) {
    bool all = true;
    for (size_t i = 0; i < peers.size(); ++i) {
      const DirectControl& theirs = collective_area(peer_mappings_[i].base(), args_.world_size)->direct;
      uint32_t answer;
      for (unsigned polls = 1; (answer = theirs.cma_ok.load(std::memory_order_acquire)) == 0; ++polls) {
        if (Clock::now() >= deadline) {
          throw TimeoutError(fmt::format("[shm] rank {}: peer {} did not finish set-up before the deadline", args_.rank,
                                         peers[i].rank));
        }
        if (polls % 100 == 0) {
          check_peers(peers, processes);
          check_cancelled(args_.cancelled, fmt::format("[shm] rank {}", args_.rank));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      all &= answer == 1;
    }
    return all;
  }

  // Every rank is reachable through shared memory: offer the one-shot collectives.
  void make_fast_path(const std::vector<transport::PeerAddress>& peers, bool direct) {
    std::vector<CollectiveArea*> areas(args_.world_size);
    std::vector<SegmentHeader*> headers(args_.world_size);
    areas[args_.rank] = collective_area(mapping_.base(), args_.world_size);
    headers[args_.rank] = mapping_.header();
    for (size_t i = 0; i < peers.size(); ++i) {
      areas[peers[i].rank] = collective_area(peer_mappings_[i].base(), args_.world_size);
      headers[peers[i].rank] = peer_mappings_[i].header();
    }
    const env::Settings settings(args_.knobs);
    auto knob = [&](const char* name) { return static_cast<size_t>(std::max<long long>(0, settings.get_int(name))); };
    FastPathTuning tuning;
    tuning.one_shot_max_bytes = knob("TBCOLL_ONESHOT_MAX_BYTES");
    tuning.two_shot_above_bytes = knob("TBCOLL_DIRECT_MAX_BYTES");
    tuning.cma_min_bytes = knob("TBCOLL_CMA_MIN_BYTES");
    tuning.cma_max_bytes = knob("TBCOLL_CMA_MAX_BYTES");
    tuning.cma_gather_min_bytes = knob("TBCOLL_CMA_GATHER_MIN_BYTES");
    fast_path_ = std::make_unique<FastPath>(args_.rank, std::move(areas), std::move(headers), direct, tuning);
  }

  transport::ContextArgs args_;
  std::string name_;
  Mapping mapping_;
  std::vector<Mapping> peer_mappings_;
  std::unique_ptr<FastPath> fast_path_;  // declared after the mappings it points into: destroyed first
  bool unlinked_ = false;
};

}  // namespace

std::unique_ptr<transport::Context> make_context(const transport::ContextArgs& args) {
  return std::make_unique<Context>(args);
}

}  // namespace tbcoll::shm
