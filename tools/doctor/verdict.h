// tbcoll-doctor's verdict: what a communicator's flight files (src/flight/flight_file.h), read together, say went
// wrong, in words. Pure functions over dumps already read, so tests can feed them made-up ones.
//
//   missing files        "no flight file of rank 2 (...)"
//   disagreement         "ranks disagree at #88: ranks 0, 1 called all_reduce(...); rank 2 called broadcast(...)"
//   a call not entered   "rank 2 never entered all_reduce(count=1024, f32, sum) #1532 (its last call: #1531,
//                         completed); ranks 0, 1, 3 waited 30.0 s for it"
//   failures             "rank 1 failed: <the reason it wrote>"
//   silent deaths        "ranks 0, 2 ended without closing their files (...)"
//   a slow link          "link 1<->3 is 40x slower than the others: 812 us waited per MiB vs 20 us (median ...)"
//   a late rank          "rank 3 arrived last at 90 of the 100 calls all ranks recorded"
//   nothing wrong        "all 4 ranks completed 1532 collectives; nothing looks wrong"
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "flight/flight_file.h"

namespace tbcoll::doctor {

/// Start times closer than this are a tie: the writer's clock ticks every few milliseconds.
constexpr int64_t kClockTickUs = 5000;
/// A link is named when its wait per MiB is at least this many times the median of the other links'.
constexpr double kSlowLinkFactor = 5.0;
/// Fewer links that moved bytes than this give no median worth comparing against.
constexpr size_t kMinLinksToCompare = 3;

/// The dumps by communicator id, each communicator's by rank (a rank with two files keeps the one updated last).
std::map<uint64_t, std::vector<flight::Dump>> by_communicator(std::vector<flight::Dump> dumps);

/// The verdict on one communicator's dumps (one per rank, any order, ranks may be missing): one line per finding,
/// or one line saying how many collectives every rank completed when nothing looks wrong. ended: ranks whose
/// process is known to be gone (tbcoll-doctor looks on its own host); a file of such a rank that still says live
/// was left by a process that died without a word, and a call the others wait in is stalled however short the wait.
std::vector<std::string> verdict(const std::vector<flight::Dump>& dumps, const std::set<int>& ended = {});

/// One link's figures, from both ends' PeerFigures.
struct LinkFigures {
  int a = -1, b = -1;    ///< a < b
  uint64_t bytes = 0;    ///< moved between them, each way added
  /// What both ends waited on each other: twice the smaller of a's wait on b and b's on a (a late rank makes its
  /// peers wait on it, one-sided; a slow link makes both ends wait)
  uint64_t wait_us = 0;
  double us_per_mib() const { return bytes == 0 ? 0 : static_cast<double>(wait_us) * 1048576.0 / bytes; }
};

/// The links between ranks that both have a dump, a < b.
std::vector<LinkFigures> links(const std::vector<flight::Dump>& dumps);

/// "link 1<->3 is 40x slower than the others: ..." for each link that stands out; empty if none does (or too few
/// links moved bytes to tell).
std::vector<std::string> slow_links(const std::vector<flight::Dump>& dumps);

/// "0, 1, 3"
std::string rank_list(const std::vector<int>& ranks);

}  // namespace tbcoll::doctor
