#include "flight/recorder.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "common/log.h"
#include "platform/platform.h"

namespace tbcoll::flight {
namespace {

// The most calls a trace keeps (about 100 MiB of JSON): a long job's trace stops there.
constexpr size_t kMostTraceEvents = size_t{1} << 20;

int64_t steady_us(std::chrono::steady_clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::microseconds>(at.time_since_epoch()).count();
}

int64_t unix_us_now() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Makes dir (and its parent) if missing, private to the user where this call makes it.
void make_dir(const std::string& dir) {
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) mkdir(dir.substr(0, slash).c_str(), 0700);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw IoError(fmt::format("cannot make the flight recorder's directory {}: {}", dir, std::strerror(errno)));
  }
}

// The file, sized and mapped; throws IoError naming it.
void* map_file(const std::string& path, size_t bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw IoError(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  void* memory = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int error = errno;
  close(fd);
  if (memory == MAP_FAILED) {
    unlink(path.c_str());
    throw IoError(fmt::format("cannot map {} ({} B): {}", path, bytes, std::strerror(error)));
  }
  return memory;
}

template <size_t N>
void copy_text(char (&into)[N], const std::string& text) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(into, text.data(), n);
  std::memset(into + n, 0, N - n);
}

}  // namespace

Recorder::Recorder(const env::Settings& settings, int rank, int size, uint64_t comm_id,
                   const std::vector<std::string>& transports)
    : rank_(rank), comm_id_(comm_id) {
  const long long calls = settings.get_int("TBCOLL_FLIGHT_CALLS");
  if (calls < 0 || calls > (1 << 20)) {
    throw InvalidArgument(fmt::format("TBCOLL_FLIGHT_CALLS={}: a number of calls from 0 (off) to {}", calls, 1 << 20));
  }
  trace_dir_ = settings.get("TBCOLL_TRACE");
  tracing_ = !trace_dir_.empty();
  precise_ = tracing_;
  unix_offset_us_ = unix_us_now() - steady_us(std::chrono::steady_clock::now());
  if (calls == 0 || size < 2) return;  // one rank makes no calls worth recording
  const std::string dir = settings.is_set("TBCOLL_FLIGHT_DIR") ? settings.get("TBCOLL_FLIGHT_DIR") : flight::default_dir();
  path_ = fmt::format("{}/tbcoll-{:016x}-rank{}.flight", dir, comm_id, rank);
  capacity_ = static_cast<uint32_t>(calls);
  mapped_bytes_ = file_bytes(size, capacity_);
  void* memory = nullptr;
  try {
    make_dir(dir);
    memory = map_file(path_, mapped_bytes_);
  } catch (const Error& error) {
    log::warn("rank {}: the flight recorder is off: {}", rank, error.what());
    path_.clear();
    return;
  }
  // The file is new and zero-filled (ftruncate): only what is not zero is written.
  header_ = new (memory) Header();
  std::memcpy(header_->magic, kMagic, sizeof(kMagic));
  header_->version = kVersion;
  header_->header_bytes = sizeof(Header);
  header_->rank = rank;
  header_->size = size;
  header_->capacity = capacity_;
  header_->comm_id = comm_id;
  header_->pid = getpid();
  header_->created_us = unix_us_now();
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  copy_text(header_->host, host);
  header_->stalled_on.store(-1, std::memory_order_relaxed);
  header_->updated_us.store(header_->created_us, std::memory_order_relaxed);
  peers_ = new (static_cast<char*>(memory) + sizeof(Header)) PeerFigures[static_cast<size_t>(size)]();
  for (size_t p = 0; p < transports.size() && p < static_cast<size_t>(size); ++p) {
    if (static_cast<int>(p) != rank) copy_text(peers_[p].transport, transports[p]);
  }
  ring_ = new (static_cast<char*>(memory) + sizeof(Header) + sizeof(PeerFigures) * static_cast<size_t>(size))
      CallRecord[capacity_]();
  header_->state.store(static_cast<uint32_t>(State::kLive), std::memory_order_release);
}

Recorder::~Recorder() {
  if (tracing_ && !trace_.empty()) write_trace();
  if (header_ == nullptr) return;
  const auto state = static_cast<State>(header_->state.load(std::memory_order_relaxed));
  munmap(static_cast<void*>(header_), mapped_bytes_);
  // A clean end leaves nothing behind; a failure or an abort leaves the file for tbcoll-doctor.
  if (state == State::kLive || state == State::kFinished) unlink(path_.c_str());
}

void Recorder::copy_cached(char (&into)[kText], const char* text, Cached& cache) noexcept {
  if (text != cache.source) {  // names and algorithms are string constants: a repeated call copies kText bytes
    cache.source = text;
    std::memset(cache.bytes, 0, sizeof(cache.bytes));
    std::strncpy(cache.bytes, text, sizeof(cache.bytes) - 1);
  }
  std::memcpy(into, cache.bytes, sizeof(into));
}

CallKind Recorder::kind_of(const char* name) noexcept {
  if (std::strcmp(name, "send") == 0) return CallKind::kSend;
  if (std::strcmp(name, "recv") == 0) return CallKind::kRecv;
  return CallKind::kGroup;
}

CallRecord* Recorder::begin(const algo::CallInfo& call, uint64_t seq, bool collective) noexcept {
  const char* algorithm = algorithm_;
  algorithm_ = "";
  if (precise_) {
    began_ = std::chrono::steady_clock::now();
    current_ = CallEvent{CallEvent::Phase::kBegin, seq, call.name, call.count, call.dtype, call.op, call.has_op,
                         call.root, algorithm};
    tell(CallEvent::Phase::kBegin, true, 0);
  }
  if (header_ == nullptr) return nullptr;
  const uint64_t i = header_->calls.load(std::memory_order_relaxed);
  CallRecord& record = ring_[i % capacity_];
  record.stamp.store(2 * i + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // the odd stamp is seen before any field changes
  record.seq = seq;
  record.count = call.count;
  copy_cached(record.name, call.name, name_cache_);
  copy_cached(record.algorithm, algorithm, algorithm_cache_);
  record.root = call.root;
  record.dtype = static_cast<uint8_t>(call.dtype);
  record.op = static_cast<uint8_t>(call.has_op ? call.op : ReduceOp::kSum);
  record.kind = static_cast<uint8_t>(collective ? CallKind::kCollective : kind_of(call.name));
  record.outcome = static_cast<uint8_t>(Outcome::kRunning);
  record.start_us = steady_us(platform::coarse_now()) + unix_offset_us_;
  record.end_us = 0;
  record.stamp.store(2 * i + 2, std::memory_order_release);
  header_->calls.store(i + 1, std::memory_order_relaxed);
  if (collective) header_->entered.store(seq, std::memory_order_relaxed);
  header_->updated_us.store(record.start_us, std::memory_order_relaxed);
  return &record;
}

void Recorder::end(CallRecord* record, bool ok) noexcept {
  if (precise_) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began_).count();
    if (tracing_ && trace_.size() < kMostTraceEvents) {
      trace_.push_back({steady_us(began_) + unix_offset_us_, static_cast<int64_t>(seconds * 1e6), current_.seq,
                        current_.count, current_.name, current_.algorithm, current_.root, current_.dtype,
                        current_.op, current_.has_op, ok});
    }
    tell(CallEvent::Phase::kEnd, ok, seconds);
  }
  if (record == nullptr) return;
  if (ok) {  // no clock read: a call's end is the next one's start at the latest, and the trace has it exactly
    record->outcome = static_cast<uint8_t>(Outcome::kOk);
    if (record->kind == static_cast<uint8_t>(CallKind::kCollective)) {
      header_->completed.store(record->seq, std::memory_order_relaxed);
    }
    return;
  }
  const int64_t now = steady_us(platform::coarse_now()) + unix_offset_us_;
  record->end_us = now;
  std::atomic_thread_fence(std::memory_order_release);
  record->outcome = static_cast<uint8_t>(Outcome::kFailed);
  header_->updated_us.store(now, std::memory_order_relaxed);
}

void Recorder::tell(CallEvent::Phase phase, bool ok, double seconds) noexcept {
  if (!observer_) return;
  CallEvent event = current_;
  event.phase = phase;
  event.ok = ok;
  event.seconds = seconds;
  try {
    observer_(event);
  } catch (...) {
    // An observer that throws is not the call's failure.
  }
}

void Recorder::failed(const std::string& reason, bool aborted) noexcept {
  std::lock_guard<std::mutex> lock(failing_);
  if (header_ == nullptr) return;
  const auto state = static_cast<State>(header_->state.load(std::memory_order_relaxed));
  if (state == State::kFailed || state == State::kAborted) return;  // the first reason is the cause
  copy_text(header_->reason, reason);
  header_->reason_length.store(static_cast<uint32_t>(std::min(reason.size(), sizeof(header_->reason) - 1)),
                               std::memory_order_relaxed);
  header_->updated_us.store(unix_us_now(), std::memory_order_relaxed);
  header_->state.store(static_cast<uint32_t>(aborted ? State::kAborted : State::kFailed), std::memory_order_release);
  log::warn("rank {}: the flight recorder kept this rank's last calls in {} (tbcoll-doctor {} tells what the ranks "
            "did)", rank_, path_, path_.substr(0, path_.find_last_of('/')));
}

void Recorder::write_trace() noexcept {
  try {
    make_dir(trace_dir_);
    const std::string path = fmt::format("{}/tbcoll-{:016x}-rank{}.trace.json", trace_dir_, comm_id_, rank_);
    std::ofstream out(path + ".part", std::ios::trunc);
    out << "{\"traceEvents\":[\n";
    out << fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"rank {}"}}}})", rank_, rank_);
    out << fmt::format(",\n" R"({{"name":"thread_name","ph":"M","pid":{},"tid":0,"args":{{"name":"communicator {:016x}"}}}})",
                       rank_, comm_id_);
    for (const TraceEvent& e : trace_) {
      out << fmt::format(",\n" R"({{"name":"{}","cat":"tbcoll","ph":"X","ts":{},"dur":{},"pid":{},"tid":0,)"
                         R"("args":{{"seq":{},"count":{},"dtype":"{}","op":"{}","root":{},"algorithm":"{}","ok":{}}}}})",
                         e.name, e.begin_us, e.duration_us, rank_, e.seq, e.count, to_string(e.dtype),
                         e.has_op ? to_string(e.op) : "", e.root, e.algorithm, e.ok ? "true" : "false");
    }
    out << "\n]}\n";
    out.close();
    if (!out || std::rename((path + ".part").c_str(), path.c_str()) != 0) {
      log::warn("rank {}: cannot write the trace {}", rank_, path);
    }
  } catch (const std::exception& error) {
    log::warn("rank {}: cannot write the trace: {}", rank_, error.what());
  }
}

}  // namespace tbcoll::flight
