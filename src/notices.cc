// Notices between the ranks of a communicator (see notices.h).
#include "notices.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "tbcoll/error.hpp"

namespace tbcoll {

bool parse_notice(const std::string& text, char* kind, uint64_t* call, int* rank, std::string* reason) {
  unsigned long long number = 0;
  int consumed = 0;
  char k = 0;
  if (std::sscanf(text.c_str(), "%c %llu %d %n", &k, &number, rank, &consumed) < 3 || consumed <= 0) return false;
  if (k != 'R' && k != 'B' && k != 'T') return false;
  *kind = k;
  *call = number;
  *reason = text.substr(static_cast<size_t>(consumed));
  return true;
}

void Notices::attach(std::shared_ptr<Store> store, std::string prefix, int rank) {
  store_ = std::move(store);
  prefix_ = std::move(prefix);
  count_key_ = prefix_ + "/notices";
  rank_ = rank;
}

void Notices::publish(Kind kind, uint64_t call, const std::string& reason, std::chrono::milliseconds budget) noexcept {
  if (store_ == nullptr || store_failed_) return;
  try {
    const Deadline deadline = Clock::now() + budget;
    const int64_t n = store_->add(count_key_, 1, deadline);
    const std::string text = fmt::format("{} {} {} {}", static_cast<char>(kind), call, rank_, reason);
    store_->set(fmt::format("{}/notice/{}", prefix_, n), std::vector<uint8_t>(text.begin(), text.end()), deadline);
  } catch (const std::exception& error) {
    store_failed_ = true;
    log::info("rank {}: cannot tell the peers through the store ({}): {}", rank_, error.what(), reason);
  }
}

void Notices::fetch(bool right_now, Deadline until) {
  const auto now = Clock::now();
  if (store_ == nullptr || store_failed_ || (!right_now && now < next_fetch_) || now >= until) return;
  next_fetch_ = now + kInterval;
  // Until `until` alone (a waiting call's look: kLookBudget, or less before the call's deadline): a store that
  // stopped answering (its host vanished) must not hold the call past its deadline, nor long after its data came.
  const Deadline deadline = until;
  try {
    const int64_t count = store_->add(count_key_, 0, deadline);
    for (; seen_ < count; ++seen_) {
      // Counted before written (publish): the record follows within the publisher's round trip.
      const std::vector<uint8_t> bytes = store_->get(fmt::format("{}/notice/{}", prefix_, seen_ + 1), deadline);
      Record record{};
      char kind = 0;
      if (!parse_notice(std::string(bytes.begin(), bytes.end()), &kind, &record.call, &record.rank, &record.reason)) {
        log::warn("rank {}: malformed notice {} in the store: ignored", rank_, seen_ + 1);
        continue;
      }
      record.kind = static_cast<Kind>(kind);
      if (record.rank != rank_) records_.push_back(std::move(record));
    }
    silent_since_ = Clock::time_point::max();
  } catch (const TimeoutError& error) {
    // One short look says little of the store; a silence of kBudget over the looks says it is gone.
    silent_since_ = std::min(silent_since_, now);
    if (Clock::now() - silent_since_ < kBudget) return;
    store_failed_ = true;
    log::info("rank {}: the store does not answer ({}): notices from peers no longer seen", rank_, error.what());
  } catch (const std::exception& error) {
    // Rank 0 (the store) gone: the transports report the peers that died; stop asking.
    store_failed_ = true;
    log::info("rank {}: the store does not answer ({}): notices from peers no longer seen", rank_, error.what());
  }
}

void Notices::check(uint64_t call, bool collective, bool now, Deadline until) {
  fetch(now, until);
  throw_if_told(call, collective, false);
}

template <typename Done>
void Notices::poll(std::chrono::milliseconds budget, Done&& done) {
  const auto until = Clock::now() + budget;
  while (true) {
    fetch(true, until);
    if (done() || store_ == nullptr || store_failed_ || Clock::now() >= until) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Notices::await_reason(uint64_t call, bool collective, std::chrono::milliseconds budget) {
  poll(budget, [&] {
    throw_if_told(call, collective, false, /*later_calls=*/true);
    return false;
  });
}

std::string Notices::check_after_timeout(uint64_t call, bool collective, std::chrono::milliseconds budget) {
  // The peers in this call entered it a little before or after this rank and time out within that skew: their
  // notices are awaited (until one concerns this call, or budget), so a rank that waited for a peer that itself
  // waited for a third (stopped) rank names the third.
  const auto concerns = [&](const Record& record) { return !collective || record.call <= call; };
  poll(budget, [&] { return std::any_of(records_.begin(), records_.end(), concerns); });
  std::string others;
  for (const Record& record : records_) {
    if (record.kind == Kind::kTimedOut && record.call == call) {
      others += fmt::format("{}peer {} too: {}", others.empty() ? "" : "; ", record.rank, record.reason);
    }
  }
  // The rest as check() has it: a peer that failed otherwise, or timed out in an earlier call, is the reason.
  throw_if_told(call, collective, true);
  return others;
}

void Notices::throw_if_told(uint64_t call, bool collective, bool except_timeouts_in_call, bool later_calls) const {
  for (const Record& record : records_) {
    const bool concerns_call = !collective || record.call <= call || later_calls;
    if (record.kind == Kind::kBroken && concerns_call) {
      throw RemoteError(fmt::format("peer {} failed and takes part in no further call: {}", record.rank,
                                    record.reason));
    }
    if (record.kind == Kind::kTimedOut && concerns_call && !(except_timeouts_in_call && record.call == call)) {
      throw RemoteError(fmt::format("peer {} gave up in call {} and takes part in no further call: {}", record.rank,
                                    record.call, record.reason));
    }
    if (record.kind == Kind::kRefused && collective && record.call == call) {
      throw RemoteError(fmt::format("peer {} refused this call: {}", record.rank, record.reason));
    }
  }
}

std::string Notices::refusal_of(uint64_t call) {
  fetch(true, Clock::now() + kBudget);
  for (const Record& record : records_) {
    if (record.kind == Kind::kRefused && record.call == call) {
      return fmt::format("peer {} refused this call: {}", record.rank, record.reason);
    }
  }
  return "";
}

}  // namespace tbcoll
