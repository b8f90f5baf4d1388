#include "tools/doctor/report.h"

#include <time.h>

#include <algorithm>
#include <ctime>
#include <iterator>

#include <fmt/format.h>

#include "tools/doctor/verdict.h"

namespace tbcoll::doctor {
namespace {

using flight::Call;
using flight::CallKind;
using flight::Dump;
using flight::Outcome;
using flight::State;

std::tm utc(int64_t unix_us) {
  const time_t seconds = static_cast<time_t>(unix_us / 1000000);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  return parts;
}

std::string date_time(int64_t unix_us) {
  const std::tm parts = utc(unix_us);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                     parts.tm_hour, parts.tm_min, parts.tm_sec);
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kRunning:
      return "running";
    case Outcome::kOk:
      return "ok";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kEmpty:
      break;
  }
  return "-";
}

std::string call_line(const Call& call, int64_t updated_us) {
  const std::string number =
      call.kind == CallKind::kCollective ? fmt::format("#{}", call.seq) : fmt::format("after #{}", call.seq);
  const std::string took = call.end_us > 0 ? duration(call.end_us - call.start_us)
                                           : "for " + duration(std::max<int64_t>(0, updated_us - call.start_us));
  return fmt::format("    {:<12} {:<40} {:<16} {:<8} {}  {}\n", number, call.describe(),
                     call.algorithm.empty() ? "-" : call.algorithm, outcome_name(call.outcome),
                     clock_time(call.start_us), took);
}

std::string peer_table(const Dump& dump) {
  std::string out = fmt::format("  peers:\n    {:>4}  {:<10} {:>11} {:>11} {:>10} {:>10} {:>8}\n", "peer", "transport",
                                "sent", "received", "messages", "waited", "waits");
  for (const flight::Peer& peer : dump.peers) {
    if (peer.rank == dump.rank) {
      out += fmt::format("    {:>4}  (this rank)\n", peer.rank);
      continue;
    }
    out += fmt::format("    {:>4}  {:<10} {:>11} {:>11} {:>10} {:>10} {:>8}\n", peer.rank,
                       peer.transport.empty() ? "-" : peer.transport, byte_size(peer.sent_bytes),
                       byte_size(peer.received_bytes), peer.messages, duration(static_cast<int64_t>(peer.wait_us)),
                       peer.waits);
  }
  return out;
}

std::string header_lines(const Dump& dump) {
  std::string out = fmt::format("{}\n  rank {} of {}, communicator {:016x}, host {}, pid {}\n", dump.path, dump.rank,
                                dump.size, dump.comm_id, dump.host.empty() ? "?" : dump.host, dump.pid);
  out += fmt::format("  created {}, last written {} ({} later)\n", date_time(dump.created_us),
                     clock_time(dump.updated_us), duration(std::max<int64_t>(0, dump.updated_us - dump.created_us)));
  out += "  state: " + state_name(dump.state);
  if (dump.stalled_on >= 0) out += fmt::format(" (its wait on rank {} passed the deadline)", dump.stalled_on);
  out += "\n";
  if (!dump.reason.empty()) out += "  reason: " + dump.reason + "\n";
  out += fmt::format("  collectives: entered #{}, completed #{}; {} calls begun, the last {} recorded\n", dump.entered,
                     dump.completed, dump.calls, dump.records.size());
  return out;
}

}  // namespace

std::string clock_time(int64_t unix_us) {
  const std::tm parts = utc(unix_us);
  return fmt::format("{:02}:{:02}:{:02}.{:03}", parts.tm_hour, parts.tm_min, parts.tm_sec, unix_us % 1000000 / 1000);
}

std::string duration(int64_t us) {
  if (us < 1000 && us > -1000) return fmt::format("{} us", us);
  if (us < 1000000 && us > -1000000) return fmt::format("{:.1f} ms", static_cast<double>(us) / 1e3);
  return fmt::format("{:.1f} s", static_cast<double>(us) / 1e6);
}

std::string byte_size(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  for (; value >= 1024 && unit + 1 < std::size(units); ++unit) value /= 1024;
  return fmt::format("{:.1f} {}", value, units[unit]);
}

std::string state_name(State state) {
  switch (state) {
    case State::kLive:
      return "live";
    case State::kFinished:
      return "finished";
    case State::kFailed:
      return "failed";
    case State::kAborted:
      return "aborted";
  }
  return fmt::format("unknown ({})", static_cast<uint32_t>(state));
}

std::string communicator_title(uint64_t comm_id, int size) {
  return fmt::format("communicator {:016x} ({} rank{})", comm_id, size, size == 1 ? "" : "s");
}

std::string show(const Dump& dump, size_t last_calls) {
  std::string out = header_lines(dump) + peer_table(dump);
  const size_t shown = last_calls == 0 ? dump.records.size() : std::min(last_calls, dump.records.size());
  out += fmt::format("  last {} calls (oldest first):\n", shown);
  if (shown > 0) {
    out += fmt::format("    {:<12} {:<40} {:<16} {:<8} {:<12}  {}\n", "number", "call", "algorithm", "outcome",
                       "start (UTC)", "took");
  }
  for (size_t i = dump.records.size() - shown; i < dump.records.size(); ++i) {
    out += call_line(dump.records[i], dump.updated_us);
  }
  return out;
}

std::string live(const std::vector<Dump>& dumps) {
  if (dumps.empty()) return "no flight files\n";
  std::string out = communicator_title(dumps.front().comm_id, dumps.front().size) + "\n";
  for (const Dump& dump : dumps) {
    out += fmt::format("  rank {} (host {}, pid {}, {}): {} calls, collectives entered #{}, completed #{}\n", dump.rank,
                       dump.host.empty() ? "?" : dump.host, dump.pid, state_name(dump.state), dump.calls, dump.entered,
                       dump.completed);
    for (const flight::Peer& peer : dump.peers) {
      if (peer.rank == dump.rank) continue;
      out += fmt::format("    peer {} via {}: sent {}, received {}, {} messages, waited {} in {} waits\n", peer.rank,
                         peer.transport.empty() ? "?" : peer.transport, byte_size(peer.sent_bytes),
                         byte_size(peer.received_bytes), peer.messages, duration(static_cast<int64_t>(peer.wait_us)),
                         peer.waits);
    }
  }
  std::vector<LinkFigures> moved;
  for (const LinkFigures& link : links(dumps)) {
    if (link.bytes > 0) moved.push_back(link);
  }
  if (moved.empty()) return out + "  no link has moved bytes yet\n";
  auto slowest = std::max_element(moved.begin(), moved.end(), [](const LinkFigures& a, const LinkFigures& b) {
    return a.us_per_mib() < b.us_per_mib();
  });
  out +=
      fmt::format("  slowest link: {}<->{}, {:.0f} us waited per MiB ({} waited over {})\n", slowest->a, slowest->b,
                  slowest->us_per_mib(), duration(static_cast<int64_t>(slowest->wait_us)), byte_size(slowest->bytes));
  for (const std::string& line : slow_links(dumps)) out += "  " + line + "\n";
  return out;
}

}  // namespace tbcoll::doctor
