// Shared-memory layout of the shm transport. Each rank creates one segment holding its outgoing queues, one
// per peer; peers map it read-write and consume from their queue. Names carry the owner's pid so segments
// of dead jobs can be found and removed; a segment is unlinked as soon as every peer has mapped it.
//
//   Segment  = SegmentHeader | Queue[world_size]         (queue r: from the owner to rank r; own one unused)
//   Queue    = head (producer) | tail (consumer) | waiting flags | Frame[kFrames]
//   Frame    = FrameHeader (64 B) | payload (kFrameBytes)
//
// A message is one or more consecutive frames; the first carries tag, meta and the message size. The producer
// writes a frame, then publishes it by advancing head (release); the consumer reads head (acquire), copies
// out, then advances tail (release). One producer and one consumer per queue: no locks, no RMW on the path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <string>

#include <sys/types.h>

#include "platform/platform.h"

namespace tbcoll::shm {

constexpr uint32_t kSegmentMagic = 0x5442534d;  // "TBSM"
constexpr uint32_t kSegmentVersion = 5;  // 2: call announcement, flagged slots, two-shot buffers; 3: abandoned;
                                         // 4, 5: a rank waiting both ways sleeps on its doorbell
constexpr size_t kFrames = 16;
constexpr size_t kFrameBytes = 32 * 1024;

struct alignas(64) FrameHeader {
  uint64_t tag;
  uint64_t meta;
  uint64_t message_bytes;  ///< total size of the message this frame starts (first frame only)
  uint32_t frame_bytes;    ///< payload bytes in this frame
  uint32_t first;          ///< 1 on the first frame of a message
};

struct Frame {
  FrameHeader header;
  uint8_t payload[kFrameBytes];
};

// Queue::consumer_sleeping / producer_sleeping: where a sleeping end waits. On the queue's own head (consumer) or
// tail (producer), which the other end changes before it wakes it; or, for a rank waiting to send and to receive
// at once, on the doorbell of its outgoing queue, which the peer rings (increments, then wakes) after publishing
// frames to it or freeing frames of it.
enum Sleep : uint32_t { kAwake = 0, kAsleepOnCounter = 1, kAsleepOnDoorbell = 2 };

// Fields written by different ranks sit on cache lines of their own (kLine: 128 B on Apple's M-series).
constexpr size_t kLine = platform::kCacheLineBytes;

struct Queue {
  alignas(kLine) std::atomic<uint64_t> head;  ///< frames published by the producer
  alignas(kLine) std::atomic<uint64_t> tail;  ///< frames consumed by the consumer
  alignas(kLine) std::atomic<uint32_t> consumer_sleeping;  ///< a Sleep: the consumer waits (sleep_on)
  std::atomic<uint32_t> producer_sleeping;                  ///< a Sleep: the producer waits (sleep_on)
  alignas(kLine) std::atomic<uint64_t> doorbell;            ///< rung for the producer's rank (kAsleepOnDoorbell)
  alignas(kLine) Frame frames[kFrames];
};

// One-shot collectives: each rank writes its input into its own slot and reads everyone else's. The first
// 32 bytes of data share the cache line of seq, so a small all-reduce moves one line per peer.
constexpr size_t kSlotBytes = 64 * 1024;

struct alignas(64) CollectiveSlot {
  std::atomic<uint64_t> seq;         ///< call number whose input is in data (written last, release)
  uint64_t tag;                      ///< the communicator's tag of that call (to spot a peer in another call)
  uint64_t meta;                     ///< the call's signature
  uint32_t bytes;
  std::atomic<uint32_t> sleepers;    ///< readers asleep on seq (the writer wakes them)
  uint8_t data[kSlotBytes];
};
static_assert(offsetof(CollectiveSlot, data) == 32, "32 bytes of data share the first cache line");

// Flagged lines for the smallest one-shot calls (as NCCL's LL protocols): every cache line carries 56 bytes
// of the message and the call number, stored after the payload (release), so a reader that polls all lines
// of a message at once fetches them in parallel and needs no second round trip for the data. The stream is
// the call's signature (8 bytes) followed by the input.
constexpr size_t kLineBytes = 56;
constexpr size_t kFlaggedLines = 64;
constexpr size_t kFlaggedMaxBytes = kFlaggedLines * kLineBytes - 8;  ///< largest input (3576 B)

struct alignas(64) FlaggedLine {
  uint8_t payload[kLineBytes];
  std::atomic<uint64_t> flag;  ///< call number whose bytes the payload holds
};
static_assert(sizeof(FlaggedLine) == 64, "one cache line");

struct alignas(64) FlaggedSlot {
  FlaggedLine lines[kFlaggedLines];
};

// Direct (cross-memory attach) collectives: each rank posts the addresses of its buffers; peers read them
// with platform::read_process_memory, without any copy through the segment.
struct alignas(64) DirectControl {
  std::atomic<uint64_t> posted;    ///< call k: the addresses below are valid
  std::atomic<uint64_t> reduced;   ///< call k: this rank's slice of recv holds final values
  std::atomic<uint64_t> done;      ///< call k: this rank finished reading everyone's buffers
  std::atomic<uint64_t> abandoned; ///< call k: this rank left it with an error; its buffers may be reused
  std::atomic<uint32_t> sleepers;  ///< peers asleep on one of the counters above
  std::atomic<uint32_t> cma_ok;    ///< set up: 1 = this rank can read every peer, 2 = it cannot
  uint64_t send_addr;
  uint64_t recv_addr;
  uint64_t tag;
  uint64_t meta;
  uint64_t bytes;
  uint64_t probe;  ///< kSegmentMagic, read by peers at set-up to test cross-memory access
};

// Two-shot all-reduce through the segment (see fast_path.h): the vector is cut into rounds of world_size
// slices; in round g a rank stages the slices its peers reduce into stage[g & 1], reduces its own slice from
// everyone's stage into result[g & 1], and peers copy that result out.
constexpr size_t kStageBytes = 512 * 1024;    ///< one round's staged input (world_size slices)
constexpr size_t kMaxSliceBytes = 128 * 1024;  ///< largest slice one rank reduces per round

struct alignas(64) TwoShotControl {
  std::atomic<uint64_t> input;                 ///< round g: stage[g & 1] holds this rank's input (release)
  alignas(kLine) std::atomic<uint64_t> reduced;   ///< round g: result[g & 1] holds this rank's reduced slice
  alignas(kLine) std::atomic<uint32_t> sleepers;  ///< peers asleep on input or reduced
  uint64_t meta[2];                            ///< signature of the call round g belongs to, in meta[g & 1]
  uint64_t bytes[2];                           ///< that call's size in bytes
};

// The collective a rank is in and how it runs it (announce.h), so a peer stuck waiting in another call or another
// algorithm can name the mismatch. Written as a seqlock: tag = 0, meta, algorithm, tag (release).
struct alignas(64) CallAnnounce {
  std::atomic<uint64_t> tag;
  std::atomic<uint64_t> meta;
  std::atomic<uint64_t> algorithm;  ///< a CallAlgorithm (announce.h)
};

struct CollectiveArea {
  CallAnnounce call;
  FlaggedSlot flagged[2];   ///< double buffer like slots, for inputs up to kFlaggedMaxBytes
  alignas(kLine) std::atomic<uint32_t> flagged_sleepers;  ///< readers asleep on a flagged slot's last line
  CollectiveSlot slots[2];  ///< double buffer: call k uses slot k & 1
  DirectControl direct;
  TwoShotControl two_shot;
  alignas(64) uint8_t stage[2][kStageBytes];
  alignas(64) uint8_t result[2][kMaxSliceBytes];
};

struct alignas(64) SegmentHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  int32_t owner_rank;
  int32_t world_size;
  int32_t owner_pid;
  std::atomic<uint32_t> mapped_by;  ///< peers that mapped this segment (the owner unlinks it at world_size-1)
  std::atomic<uint32_t> closed;     ///< owner aborted or went away: peers fail their pending operations
};

inline size_t segment_bytes(int world_size) {
  return sizeof(SegmentHeader) + static_cast<size_t>(world_size) * sizeof(Queue) + sizeof(CollectiveArea);
}

inline CollectiveArea* collective_area(void* base, int world_size) {
  return reinterpret_cast<CollectiveArea*>(static_cast<uint8_t*>(base) + sizeof(SegmentHeader) +
                                           static_cast<size_t>(world_size) * sizeof(Queue));
}

inline Queue* queue_at(void* base, int index) {
  return reinterpret_cast<Queue*>(static_cast<uint8_t*>(base) + sizeof(SegmentHeader)) + index;
}

/// platform::shm_name of the owner pid and a hash of comm id and rank: at most 31 characters, with the owner in
/// it (stale_segments.h removes those of dead owners)
std::string segment_name(int pid, uint64_t comm_id, int rank);

/// Why a segment file owned by `owner` with `mode` is not one a rank of euid `us` may map ("" when it may): it must
/// be ours (st_uid == euid) and closed to group and others (mode & 077 == 0), as shm_create makes them. Another user
/// could otherwise plant a segment under a peer's name, or read and write ours.
std::string ownership_problem(uid_t owner, mode_t mode, uid_t us);
/// Why a segment whose header names owner_pid is not the one of the peer whose rendezvous record gave
/// peer_process_id (pid << 32 ^ a nonce; 0: unknown, not checked); "" when it is.
std::string owner_pid_problem(int32_t owner_pid, uint64_t peer_process_id);

/// A mapping of a segment; unmaps on destruction.
class Mapping {
 public:
  /// Creates (owner) or opens (peer) the named segment and maps it. Throws IoError with the name; open() also when
  /// the segment is not ours (ownership_problem).
  static Mapping create(const std::string& name, size_t bytes);
  static Mapping open(const std::string& name, size_t bytes);
  Mapping() = default;
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  ~Mapping();
  void* base() const { return base_; }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }

 private:
  Mapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  static Mapping map(int fd, size_t bytes, const std::string& name);
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

/// Sleeps on the low 32 bits of a counter in shared memory (platform::wait_on_address: returns on change, wake,
/// timeout or spuriously); wakes all sleepers.
void sleep_on(const std::atomic<uint64_t>* counter, uint64_t expected, long timeout_us);
void wake_sleepers(const std::atomic<uint64_t>* counter);

}  // namespace tbcoll::shm
