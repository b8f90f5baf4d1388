#include "tuner.h"

#include <fmt/format.h>

#include "tbcoll/error.hpp"

namespace tbcoll {

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kSelf: return "self";
    case Algorithm::kRing: return "ring";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kTree: return "tree";
    case Algorithm::kChain: return "chain";
    case Algorithm::kDissemination: return "dissemination";
    case Algorithm::kOneShot: return "oneshot";
    case Algorithm::kCma: return "cma";
    case Algorithm::kTwoShot: return "twoshot";
  }
  return "unknown";
}

void check_algorithm_name(const std::string& name) {
  for (const char* known : {"", "ring", "direct", "oneshot", "twoshot", "cma", "tree", "chain"}) {
    if (name == known) return;
  }
  throw InvalidArgument(fmt::format("unknown algorithm {:?} (ring, direct, oneshot, twoshot, cma, tree, chain)", name));
}

Algorithm choose_algorithm(OpKind kind, size_t bytes, int world_size, const TunerConfig& config) {
  if (world_size == 1) return Algorithm::kSelf;
  if (kind == OpKind::kBarrier) return Algorithm::kDissemination;
  if (kind == OpKind::kReduceScatter || kind == OpKind::kReduce) return Algorithm::kDirect;
  const std::string& forced = config.forced;
  if ((kind == OpKind::kAllReduce || kind == OpKind::kAllGather) && forced.empty() &&
      bytes <= config.one_shot_max_bytes) {
    return Algorithm::kOneShot;
  }
  if (kind == OpKind::kAllGather && forced == "oneshot") {
    if (bytes / world_size <= config.one_shot_limit_bytes && config.one_shot_limit_bytes > 0) return Algorithm::kOneShot;
    throw InvalidArgument(fmt::format("algorithm \"oneshot\" needs every rank on shared memory and blocks of at most "
                                      "{} B", config.one_shot_limit_bytes));
  }
  if (kind == OpKind::kAllReduce && forced == "oneshot") {
    if (bytes <= config.one_shot_limit_bytes) return Algorithm::kOneShot;
    throw InvalidArgument(fmt::format("algorithm \"oneshot\" needs every rank on shared memory and at most {} B "
                                      "(this all_reduce has {} B)", config.one_shot_limit_bytes, bytes));
  }
  if (kind == OpKind::kAllReduce && forced == "twoshot") {
    if (config.two_shot) return Algorithm::kTwoShot;
    throw InvalidArgument("algorithm \"twoshot\" needs every rank on shared memory");
  }
  if (kind == OpKind::kAllReduce && forced.empty() && config.two_shot && bytes > config.direct_max_bytes &&
      !(config.cma && bytes >= config.cma_min_bytes && bytes < config.cma_max_bytes)) {
    return Algorithm::kTwoShot;
  }
  if (kind == OpKind::kAllReduce || kind == OpKind::kAllGather) {
    if (forced == "cma") {
      if (config.cma) return Algorithm::kCma;
      throw InvalidArgument("algorithm \"cma\" needs every rank on one host with cross-memory attach permitted");
    }
    size_t cma_from = kind == OpKind::kAllReduce ? config.cma_min_bytes : config.cma_gather_min_bytes;
    if (forced.empty() && config.cma && bytes >= cma_from) return Algorithm::kCma;
    if (forced == "ring") return Algorithm::kRing;
    if (forced == "direct") return Algorithm::kDirect;
    if (forced.empty()) return bytes <= config.direct_max_bytes ? Algorithm::kDirect : Algorithm::kRing;
  } else if (kind == OpKind::kBroadcast) {
    if (forced == "cma") {
      if (config.cma) return Algorithm::kCma;
      throw InvalidArgument("algorithm \"cma\" needs every rank on one host with cross-memory attach permitted");
    }
    if (forced.empty() && config.cma && bytes >= config.cma_gather_min_bytes) return Algorithm::kCma;
    if (forced == "tree") return Algorithm::kTree;
    if (forced == "chain") return Algorithm::kChain;
    if (forced.empty() || forced == "ring" || forced == "direct" || forced == "oneshot" || forced == "twoshot") {
      // A forced all_reduce algorithm leaves broadcast to the tuner.
      return bytes <= config.tree_max_bytes || world_size == 2 ? Algorithm::kTree : Algorithm::kChain;
    }
  } else {
    return Algorithm::kDirect;
  }
  if (kind == OpKind::kAllGather && (forced == "tree" || forced == "chain")) {
    return bytes <= config.direct_max_bytes ? Algorithm::kDirect : Algorithm::kRing;
  }
  if (kind == OpKind::kAllReduce && (forced == "tree" || forced == "chain")) {
    return bytes <= config.direct_max_bytes ? Algorithm::kDirect : Algorithm::kRing;
  }
  if (forced == "oneshot" || forced == "twoshot") {
    return bytes <= config.direct_max_bytes ? Algorithm::kDirect : Algorithm::kRing;
  }
  throw InvalidArgument(fmt::format("unknown algorithm {:?} (ring, direct, oneshot, twoshot, cma, tree, chain)", forced));
}

}  // namespace tbcoll
