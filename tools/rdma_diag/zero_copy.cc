#include "tools/rdma_diag/zero_copy.h"

#include <errno.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <fmt/format.h>

#include "tools/rdma_diag/pattern.h"
#include "transports/ibverbs/hints.h"
#include "transports/ibverbs/memory.h"
#include "transports/ibverbs/wire.h"

namespace tbcoll::ibverbs {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kDefaultSlotBytes = size_t{512} << 10;  // the transport's slot unless TBCOLL_IB_SLOT_BYTES
constexpr uint64_t kCallerSeed = 0x7a65726f636f7079;     // "zerocopy": the caller's buffer's pattern
constexpr uint64_t kSendWrId = 16;                       // send i: 16 + i; receive i: i
constexpr const char* kName = "zero-copy sends (from registered memory at 16 KiB-aligned offsets)";

std::string offset_text(size_t offset) { return offset == 0 ? "0" : size_text(offset); }

// Registers a whole buffer (16 KiB-aligned, whole 16 KiB pages); throws IoError naming the rank, the buffer and
// the fix.
ibv_mr* register_buffer(const VerbsApi& verbs, ibv_pd* pd, const RegisteredMemory& memory, int access,
                        const std::string& what, int rank, const hints::Where& where) {
  errno = 0;
  ibv_mr* mr = verbs.reg_mr(pd, memory.data(), memory.size(), access);
  if (mr == nullptr) {
    throw IoError(fmt::format("rank {}: registering {} ({}): {}", rank, what, size_text(memory.size()),
                              hints::describe(hints::Verb::kRegMr, errno, where)));
  }
  return mr;
}

}  // namespace

std::array<size_t, kZeroCopySends> zero_copy_offsets(size_t slot_bytes) {
  return {0, slot_bytes, kRegistrationPage, kRegistrationPage + 2 * slot_bytes};
}

ZeroCopyResult RawLink::zero_copy_sends() {
  ZeroCopyResult result;
  result.apple = apple_device(*verbs_, device_);
  result.by_default = !result.apple && options_.mode == Mode::kRc;
  try {
    check_usable("zero-copy sends");
    // Both ends' largest SEND decides S, alike on both.
    const std::string theirs = agree("zero-copy sends set-up", "", std::to_string(port_max_message_));
    result.largest_send = std::min<size_t>(port_max_message_, std::strtoull(theirs.c_str(), nullptr, 10));
    result.slot_bytes = result.largest_send >= kDefaultSlotBytes     ? kDefaultSlotBytes
                        : result.largest_send >= wire::kMinSlotBytes ? wire::kMinSlotBytes
                                                                     : 0;
    if (result.slot_bytes == 0) {
      result.skipped = true;
      return result;
    }
    const std::string what = fmt::format("zero-copy sends of {}", size_text(result.slot_bytes));
    agree(what, prepare_zero_copy(result.slot_bytes));  // both ends' receives are posted
    agree(what, send_zero_copy(result.slot_bytes));
    result.sends = kZeroCopySends;
    result.ok = true;
  } catch (const Error& error) {
    result.failure = error.what();
  }
  return result;
}

std::string RawLink::prepare_zero_copy(size_t slot_bytes) {
  try {
    for (ibv_mr** mr : {&caller_mr_, &landing_mr_}) {
      if (*mr != nullptr) verbs_->dereg_mr(*mr);
      *mr = nullptr;
    }
    caller_memory_ = RegisteredMemory(kZeroCopySends * slot_bytes + kRegistrationPage);
    landing_memory_ = RegisteredMemory(kZeroCopySends * slot_bytes);  // zeroed: every byte must be written
    fill_pattern(caller_memory_.data(), caller_memory_.size(), kCallerSeed, options_.rank);
    // As the transport registers a caller's memory (registry.cc): with local and remote access on Apple's stack,
    // whose provider takes nothing less, and with none elsewhere (a send's source needs none). The receives' buffer
    // is registered as the link's own.
    const hints::Where where{device_, options_.mode == Mode::kRc};
    const int caller_access = apple_device(*verbs_, device_) ? kAccessFlags : 0;
    caller_mr_ =
        register_buffer(*verbs_, pd_, caller_memory_, caller_access, "the caller's buffer", options_.rank, where);
    landing_mr_ =
        register_buffer(*verbs_, pd_, landing_memory_, kAccessFlags, "the receive buffer", options_.rank, where);
    for (size_t i = 0; i < kZeroCopySends; ++i) {
      post_recv(data_qp_, landing_memory_.data() + i * slot_bytes, slot_bytes, i, landing_mr_);
    }
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

std::string RawLink::send_zero_copy(size_t slot_bytes) {
  const std::array<size_t, kZeroCopySends> offsets = zero_copy_offsets(slot_bytes);
  const int peer = 1 - options_.rank;
  uint32_t byte_len[kZeroCopySends] = {};
  try {
    for (size_t i = 0; i < kZeroCopySends; ++i) {
      post_send(data_qp_, caller_memory_.data() + offsets[i], slot_bytes, kSendWrId + i, caller_mr_);
    }
    size_t received = 0, sent = 0;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options_.message_timeout_s));
    while (received < kZeroCopySends || sent < kZeroCopySends) {
      poll_data(
          [&](const ibv_wc& wc) {
            if (wc.wr_id < kZeroCopySends) byte_len[wc.wr_id] = wc.byte_len;
            ++received;
          },
          [&](const ibv_wc&) { ++sent; });
      if ((received < kZeroCopySends || sent < kZeroCopySends) && Clock::now() > deadline) {
        if (sent < kZeroCopySends) {
          return fmt::format("rank {}: {} of its {} sends completed within {} s", options_.rank, sent, kZeroCopySends,
                             options_.message_timeout_s);
        }
        return fmt::format(
            "rank {}: {} of the {} sends of {} from rank {} arrived within {} s: lost (UC drops a message without "
            "any error)",
            options_.rank, received, kZeroCopySends, size_text(slot_bytes), peer, options_.message_timeout_s);
      }
    }
  } catch (const Error& error) {
    return error.what();
  }
  for (size_t i = 0; i < kZeroCopySends; ++i) {
    const std::string which = fmt::format("rank {}: the {} send from offset {} of rank {}'s registered buffer",
                                          options_.rank, size_text(slot_bytes), offset_text(offsets[i]), peer);
    if (byte_len[i] > slot_bytes) return fmt::format("{} arrived with {} B, more than its receive", which, byte_len[i]);
    const std::string damage =
        check_pattern(landing_memory_.data() + i * slot_bytes, slot_bytes, kCallerSeed, peer, offsets[i] / 8);
    if (!damage.empty()) return fmt::format("{}: {}", which, damage);
  }
  return "";
}

std::string format_zero_copy(const ZeroCopyResult& result) {
  if (result.skipped) {
    return fmt::format(
        "SKIP {}: the link takes no SEND of {} (its largest is {} B), so the transport has no bulk slots here and "
        "never sends from registered memory\n",
        kName, size_text(wire::kMinSlotBytes), result.largest_send);
  }
  if (!result.ok) {
    return fmt::format("FAIL {}: {}; {}\n", kName, result.failure,
                       result.apple        ? "leave TBCOLL_IB_ZERO_COPY unset (off on Apple's stack)"
                       : result.by_default ? "set TBCOLL_IB_ZERO_COPY=0 (its default, auto, sends from registered "
                                             "memory on RC links)"
                                           : "leave TBCOLL_IB_ZERO_COPY unset (auto: off on UC links)");
  }
  std::string line = fmt::format("PASS {}: verified, {} sends of {} arrived as sent", kName, result.sends,
                                 size_text(result.slot_bytes));
  if (result.slot_bytes < kDefaultSlotBytes) {
    line += fmt::format(
        " ({0}, not {1}: the link takes no SEND of {1}, its largest is {2} B; slots of {0} are "
        "TBCOLL_IB_SLOT_BYTES={3})",
        size_text(result.slot_bytes), size_text(kDefaultSlotBytes), result.largest_send, result.slot_bytes);
  }
  if (result.by_default) return line + "; TBCOLL_IB_ZERO_COPY=auto (the default) already uses them on this RC link\n";
  line += "; turn them on with TBCOLL_IB_ZERO_COPY=1 on every rank";
  // Off Apple a UC link has them off by default for their cost, not for doubt.
  if (!result.apple) line += " (on UC each zero-copy slot carries a sum: a pass over it on both sides)";
  return line + "\n";
}

}  // namespace tbcoll::ibverbs
