#include "tune_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include "algorithms/registry.h"
#include "bootstrap/rendezvous.h"
#include "common/log.h"
#include "tbcoll/error.hpp"
#include "tuner.h"
#include "tuner_measured.h"

namespace tbcoll {

namespace {

constexpr int kVersion = 1;

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, by)) parts.push_back(part);
  if (!text.empty() && text.back() == by) parts.emplace_back();
  return parts;
}

// The build's table of kind: its rows' names, in order, comma-separated.
std::string table_of(OpKind kind) {
  std::string names;
  for (const algo::Algorithm& row : algo::algorithms_for(kind)) names += (names.empty() ? "" : ",") + std::string(row.name);
  return names;
}

size_t octave_low(int k) { return k == 0 ? 0 : size_t{1} << k; }
size_t octave_high(int k) { return (size_t{2} << k) - 1; }

// A tune file's complaint: "[tune] TBCOLL_TUNE_FILE=path line N: what".
[[noreturn]] void refuse(const std::string& path, int line, const std::string& what) {
  throw InvalidArgument(fmt::format("[tune] TBCOLL_TUNE_FILE={}{}: {}", path,
                                    line > 0 ? fmt::format(" line {}", line) : std::string(), what));
}

int whole_number(const std::string& path, int line, const char* what, const std::string& text, long long most) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < 0 || value > most) {
    refuse(path, line, fmt::format("{} {:?} is not a whole number from 0 to {}", what, text, most));
  }
  return static_cast<int>(value);
}

size_t byte_count(const std::string& path, int line, const char* what, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno != 0) {
    refuse(path, line, fmt::format("{} {:?} is not a byte count", what, text));
  }
  return static_cast<size_t>(value);
}

SavedDecision parse_decision(const std::vector<std::string>& f, const std::string& path, int line) {
  if (f.size() != 11) {
    refuse(path, line, fmt::format("a decision has 10 fields after the word (collective, ranks, ranks per host, "
                                   "hosts, transport, link, min and max bytes, algorithm, measured), not {}",
                                   f.size() - 1));
  }
  SavedDecision d;
  d.line = line;
  if (!algo::parse_collective(f[1], &d.kind)) refuse(path, line, fmt::format("unknown collective {:?}", f[1]));
  d.shape.ranks = whole_number(path, line, "ranks", f[2], 1 << 20);
  d.shape.ranks_per_host = whole_number(path, line, "ranks per host", f[3], d.shape.ranks);
  d.shape.hosts = whole_number(path, line, "hosts", f[4], d.shape.ranks);
  if (d.shape.ranks < 2 || d.shape.ranks_per_host < 1 || d.shape.hosts < 1) {
    refuse(path, line, fmt::format("{} ranks, {} per host on {} hosts is no communicator that decides",
                                   d.shape.ranks, d.shape.ranks_per_host, d.shape.hosts));
  }
  d.shape.transport = f[5];
  d.shape.link = f[6];
  d.min_bytes = byte_count(path, line, "min bytes", f[7]);
  d.max_bytes = byte_count(path, line, "max bytes", f[8]);
  const int k = MeasuredChoices::octave(d.min_bytes);
  if (k > 62 || d.min_bytes != octave_low(k) || d.max_bytes != octave_high(k)) {
    refuse(path, line, fmt::format("{}-{} bytes is not one octave (2^k to 2^(k+1)-1, or 0 to 1)", d.min_bytes,
                                   d.max_bytes));
  }
  d.algorithm = f[9];
  d.measured = f[10];
  const std::vector<std::string> rows = split(table_of(d.kind), ',');
  if (std::find(rows.begin(), rows.end(), d.algorithm) == rows.end()) {
    refuse(path, line, fmt::format("{} has no algorithm {:?} (it has {})", f[1], d.algorithm, table_of(d.kind)));
  }
  for (const std::string& item : split(d.measured, ',')) {
    const size_t equals = item.find('=');
    if (equals == std::string::npos || std::find(rows.begin(), rows.end(), item.substr(0, equals)) == rows.end()) {
      refuse(path, line, fmt::format("measured times {:?}: {:?} is not algorithm=us", d.measured, item));
    }
  }
  return d;
}

}  // namespace

std::string TuneShape::text() const {
  return fmt::format("{} {} {} {} {}", ranks, ranks_per_host, hosts, transport, link);
}

TuneShape tune_shape(int size, const algo::CostParams& costs, const std::vector<std::string>& transport_names,
                     const std::string& emulation_token) {
  std::vector<std::string> used;
  for (const std::string& name : transport_names) {
    if (name != "self" && std::find(used.begin(), used.end(), name) == used.end()) used.push_back(name);
  }
  std::sort(used.begin(), used.end());
  std::string transport;
  for (const std::string& name : used) transport += (transport.empty() ? "" : "+") + name;
  return {size, costs.ranks_per_host, costs.hosts, transport.empty() ? "self" : transport, emulation_token};
}

std::vector<SavedDecision> parse_tune_file(const std::string& text, const std::string& path) {
  std::vector<SavedDecision> decisions;
  std::vector<OpKind> tables;  // collectives whose table the file gave
  std::istringstream in(text);
  std::string record;
  int line = 0;
  bool versioned = false;
  while (std::getline(in, record)) {
    ++line;
    if (record.empty() || record[0] == '#') continue;
    const std::vector<std::string> f = split(record, ' ');
    if (!versioned) {
      if (f.size() != 2 || f[0] != "tbcoll-tune-file") {
        refuse(path, line, "not a tune file: the first record must be \"tbcoll-tune-file 1\"");
      }
      if (f[1] != std::to_string(kVersion)) {
        refuse(path, line, fmt::format("format version {} (this build reads {}): measure again into a new file",
                                       f[1], kVersion));
      }
      versioned = true;
    } else if (f[0] == "algorithms") {
      OpKind kind{};
      if (f.size() != 3 || !algo::parse_collective(f[1], &kind)) {
        refuse(path, line, "an algorithms record is \"algorithms COLLECTIVE NAME,NAME,...\"");
      }
      if (f[2] != table_of(kind)) {
        refuse(path, line, fmt::format("stale: measured by a build whose {} algorithms were {}; this build's are "
                                       "{}, which those decisions never compared: measure again (TBCOLL_TUNER="
                                       "measure) into a new file", f[1], f[2], table_of(kind)));
      }
      tables.push_back(kind);
    } else if (f[0] == "decision") {
      SavedDecision d = parse_decision(f, path, line);
      if (std::find(tables.begin(), tables.end(), d.kind) == tables.end()) {
        refuse(path, line, fmt::format("a decision for {} before the \"algorithms {} ...\" record it was measured "
                                       "with", f[1], f[1]));
      }
      for (const SavedDecision& earlier : decisions) {
        if (earlier.kind == d.kind && earlier.shape == d.shape && earlier.min_bytes == d.min_bytes) {
          refuse(path, line, fmt::format("a second decision for {} at {}, {}-{} bytes (the first is line {})", f[1],
                                         d.shape.text(), d.min_bytes, d.max_bytes, earlier.line));
        }
      }
      decisions.push_back(std::move(d));
    } else {
      refuse(path, line, fmt::format("unknown record {:?} (tbcoll-tune-file, algorithms, decision)", f[0]));
    }
  }
  if (!versioned) refuse(path, 0, "empty: not a tune file (the first record must be \"tbcoll-tune-file 1\")");
  return decisions;
}

std::string format_tune_file(const std::vector<SavedDecision>& decisions) {
  std::string text = fmt::format(
      "# tbcoll tune file (TBCOLL_TUNE_FILE): decisions TBCOLL_TUNER=measure took; docs/tuner.md describes it.\n"
      "# decision: collective ranks ranks_per_host hosts transport link min_bytes max_bytes algorithm measured_us\n"
      "tbcoll-tune-file {}\n", kVersion);
  for (OpKind kind : algo::collectives()) {
    bool used = false;
    for (const SavedDecision& d : decisions) used = used || d.kind == kind;
    if (!used) continue;
    text += fmt::format("algorithms {} {}\n", op_kind_name(kind), table_of(kind));
    for (const SavedDecision& d : decisions) {
      if (d.kind != kind) continue;
      text += fmt::format("decision {} {} {} {} {} {}\n", op_kind_name(kind), d.shape.text(), d.min_bytes,
                          d.max_bytes, d.algorithm, d.measured);
    }
  }
  return text;
}

void save_decision(const std::string& path, const SavedDecision& decision) {
  static std::mutex mutex;  // communicators of one process saving into one file
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<SavedDecision> decisions;
  std::ifstream in(path);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    decisions = parse_tune_file(text.str(), path);
  }
  bool replaced = false;
  for (SavedDecision& d : decisions) {
    if (d.kind == decision.kind && d.shape == decision.shape && d.min_bytes == decision.min_bytes) {
      d = decision;
      replaced = true;
    }
  }
  if (!replaced) decisions.push_back(decision);
  const std::string temporary = fmt::format("{}.{}.tmp", path, getpid());
  std::FILE* out = std::fopen(temporary.c_str(), "w");
  if (out == nullptr) throw IoError(fmt::format("[tune] TBCOLL_TUNE_FILE={}: cannot write {}: {}", path, temporary, std::strerror(errno)));
  const std::string text = format_tune_file(decisions);
  const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  if (std::fclose(out) != 0 || !written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temporary.c_str());
    throw IoError(fmt::format("[tune] TBCOLL_TUNE_FILE={}: writing failed: {}", path, why));
  }
}

namespace {

// Rank 0's message to every rank: "ok", its shape, whether the file exists, the file's text; or "error" and why.
std::string read_for_everyone(const std::string& path, bool measuring, const TuneShape& shape) {
  std::ifstream in(path);
  if (!in) {
    if (errno != ENOENT) return fmt::format("error\n[tune] TBCOLL_TUNE_FILE={}: cannot read it: {}", path, std::strerror(errno));
    if (!measuring) {
      return fmt::format("error\n[tune] TBCOLL_TUNE_FILE={}: no such file (TBCOLL_TUNER=measure writes it; the model "
                         "only reads it)", path);
    }
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
      return fmt::format("error\n[tune] TBCOLL_TUNE_FILE={}: cannot create it in {}: {}", path, dir, std::strerror(errno));
    }
    return fmt::format("ok\n{}\n0\n", shape.text());
  }
  if (measuring && access(path.c_str(), W_OK) != 0) {
    return fmt::format("error\n[tune] TBCOLL_TUNE_FILE={}: TBCOLL_TUNER=measure adds to it, but it is not writable: {}",
                       path, std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  return fmt::format("ok\n{}\n1\n{}", shape.text(), text.str());
}

// Where decision d applies on this communicator: the tuner's row of that name, which must be one the model may
// pick for every call of the range (runnable, priced, no fast path taking those sizes).
const Choice* row_for(const SavedDecision& d, const Tuner& tuner, const std::string& path) {
  const Choice* row = nullptr;
  for (size_t bytes : {d.min_bytes, d.max_bytes}) {
    const algo::CallShape call{d.kind, bytes, d.shape.ranks, DataType::kFloat32, d.shape.hosts};
    if (tuner.choose(call).fast_path_index >= 0) {
      refuse(path, d.line, fmt::format("{} B of {} run the transport's fast path {} here, not a saved algorithm", bytes,
                                       op_kind_name(d.kind), tuner.choose(call).name));
    }
    row = nullptr;
    for (const Choice* choice : tuner.shortlist(call, std::numeric_limits<double>::infinity(), SIZE_MAX)) {
      if (choice->name == d.algorithm) row = choice;
    }
    if (row == nullptr) {
      refuse(path, d.line, fmt::format("{} cannot run {} of {} B at {} (or the model never picks it on its own)",
                                       d.algorithm, op_kind_name(d.kind), bytes, d.shape.text()));
    }
  }
  return row;
}

std::string pretty_times(const std::string& measured) {
  std::string text;
  for (const std::string& item : split(measured, ',')) {
    const size_t equals = item.find('=');
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", item.substr(0, equals),
                        item.substr(equals + 1) == "inf" ? "(did not run)" : item.substr(equals + 1) + " us");
  }
  return text;
}

}  // namespace

void attach_tune_file(MeasuredChoices& measured, const Tuner& tuner, const TuneFileSetup& setup) {
  const bool measuring = tuner.config().measure;
  measured.set_measuring(measuring);
  const std::string key = setup.prefix + "/tune_file";
  std::string message;
  if (setup.rank == 0) {
    message = read_for_everyone(setup.path, measuring, setup.shape);
    setup.store->set(key, bootstrap::bytes_of(message), setup.deadline);
  } else {
    message = bootstrap::text_of(setup.store->get(key, setup.deadline, setup.cancelled));
  }
  const size_t end_of_word = message.find('\n');
  if (message.compare(0, end_of_word, "ok") != 0) throw InvalidArgument(message.substr(end_of_word + 1));
  std::istringstream in(message.substr(end_of_word + 1));
  std::string shape_text, exists;
  std::getline(in, shape_text);
  std::getline(in, exists);
  const std::vector<std::string> f = split(shape_text, ' ');
  const TuneShape shape{std::stoi(f.at(0)), std::stoi(f.at(1)), std::stoi(f.at(2)), f.at(3), f.at(4)};
  std::vector<SavedDecision> decisions;
  if (exists == "1") {
    std::stringstream text;
    text << in.rdbuf();
    decisions = parse_tune_file(text.str(), setup.path);
  }
  int used = 0;
  std::string others;
  for (const SavedDecision& d : decisions) {
    if (!(d.shape == shape)) {
      if (others.find(d.shape.text()) == std::string::npos) others += (others.empty() ? "" : "; ") + d.shape.text();
      continue;
    }
    if (tuner.forced(d.kind) || !tuner.config().use_model) continue;  // TBCOLL_ALGO or the size ranges decide
    const Choice* row = row_for(d, tuner, setup.path);
    measured.preset(d.kind, MeasuredChoices::octave(d.min_bytes), row,
                    fmt::format("{} (saved in {} line {}: measured by an earlier job)", pretty_times(d.measured),
                                setup.path, d.line));
    ++used;
  }
  if (used == 0 && !measuring && setup.rank == 0) {
    log::warn("[tune] TBCOLL_TUNE_FILE={} has no decision for this communicator ({}; it has {}): the model decides",
              setup.path, shape.text(), others.empty() ? "none" : others);
  }
  if (setup.rank != 0 || !measuring) return;
  const std::string path = setup.path;
  measured.save_with([path, shape](OpKind kind, int octave, const std::string& algorithm, const std::string& times) {
    SavedDecision d{kind, shape, octave_low(octave), octave_high(octave), algorithm, times, 0};
    try {
      save_decision(path, d);
    } catch (const Error& error) {
      // The call itself succeeded on every rank: this rank alone could not save it, and says so.
      log::warn("rank 0: the decision for {} of {}-{} B was not saved: {}", op_kind_name(kind), d.min_bytes,
                d.max_bytes, error.what());
    }
  });
}

}  // namespace tbcoll
