// The ibverbs transport's pure pieces: frame header and its checksum, frame counts, port addresses.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tbcoll/error.hpp"
#include "transports/ibverbs/port.h"
#include "transports/ibverbs/wire.h"

namespace tbcoll::ibverbs {
namespace {

TEST(IbverbsWire, HeaderChecksumCatchesAnyFlippedBit) {
  wire::Header header;
  header.kind = static_cast<uint8_t>(wire::FrameKind::kData);
  header.flags = wire::kFirst;
  header.seq = 12345;
  header.credits = 7;
  header.payload = 4032;
  header.message = 77;
  header.offset = 8064;
  header.comm_id = 0x1122334455667788ull;
  header.tag = 99;
  header.meta = 0xabcdef;
  header.total = 1 << 20;
  wire::seal(header);
  EXPECT_TRUE(wire::intact(header));
  for (size_t byte = 0; byte < offsetof(wire::Header, checksum); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      wire::Header damaged = header;
      reinterpret_cast<uint8_t*>(&damaged)[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(wire::intact(damaged)) << "byte " << byte << " bit " << bit;
    }
  }
}

// The header's checksum is payload_sum's fold of its 60 bytes, unrolled: the same value for any header (the wire
// format and the fuzz seeds do not change with the unrolling).
TEST(IbverbsWire, HeaderChecksumIsThePayloadFoldOfTheHeader) {
  if (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__) GTEST_SKIP() << "the byte fold reads little-endian words";
  std::mt19937_64 random(27);
  for (int i = 0; i < 10000; ++i) {
    wire::Header header;
    auto* bytes = reinterpret_cast<uint8_t*>(&header);
    for (size_t k = 0; k < sizeof(header); ++k) bytes[k] = static_cast<uint8_t>(random());
    if (i % 2 == 0) std::memset(bytes + 8 * (i % 7), 0xff, 8);  // words at the top of their range: sums wrap
    const uint32_t folded = wire::payload_sum(bytes, offsetof(wire::Header, checksum)) ^ 0x5eed1e55u;
    ASSERT_EQ(wire::header_checksum(header), folded) << "header " << i;
  }
}

// A flipped bit moves the payload's 64-bit weighted sum by D = +-c * 2^b + m * 2^64 (c a lane weight, b the bit,
// m the wraps of 2^64, |D| < 2^64): the fold (mod a prime) catches every flip exactly when that prime divides none
// of these D. All of them, checked.
TEST(IbverbsWire, PayloadSumCatchesAnyFlippedBit) {
  using Wide = __int128;
  const Wide limit = Wide{1} << 64;
  for (uint64_t weight : wire::kPayloadSumWeights) {
    for (int bit = 0; bit < 64; ++bit) {
      for (int sign : {-1, 1}) {
        for (int wraps = -9; wraps <= 9; ++wraps) {
          const Wide change = sign * static_cast<Wide>(weight) * (Wide{1} << bit) + wraps * limit;
          if (change <= -limit || change >= limit) continue;
          ASSERT_NE(change, 0);
          EXPECT_NE(change % static_cast<Wide>(wire::kPayloadSumPrime), 0)
              << "weight " << weight << " bit " << bit << " sign " << sign << " wraps " << wraps;
        }
      }
    }
  }
  // A case a fold of xor-ed halves misses: words summing to 2^63 - 1, then one bit more.
  uint64_t words[2] = {0x7fffffffffffffffull, 0};
  const uint32_t before = wire::payload_sum(reinterpret_cast<const uint8_t*>(words), sizeof(words));
  words[1] = 1;
  EXPECT_NE(wire::payload_sum(reinterpret_cast<const uint8_t*>(words), sizeof(words)), before);
  // And every single flip of a full frame of arbitrary data.
  std::vector<uint8_t> payload(wire::kPayloadBytes);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 131 + (i >> 7));
  const uint32_t sum = wire::payload_sum(payload.data(), payload.size());
  for (size_t byte = 0; byte < payload.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      payload[byte] ^= static_cast<uint8_t>(1u << bit);
      ASSERT_NE(wire::payload_sum(payload.data(), payload.size()), sum) << "byte " << byte << " bit " << bit;
      payload[byte] ^= static_cast<uint8_t>(1u << bit);
    }
  }
}

TEST(IbverbsWire, FramesPerMessage) {
  EXPECT_EQ(sizeof(wire::Header) + wire::kPayloadBytes, wire::kFrameBytes);
  EXPECT_EQ(wire::frames_for(0), 1u) << "an empty message still sends a frame";
  EXPECT_EQ(wire::frames_for(1), 1u);
  EXPECT_EQ(wire::frames_for(wire::kPayloadBytes), 1u);
  EXPECT_EQ(wire::frames_for(wire::kPayloadBytes + 1), 2u);
  EXPECT_EQ(wire::frames_for(10 * wire::kPayloadBytes), 10u);
}

TEST(IbverbsWire, LanesSplitIntoWholeSlotsAndATail) {
  const size_t slot = 512 * 1024 - 64;
  EXPECT_EQ(wire::split_lanes(8, slot).slots, 0u);
  EXPECT_EQ(wire::split_lanes(slot / 2, slot).slots, 0u) << "less than half a slot: frames";
  EXPECT_EQ(wire::split_lanes(256 * 1024, slot).slots, 1u) << "half a slot: one padded slot";
  const wire::LaneSplit three = wire::split_lanes(3 * slot + 100, slot);
  EXPECT_EQ(three.slots, 3u);
  EXPECT_EQ(three.bulk_bytes, 3 * slot) << "the 100 B tail in a frame";
  const wire::LaneSplit padded = wire::split_lanes(2 * slot + 300000, slot);
  EXPECT_EQ(padded.slots, 3u);
  EXPECT_EQ(padded.bulk_bytes, 2 * slot + 300000);
  EXPECT_EQ(wire::split_lanes(1 << 20, 0).slots, 0u) << "no bulk lane";
  EXPECT_EQ(wire::slot_bytes_for(true, 26, 2), 0u) << "Apple before 26.3: frames only";
  EXPECT_EQ(wire::slot_bytes_for(false, 0, 0, 4096), 0u) << "a port whose max_msg_sz is below a slot";
  EXPECT_EQ(wire::slot_bytes_for(false, 0, 0, 1u << 31), 512u * 1024);
  EXPECT_EQ(wire::slot_bytes_for(true, 26, 3), 512u * 1024);
  EXPECT_EQ(wire::slot_bytes_for(false, 0, 0), 512u * 1024);
  EXPECT_EQ(wire::slots_for(512 * 1024), 2);
  EXPECT_EQ(wire::slots_for(128 * 1024), 8);
  EXPECT_LE(wire::slots_for(16384) * 16384 / 4096, 4095) << "Apple's queue depth in frames";
}

// The payload's sum is the sender's choice (TBCOLL_IB_PAYLOAD_SUM): a frame that says it was summed is checked.
TEST(IbverbsWire, APayloadIsCheckedWhenItsSenderSummedIt) {
  std::vector<uint8_t> frame(sizeof(wire::Header) + 100, 0x5a);
  wire::Header header;
  header.kind = static_cast<uint8_t>(wire::FrameKind::kData);
  header.payload = 100;
  header.flags = wire::kSummed;
  header.payload_sum = wire::payload_sum(frame.data() + sizeof(header), 100);
  wire::seal(header);
  std::memcpy(frame.data(), &header, sizeof(header));
  wire::Header decoded;
  EXPECT_TRUE(wire::decode_frame(frame.data(), frame.size(), &decoded));
  frame[sizeof(header) + 50] ^= 1;
  EXPECT_FALSE(wire::decode_frame(frame.data(), frame.size(), &decoded));
  header.flags = 0;  // not summed: the link's CRC guards the payload
  wire::seal(header);
  std::memcpy(frame.data(), &header, sizeof(header));
  EXPECT_TRUE(wire::decode_frame(frame.data(), frame.size(), &decoded));
}

TEST(IbverbsWire, PortAddressesParseAndMalformedOnesAreRefused) {
  const PortAddress parsed = Port::parse("ab12.0.rdma_en3.00ff00ff|10.9.0.1:4242|rdma_en3|rc+auto");
  EXPECT_EQ(parsed.key, "ab12.0.rdma_en3.00ff00ff");
  EXPECT_EQ(parsed.side_channel, "10.9.0.1:4242");
  EXPECT_EQ(parsed.device, "rdma_en3");
  EXPECT_EQ(parsed.mode, Mode::kRc);
  EXPECT_TRUE(parsed.auto_mode);
  EXPECT_EQ(Port::parse("k|h:1|d|uc").mode, Mode::kUc);
  EXPECT_FALSE(Port::parse("k|h:1|d|uc").auto_mode);
  const std::string long_key = std::string(100, 'k') + "|h:1|d|uc";
  for (const std::string& bad :
       {std::string(), std::string("key-only"), std::string("|host:1|dev|uc"), std::string("key||dev|uc"),
        std::string("key|h:1|dev"), std::string("key|h:1|dev|xx"), std::string("key|h:1|dev|uc|more"), long_key}) {
    EXPECT_THROW(Port::parse(bad), InvalidArgument) << bad;
  }
}

// Striping: below the stripe size (or on one rail) all on rail 0; above it, whole frames per rail, in order,
// covering every byte once.
TEST(IbverbsWire, PartsCoverTheMessageOnceInWholeFrames) {
  EXPECT_TRUE(wire::part_of(0, 2, 1, 0).carries) << "an empty message is one frame on rail 0";
  EXPECT_FALSE(wire::part_of(0, 2, 1, 1).carries);
  EXPECT_EQ(wire::part_of(100000, 1, 1, 0).end, 100000u);
  EXPECT_FALSE(wire::part_of(65535, 2, 65536, 1).carries) << "below the stripe size: one rail";
  for (size_t bytes : {size_t{4033}, size_t{65536}, size_t{100003}, size_t{3} * wire::kPayloadBytes,
                       size_t{(1 << 20) + 7}}) {
    for (int rails : {2, 3, 4}) {
      size_t next = 0;
      for (int rail = 0; rail < rails; ++rail) {
        const wire::Part part = wire::part_of(bytes, rails, 4033, rail);
        if (!part.carries) continue;
        EXPECT_EQ(part.begin, next) << bytes << " B over " << rails << " rails, rail " << rail;
        EXPECT_TRUE(part.end == bytes || (part.end - part.begin) % wire::kPayloadBytes == 0);
        next = part.end;
      }
      EXPECT_EQ(next, bytes) << bytes << " B over " << rails << " rails";
      EXPECT_TRUE(wire::part_of(bytes, rails, 4033, 1).carries) << "striped: rail 1 has a part";
    }
  }
}

}  // namespace
}  // namespace tbcoll::ibverbs
