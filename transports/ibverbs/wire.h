// What travels on an ibverbs connection: 4 KiB frames, each one SEND into one posted receive, so every send and
// its receive cover the same number of frames (one), as Apple's Thunderbolt stack requires.
//
//   frame = Header (64 B) | payload (up to 4032 B)
//
// A message (one isend) is numbered per endpoint and direction (the k-th send meets the k-th receive), and every
// frame says which message it belongs to and where its payload goes in it, so the frames of one message may travel
// over several connections (rails: one per cable between the two ranks) and meet in order at the receiver. On one
// connection the frames of a message go in order; frames of several communicators sharing it interleave. Every frame carries the connection's sequence number for its direction (UC may drop a
// frame: a gap is reported, never papered over), the credits its sender returns (receives reposted since its
// last report), a sum of its payload and a checksum of the header: damage the link's CRC missed, or a provider
// bug, is reported instead of delivered.
//
// The side channel (a TCP socket per connection) carries the handshake, then only Notices (a communicator aborted,
// the process going away, frame counts for UC loss detection):
//
//   dialer   -> acceptor : Hello | token            (queue pair number, GID, MTU, receive depth, both port keys)
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
constexpr uint16_t kVersion = 3;

enum class FrameKind : uint8_t { kData = 1, kCredit = 2 };
enum FrameFlags : uint8_t { kFirst = 1, kLast = 2 };

struct Header {
  uint16_t magic = kMagic;
  uint8_t kind = 0;
  uint8_t flags = 0;
  uint32_t seq = 0;      ///< per connection and direction, from 0
  uint16_t credits = 0;  ///< receives the sender reposted since its last report
  uint16_t payload = 0;  ///< payload bytes in this frame
  uint32_t total = 0;    ///< the message's payload bytes, in every frame
  uint64_t comm_id = 0;  ///< the communicator (Context) the message belongs to
  uint64_t tag = 0;
  uint64_t meta = 0;
  uint64_t message = 0;      ///< the message's number on its endpoint and direction, from 0
  uint32_t offset = 0;       ///< where the payload goes in the message
  uint32_t reserved = 0;
  uint32_t payload_sum = 0;  ///< payload_sum() of the payload
  uint32_t checksum = 0;     ///< of the 60 bytes before it
};
static_assert(sizeof(Header) == 64, "wire header layout");
constexpr size_t kPayloadBytes = kFrameBytes - sizeof(Header);

/// FNV-1a over the header's first 60 bytes.
inline uint32_t header_checksum(const Header& header) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&header);
  uint32_t hash = 2166136261u;
  for (size_t i = 0; i < offsetof(Header, checksum); ++i) hash = (hash ^ bytes[i]) * 16777619u;
  return hash;
}

/// Folds a payload's words into 32 bits so that any single flipped bit changes the result: the payload's 8-byte
/// words (the tail zero-padded) are summed mod 2^64 in four lanes by position (word i into lane i % 4 while 32-byte
/// blocks last), the lanes weighted 1, 3, 5, 7 (so words swapped between lanes show too), and the sum is reduced
/// modulo the prime kPayloadSumPrime. A flipped bit moves the 64-bit sum by an odd multiple of a power of two (plus
/// wraps of 2^64), which that prime never divides: PayloadSumCatchesAnyFlippedBit in tests/ibverbs/wire_test.cc
/// checks every case. (A plain fold of the two halves, as before, missed some: fuzz/ibverbs_wire.cc found one.)
/// It runs at memory speed (vectorised adds; one division per frame).
constexpr uint64_t kPayloadSumPrime = 4294967279u;  // 2^32 - 17 (2^32 - 5 fails with weight 5)
constexpr uint64_t kPayloadSumWeights[4] = {1, 3, 5, 7};
inline uint32_t payload_sum(const uint8_t* payload, size_t bytes) {
  uint64_t lanes[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    uint64_t words[4];
    std::memcpy(words, payload + i, sizeof(words));
    for (int k = 0; k < 4; ++k) lanes[k] += words[k];
  }
  uint64_t sum = 0;
  for (int k = 0; k < 4; ++k) sum += kPayloadSumWeights[k] * lanes[k];
  for (; i < bytes; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, payload + i, std::min<size_t>(8, bytes - i));
    sum += word;
  }
  return static_cast<uint32_t>(sum % kPayloadSumPrime);
}

inline void seal(Header& header) { header.checksum = header_checksum(header); }
inline bool intact(const Header& header) {
  return header.magic == kMagic && header.checksum == header_checksum(header);
}

/// Reads the header of a received frame of `bytes` bytes into *header and says whether the frame can be trusted:
/// long enough for a header, header intact, payload within the frame and matching its sum. What the receiver
/// checks before it looks at anything else (pure: the fuzz target fuzz/ibverbs_wire.cc runs it on any bytes).
inline bool decode_frame(const uint8_t* frame, size_t bytes, Header* header) {
  if (bytes < sizeof(Header)) return false;
  std::memcpy(header, frame, sizeof(Header));
  return intact(*header) && header->payload <= bytes - sizeof(Header) &&
         payload_sum(frame + sizeof(Header), header->payload) == header->payload_sum;
}

/// The largest message (Capabilities::max_message_bytes: the executor splits larger transfers).
constexpr size_t kMaxMessageBytes = 0xffffffffu;

/// Frames a message of `bytes` takes (an empty message still sends one frame).
constexpr size_t frames_for(size_t bytes) { return bytes == 0 ? 1 : (bytes + kPayloadBytes - 1) / kPayloadBytes; }

/// The part of a message of `bytes` that rail `rail` of `rails` carries: [begin, end), and whether it carries a frame
/// at all. Below stripe_bytes (or with one rail) the whole message goes on rail 0 (an empty one as one frame);
/// from stripe_bytes on it is cut into `rails` parts of whole frames, in order (rail 0 the first bytes).
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
  uint32_t qp_num = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint8_t mtu = 0;          ///< ibv_mtu
  uint8_t mode = 0;         ///< 1 UC, 2 RC: the queue pair's type (both ends compute it alike, see pair_mode)
  uint32_t recv_depth = 0;  ///< receives posted for the peer: its initial credits
  uint32_t token_bytes = 0;
  uint32_t flags = 0;  ///< kHelloWithSecret: the sender proves a job secret next (dialer) or demands it
};

enum HelloFlags : uint32_t { kHelloWithSecret = 1 };

/// What the side channel's proofs of the job secret are bound to: the job token and both ports' keys.
inline std::string side_channel_context(const std::string& token, const std::string& dialer_key,
                                        const std::string& acceptor_key) {
  return token + "|" + dialer_key + "|" + acceptor_key;
}

constexpr uint32_t kMaxTokenBytes = 1024;

/// Makes a received Hello safe to read (its keys NUL-terminated) and says whether it is a tbcoll ibverbs handshake
/// of this version whose token (token_bytes, which follow it) may be read.
inline bool hello_acceptable(Hello& hello) {
  hello.key[sizeof(hello.key) - 1] = '\0';
  hello.peer_key[sizeof(hello.peer_key) - 1] = '\0';
  return hello.magic == kHelloMagic && hello.version == kVersion && hello.token_bytes <= kMaxTokenBytes;
}

/// kSent: the frames the sender has posted on the queue pair so far (in comm_id); reserved 1 asks for the
/// receiver's own count back (reserved 0). A receiver that was told of more frames than arrived, and still misses
/// them a grace period later, knows a UC link lost them. (Peers that predate it ignore kinds they do not know.)
enum class NoticeKind : uint32_t { kReady = 1, kAbort = 2, kBye = 3, kSent = 4 };

struct Notice {
  uint32_t kind = 0;
  uint32_t reserved = 0;
  uint64_t comm_id = 0;
};

}  // namespace tbcoll::ibverbs::wire
