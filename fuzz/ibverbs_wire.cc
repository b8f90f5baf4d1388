// Fuzz target: the ibverbs frame header codec (transports/ibverbs/wire.h).
//   1. Any bytes as a received frame: decode_frame never reads past them, and a frame it accepts re-encodes (its
//      fields sealed again) to the very bytes it came from, with the payload inside the frame.
//   2. The input as header fields and payload: encode (seal) then decode gives the same header back, and any single
//      flipped bit of the header, or of the payload of a summed frame (kSummed), is refused.
//   3. split_lanes covers a part exactly, in whole slots and a tail shorter than half a slot.
//   4. frames_for covers a message exactly.
#include <vector>

#include "fuzz_support.h"
#include "transports/ibverbs/wire.h"

namespace wire = tbcoll::ibverbs::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wire::Header received;
  if (wire::decode_frame(data, size, &received)) {
    FUZZ_CHECK(received.magic == wire::kMagic);
    FUZZ_CHECK(size >= sizeof(wire::Header) + received.payload);
    wire::Header resealed = received;
    resealed.checksum = 0;
    wire::seal(resealed);
    FUZZ_CHECK(std::memcmp(&resealed, data, sizeof(resealed)) == 0);
  }

  tbcoll_fuzz::Reader in(data, size);
  wire::Header header;
  header.kind = in.take<uint8_t>();
  header.flags = in.take<uint8_t>();
  header.seq = in.take<uint32_t>();
  header.credits = in.take<uint16_t>();
  header.bulk_credits = in.take<uint16_t>();
  header.total = in.take<uint32_t>();
  header.comm_id = in.take<uint64_t>();
  header.tag = in.take<uint64_t>();
  header.meta = in.take<uint64_t>();
  const uint32_t flip = in.take<uint32_t>();
  const std::string payload = in.bytes(wire::kPayloadBytes);
  header.payload = static_cast<uint32_t>(payload.size());
  header.flags |= wire::kSummed;  // so that a flipped payload bit must show
  header.payload_sum = wire::payload_sum(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  wire::seal(header);
  FUZZ_CHECK(wire::intact(header));

  std::vector<uint8_t> frame(sizeof(header) + payload.size());
  std::memcpy(frame.data(), &header, sizeof(header));
  if (!payload.empty()) std::memcpy(frame.data() + sizeof(header), payload.data(), payload.size());
  wire::Header decoded;
  FUZZ_CHECK(wire::decode_frame(frame.data(), frame.size(), &decoded));
  FUZZ_CHECK(std::memcmp(&decoded, &header, sizeof(header)) == 0);
  // A frame cut short of its payload is refused.
  if (!payload.empty()) FUZZ_CHECK(!wire::decode_frame(frame.data(), frame.size() - 1, &decoded));

  // One flipped bit anywhere in the frame (header or payload) is refused.
  const size_t bit = flip % (frame.size() * 8);
  frame[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  FUZZ_CHECK(!wire::decode_frame(frame.data(), frame.size(), &decoded));

  const size_t slot_payload = header.total % (size_t{1} << 20);
  const wire::LaneSplit split = wire::split_lanes(header.total, slot_payload);
  FUZZ_CHECK(split.bulk_bytes <= header.total);
  if (slot_payload > 0) {
    FUZZ_CHECK(split.slots * slot_payload >= split.bulk_bytes);
    FUZZ_CHECK(split.bulk_bytes == header.total || header.total - split.bulk_bytes < (slot_payload + 64) / 2);
  }

  const size_t frames = wire::frames_for(header.total);
  FUZZ_CHECK(frames >= 1);
  FUZZ_CHECK(frames * wire::kPayloadBytes >= header.total);
  FUZZ_CHECK(header.total == 0 || (frames - 1) * wire::kPayloadBytes < header.total);
  return 0;
}
