// What travels on an ibverbs connection: two lanes, each a queue pair, and on each every SEND lands in one posted
// receive of the same size, so a send and its receive always cover the same number of 4 KiB frames, as Apple's
// Thunderbolt stack requires.
//
//   small lane: frames of 4 KiB   = Header (64 B) | payload (up to 4032 B)      small messages, tails, credits
//   bulk lane:  slots of S bytes  = Header (64 B) | payload (up to S - 64 B)    large messages, always sent full
//               or, noted (zero-copy on at both ends), payload (up to S B) with a kSlotNote frame on the small lane
//
// S (64-512 KiB: slot_bytes_for) is agreed at connection time (the smaller of both ends'). A message (one isend)
// is numbered per endpoint and direction (the k-th send meets the k-th receive), and every frame or slot says which
// message it belongs to and where its payload goes in it, so the pieces of one message may travel on both lanes
// and over several connections (rails: one per cable between the two ranks) and meet at the receiver in any order.
// A message's part on one connection goes as whole slots, then its tail in frames (split_lanes); a message smaller
// than half a slot goes in frames only, so a small message never waits behind a slot's worth of wire.
//
// Every frame and slot carries its lane's sequence number for its direction (UC may drop one: a gap is reported,
// never papered over), the credits its sender returns on both lanes (receives reposted since its last report), and
// a checksum of the header; a sum of the payload only when the sender was asked for one (TBCOLL_IB_PAYLOAD_SUM=1,
// kSummed): UC loss is caught by the sequence numbers either way, and the link checks the payload's CRC.
//
// The side channel (a TCP socket per connection) carries the handshake, then only Notices (a communicator aborted,
// the process going away, frame counts for UC loss detection):
//
//   dialer   -> acceptor : Hello | token            (queue pair numbers, GID, MTU, depths, slot size, port keys)
//   with a job secret, auth::initiate/respond over side_channel_context(token, dialer's key, acceptor's key)
//   acceptor -> dialer   : Hello | token
//
// The proof binds the two ports' keys, which name each end's process, world rank, device and a per-port nonce (as
// tcp's binds ranks and communicator): a relay that sends a dialer's exchange to another port than the one it
// dialed gets proofs that do not hold there.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tbcoll::ibverbs::wire {

constexpr size_t kFrameBytes = 4096;
constexpr uint16_t kMagic = 0x7462;  // "tb"
constexpr uint16_t kVersion = 6;

enum class FrameKind : uint8_t { kData = 1, kCredit = 2, kSlotNote = 3 };
enum FrameFlags : uint8_t { kFirst = 1, kLast = 2, kSummed = 4 };
enum Lane : int { kSmall = 0, kBulk = 1 };
constexpr int kLanes = 2;

struct Header {
  uint16_t magic = kMagic;
  uint8_t kind = 0;
  uint8_t flags = 0;
  uint32_t seq = 0;           ///< per connection, lane and direction, from 0
  uint16_t credits = 0;       ///< small-lane receives the sender reposted since its last report
  uint16_t bulk_credits = 0;  ///< bulk-lane receives likewise
  uint32_t payload = 0;       ///< payload bytes in this frame or slot
  uint32_t total = 0;         ///< the message's payload bytes, in every piece
  uint32_t offset = 0;        ///< where the payload goes in the message
  uint64_t comm_id = 0;       ///< the communicator (Context) the message belongs to
  uint64_t tag = 0;
  uint64_t meta = 0;
  uint64_t message = 0;       ///< the message's number on its endpoint and direction, from 0
  uint32_t payload_sum = 0;   ///< payload_sum() of the payload when kSummed
  uint32_t checksum = 0;      ///< of the 60 bytes before it
};
static_assert(sizeof(Header) == 64, "wire header layout");
constexpr size_t kPayloadBytes = kFrameBytes - sizeof(Header);

/// Folds bytes into 32 bits so that any single flipped bit changes the result: the 8-byte words (the tail
/// zero-padded) are summed mod 2^64 in four lanes by position (word i into lane i % 4 while 32-byte blocks last),
/// the lanes weighted 1, 3, 5, 7 (so words swapped between lanes show too), and the sum is reduced modulo the
/// prime kPayloadSumPrime. A flipped bit moves the 64-bit sum by an odd multiple of a power of two (plus wraps of
/// 2^64), which that prime never divides: PayloadSumCatchesAnyFlippedBit in tests/ibverbs/wire_test.cc checks
/// every case. It runs at memory speed (four adds per 32 bytes; one division).
constexpr uint64_t kPayloadSumPrime = 4294967279u;  // 2^32 - 17 (2^32 - 5 fails with weight 5)
constexpr uint64_t kPayloadSumWeights[4] = {1, 3, 5, 7};
inline uint64_t load_word(const uint8_t* at) {
  uint64_t word;
  std::memcpy(&word, at, sizeof(word));
  return word;
}
inline uint32_t payload_sum(const uint8_t* payload, size_t bytes) {
  // Four scalar accumulators loaded word by word: compilers keep them in registers at -O2 (a 32-byte block copied
  // into an array first went through the stack, six times slower).
  uint64_t lane0 = 0, lane1 = 0, lane2 = 0, lane3 = 0;
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    lane0 += load_word(payload + i);
    lane1 += load_word(payload + i + 8);
    lane2 += load_word(payload + i + 16);
    lane3 += load_word(payload + i + 24);
  }
  uint64_t sum = kPayloadSumWeights[0] * lane0 + kPayloadSumWeights[1] * lane1 + kPayloadSumWeights[2] * lane2 +
                 kPayloadSumWeights[3] * lane3;
  for (; i < bytes; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, payload + i, std::min<size_t>(8, bytes - i));
    sum += word;
  }
  return static_cast<uint32_t>(sum % kPayloadSumPrime);
}

/// The header's first 60 bytes folded as payload_sum does, unrolled for the fixed length and computed from the
/// fields (the same value: its little-endian words 0-3 are the four lanes, words 4-6 and the zero-padded last 4
/// bytes the tail), so any single flipped bit shows. Reading the fields, not the bytes, lets a header sealed right
/// after its fields were stored be read back without store-forwarding stalls.
inline uint32_t header_checksum(const Header& h) {
  static_assert(offsetof(Header, checksum) == 60 && offsetof(Header, comm_id) == 24, "the words of the header");
  const uint64_t word0 = h.magic | uint64_t{h.kind} << 16 | uint64_t{h.flags} << 24 | uint64_t{h.seq} << 32;
  const uint64_t word1 = h.credits | uint64_t{h.bulk_credits} << 16 | uint64_t{h.payload} << 32;
  const uint64_t word2 = h.total | uint64_t{h.offset} << 32;
  const uint64_t sum = kPayloadSumWeights[0] * word0 + kPayloadSumWeights[1] * word1 + kPayloadSumWeights[2] * word2 +
                       kPayloadSumWeights[3] * h.comm_id + h.tag + h.meta + h.message + h.payload_sum;
  return static_cast<uint32_t>(sum % kPayloadSumPrime) ^ 0x5eed1e55u;
}

inline void seal(Header& header) { header.checksum = header_checksum(header); }
inline bool intact(const Header& header) {
  return header.magic == kMagic && header.checksum == header_checksum(header);
}

/// Reads the header of a received frame or slot of `bytes` bytes into *header and says whether it can be trusted:
/// long enough for a header, header intact, payload within it and, when the sender summed it, matching its sum.
/// What the receiver checks before it looks at anything else (pure: fuzz/ibverbs_wire.cc runs it on any bytes).
inline bool decode_frame(const uint8_t* frame, size_t bytes, Header* header) {
  if (bytes < sizeof(Header)) return false;
  std::memcpy(header, frame, sizeof(Header));
  return intact(*header) && header->payload <= bytes - sizeof(Header) &&
         ((header->flags & kSummed) == 0 ||
          payload_sum(frame + sizeof(Header), header->payload) == header->payload_sum);
}

/// The largest message (Capabilities::max_message_bytes: the executor splits larger transfers).
constexpr size_t kMaxMessageBytes = 0xffffffffu;

/// Frames a message of `bytes` takes on the small lane alone (an empty message still sends one frame).
constexpr size_t frames_for(size_t bytes) { return bytes == 0 ? 1 : (bytes + kPayloadBytes - 1) / kPayloadBytes; }

/// Bulk slots: the sizes a connection may agree on, and the default for a provider: 512 KiB, and on Apple's librdma
/// from macOS 26.3 on (MLX's JACCL uses buffers above 4 KiB only under `__builtin_available(macOS 26.3)`); 0 before
/// that, or when the port's max_msg_sz is below a slot: 4 KiB frames only (a bulk lane then takes
/// TBCOLL_IB_SLOT_BYTES).
constexpr size_t kMinSlotBytes = 16384;
constexpr size_t kMaxSlotBytes = size_t{1} << 20;
inline size_t slot_bytes_for(bool apple, int macos_major, int macos_minor, uint32_t max_msg_bytes = 0) {
  if (max_msg_bytes != 0 && max_msg_bytes < kMinSlotBytes) return 0;
  if (!apple) return 512 * 1024;
  return macos_major > 26 || (macos_major == 26 && macos_minor >= 3) ? 512 * 1024 : 0;
}
/// Slots posted per direction for a slot size: about 1 MiB in flight, 2 to 16 slots (2 of 512 KiB, as JACCL keeps
/// 2 buffers in flight per peer; 8 of 128 KiB). Apple counts a queue's depth in 4 KiB frames, at most 4095: 2
/// slots of 512 KiB take 256.
constexpr int slots_for(size_t slot_bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t{1} << 20) / std::max<size_t>(slot_bytes, 1), 2, 16));
}

/// Noted bulk lanes: where both ends offer them (Hello's kHelloNotedBulk: zero-copy on at both ends), every bulk
/// slot has a small-lane frame (kSlotNote: a header as any data frame's, with the slot's offset and payload, and a
/// SlotNote) that says what the slot of that bulk sequence number is: a copied slot with its header, or a zero-copy
/// slot without one, which holds the message's bytes at that offset. That is what lets a slot go straight from
/// memory the caller registered (Context::register_memory): Apple's stack takes one SGE per send, so nothing of ours
/// can precede the caller's bytes, and only the note can tell such a slot apart. Slot and note may arrive in either
/// order (they travel on two queue pairs); the receiver numbers bulk completions in arrival order (a queue pair
/// delivers in order) and matches each with its note. Nothing is read from the SEND's length: a slot is always sent
/// whole (S bytes, spanning its receive's frames), and the completion's byte_len is only checked against the
/// receive's size (Apple's provider may round it). A zero-copy slot's source starts on a kZeroCopyAlign boundary and
/// carries S bytes of the message, so the next one starts aligned too (JACCL and llama.cpp only ever send whole
/// page-aligned buffers). On UC a lost slot lets the next one take its place: a copied slot's header then has
/// another sequence number than its note, and a zero-copy slot's note carries its payload's sum (kNoteSummed), which
/// the receiver checks before it places the slot (a pass over the slot on each side: on UC zero-copy saves the
/// sender's writes, not its reads).
constexpr size_t kZeroCopyAlign = 16384;  ///< Apple silicon's page: zero-copy sources start on one
/// The payload of a kSlotNote frame.
struct SlotNote {
  uint32_t bulk_seq = 0;  ///< the slot's sequence number on the bulk lane
  uint32_t bytes = 0;     ///< the message's bytes in it (from the header's offset on)
  uint32_t sum = 0;       ///< payload_sum() of those bytes, with kNoteSummed
  uint32_t flags = 0;
};
/// kNoteHeadered: the slot was copied and has its header, as on any bulk lane (its sequence number is checked
/// against the note's); else it is a zero-copy slot: payload only, with its sum on UC (kNoteSummed).
enum SlotNoteFlags : uint32_t { kNoteSummed = 1, kNoteHeadered = 2 };

/// How a connection carries `bytes` of a message: the first bulk_bytes in `slots` bulk slots of slot_payload
/// bytes each (the last maybe not full: it is padded), the rest in small frames. Whole slots while a full one's
/// worth is left; a remainder of at least half a slot takes a padded slot too; anything less, and a message
/// smaller than half a slot, goes in frames.
struct LaneSplit {
  size_t bulk_bytes = 0;
  size_t slots = 0;
};
inline LaneSplit split_lanes(size_t bytes, size_t slot_payload) {
  const size_t half = (slot_payload + sizeof(Header)) / 2;
  if (slot_payload == 0 || bytes < half) return {};  // (and no division on a small message's way)
  LaneSplit split;
  split.slots = bytes / slot_payload;
  split.bulk_bytes = split.slots * slot_payload;
  if (bytes - split.bulk_bytes >= half) {
    ++split.slots;
    split.bulk_bytes = bytes;
  }
  return split;
}

/// The part of a message of `bytes` that rail `rail` of `rails` carries: [begin, end), and whether it carries a piece
/// at all. Below stripe_bytes (or with one rail) the whole message goes on rail 0 (an empty one as one frame);
/// from stripe_bytes on it is cut into `rails` parts of whole frames' payloads, in order (rail 0 the first bytes).
struct Part {
  size_t begin = 0;
  size_t end = 0;
  bool carries = false;
};
inline Part part_of(size_t bytes, int rails, size_t stripe_bytes, int rail) {
  if (rails <= 1 || bytes < stripe_bytes || bytes <= kPayloadBytes) {
    return rail == 0 ? Part{0, bytes, true} : Part{};
  }
  const size_t frames = frames_for(bytes);
  const size_t per_rail = (frames + static_cast<size_t>(rails) - 1) / static_cast<size_t>(rails) * kPayloadBytes;
  const size_t begin = std::min(bytes, per_rail * static_cast<size_t>(rail));
  const size_t end = std::min(bytes, begin + per_rail);
  return Part{begin, end, end > begin};
}

// ---- side channel --------------------------------------------------------------------------------------------

constexpr uint32_t kHelloMagic = 0x74624942;  // "tbIB"
constexpr size_t kMaxKeyBytes = 64;

/// Sent by both ends of a new connection, followed by the job token's bytes.
struct Hello {
  uint32_t magic = kHelloMagic;
  uint32_t version = kVersion;
  char key[kMaxKeyBytes] = {};       ///< the sender's port key (presence and nonce), NUL-padded
  char peer_key[kMaxKeyBytes] = {};  ///< the key of the port it means to reach
  uint8_t gid[16] = {};
  uint32_t qp_num = 0;       ///< the small lane's queue pair
  uint32_t bulk_qp_num = 0;  ///< the bulk lane's
  uint32_t psn = 0;          ///< both lanes start at it
  uint16_t lid = 0;
  uint8_t mtu = 0;          ///< ibv_mtu
  uint8_t mode = 0;         ///< 1 UC, 2 RC: the queue pairs' type (both ends compute it alike, see pair_mode)
  uint32_t recv_depth = 0;  ///< small-lane receives posted for the peer: its initial credits there
  uint32_t bulk_depth = 0;  ///< bulk-lane receives (slots) posted for the peer
  uint32_t slot_bytes = 0;  ///< the bulk slot size this end would use; the connection takes the smaller
  uint32_t token_bytes = 0;
  uint32_t flags = 0;  ///< kHelloWithSecret: the sender proves a job secret next (dialer) or demands it;
                       ///< kHelloNotedBulk
};

/// kHelloNotedBulk: this end sends and takes noted bulk slots (zero-copy on); a link uses them when both ends do.
enum HelloFlags : uint32_t { kHelloWithSecret = 1, kHelloNotedBulk = 2 };

/// What the side channel's proofs of the job secret are bound to: the job token and both ports' keys.
inline std::string side_channel_context(const std::string& token, const std::string& dialer_key,
                                        const std::string& acceptor_key) {
  return token + "|" + dialer_key + "|" + acceptor_key;
}

constexpr uint32_t kMaxTokenBytes = 1024;

/// Makes a received Hello safe to read (its keys NUL-terminated) and says whether it is a tbcoll ibverbs handshake
/// of this version whose token (token_bytes, which follow it) may be read and whose slot size can be used.
inline bool hello_acceptable(Hello& hello) {
  hello.key[sizeof(hello.key) - 1] = '\0';
  hello.peer_key[sizeof(hello.peer_key) - 1] = '\0';
  return hello.magic == kHelloMagic && hello.version == kVersion && hello.token_bytes <= kMaxTokenBytes &&
         hello.slot_bytes >= kMinSlotBytes && hello.slot_bytes <= kMaxSlotBytes && hello.slot_bytes % kFrameBytes == 0;
}

/// kSent: the frames the sender has posted so far, small lane (count) and bulk lane (bulk); reserved 1 asks for
/// the receiver's own counts back (reserved 0). A receiver that was told of more than arrived, and still misses
/// them a grace period later, knows a UC link lost them.
enum class NoticeKind : uint32_t { kReady = 1, kAbort = 2, kBye = 3, kSent = 4 };

struct Notice {
  uint32_t kind = 0;
  uint32_t reserved = 0;
  uint64_t comm_id = 0;  ///< kAbort: the communicator; kSent: the small lane's count
  uint64_t bulk = 0;     ///< kSent: the bulk lane's count
};

}  // namespace tbcoll::ibverbs::wire
