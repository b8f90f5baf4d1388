#include "common/env.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "common/log.h"
#include "platform/platform.h"
#include "tbcoll/error.hpp"

namespace tbcoll::env {

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = {
      {"TBCOLL_RANK", "", "rank of this process (falls back to OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)"},
      {"TBCOLL_WORLD_SIZE", "", "number of ranks (falls back to OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS)"},
      {"TBCOLL_ROOT", "", "host:port of the rendezvous store hosted by rank 0"},
      {"TBCOLL_ROOT_FD", "", "rank 0: an inherited socket already listening on TBCOLL_ROOT's port, to serve the store on (set by tbcoll-run)"},
      {"TBCOLL_TOKEN", "tbcoll", "job token; every connection must present it"},
      {"TBCOLL_SECRET", "", "job secret: every store and data connection proves it knows it (HMAC-SHA256 challenge-response both ways; needs OpenSSL's libcrypto); tbcoll-run draws one per job"},
      {"TBCOLL_SECRET_FILE", "", "file holding the job secret (instead of TBCOLL_SECRET)"},
      {"TBCOLL_INTEGRITY", "0", "1: every tcp message carries a MAC (AES-GMAC, keys drawn per connection from the job secret, which it needs) so data altered on an untrusted network fails the call; every rank must agree (docs/security.md)"},
      {"TBCOLL_STORE_LISTEN_ALL", "0", "1: rank 0's store listens on every interface, not only the address of TBCOLL_ROOT"},
      {"TBCOLL_TIMEOUT", "60", "deadline in seconds for every blocking call (1e9 or more, or inf: none)"},
      {"TBCOLL_TRANSPORT", "", "force a transport for every peer: tcp, shm, ibverbs, loopback or a plug-in's name (default: best per pair)"},
      {"TBCOLL_TRANSPORT_PLUGINS", "", "transport plug-ins to load, shared objects separated by ':' (each exports tbcoll_transport_plugin; tbcoll/transport.hpp says what)"},
      {"TBCOLL_ALGO", "", "force algorithms: a name (ring) for every collective that has it, or per collective (allreduce:ring,broadcast:chain); tbcoll-info lists them"},
      {"TBCOLL_DEBUG", "WARN", "log level: NONE, WARN, INFO, TRACE"},
      {"TBCOLL_SPIN_US", "auto", "microseconds a wait spins before it sleeps under TBCOLL_WAIT=auto; auto: 300 where every peer is over shm (the peer's futex wake ends the sleep), 20000 otherwise"},
      {"TBCOLL_WAIT", "auto", "how waits pass the time: auto (spin up to TBCOLL_SPIN_US, then sleep), spin (never sleep), block (sleep at once)"},
      {"TBCOLL_SPIN_YIELD", "-1", "0: spinning waits never call sched_yield; 1: now and then; 2: at every poll; -1: at every poll when the machine runs more ranks than CPUs, now and then when another rank on this machine may run on one of this rank's CPUs, else never"},
      {"TBCOLL_CHUNK_BYTES", "262144", "pipelining chunk size of the ring, chain, tree, mesh and hierarchical algorithms (4 KiB to 64 MiB)"},
      {"TBCOLL_DIRECT_MAX_BYTES", "32768", "all_reduce/all_gather (and all_to_all: a rank's whole buffer) up to this size use the direct exchange"},
      {"TBCOLL_TREE_MAX_BYTES", "65536", "broadcast, gather and scatter up to this size use the binomial tree when the size ranges decide (TBCOLL_TUNER=ranges; gather and scatter always: their rows are chosen by size)"},
      {"TBCOLL_CMA_MIN_BYTES", "4194304", "all_reduce from this size reads peers' buffers in place (shm, cross-memory attach); below it, above the direct size, the two-shot through the segment"},
      {"TBCOLL_CMA_MAX_BYTES", "33554432", "all_reduce from this size goes back to the shm two-shot (streaming stores beat cross-memory attach on DRAM-sized buffers)"},
      {"TBCOLL_CMA_GATHER_MIN_BYTES", "16384", "all_gather (gathered bytes) and broadcast from this size read peers' buffers in place"},
      {"TBCOLL_SHM_CMA", "1", "0 disables cross-memory attach (reading peers' buffers in place, Linux) in the shm transport"},
      {"TBCOLL_ONESHOT_MAX_BYTES", "2048", "all_reduce and all_gather up to this size use the shm one-shot fast path (all ranks on one host)"},
      {"TBCOLL_LINK_DELAY_US", "0", "emulate a slower link: every receive completes this many microseconds after it arrived (turns the shm fast paths off; TBCOLL_LINK_EMULATION=latency_us=N is the same)"},
      {"TBCOLL_LINK_EMULATION", "", "emulate a slower link on every endpoint: a preset (tb5-rdma, tb5-tcp, 10gbe; tbcoll-info prints their figures) and/or latency_us=N,gbps=N (Gbit/s per direction per peer), and dilate=K (1-10000: latency x K, bandwidth / K, priced so by the cost model; turns the shm fast paths off)"},
      {"TBCOLL_TUNER", "auto", "how the tuner picks point-to-point algorithms: model (the alpha-beta cost model), measure (the model shortlists those within 2x of its cheapest, the first calls of each size octave time them in batches, in turn, and the ranks agree on the fastest; runs may then differ in the last bits), ranges (the size knobs), auto (model, unless TBCOLL_DIRECT_MAX_BYTES is set)"},
      {"TBCOLL_TUNE_TRIALS", "6", "TBCOLL_TUNER=measure: the fewest calls per shortlisted algorithm and size octave before the ranks decide (1-100; smaller calls get more, up to 32, about 50 ms per algorithm)"},
      {"TBCOLL_TUNE_FILE", "", "saved tuner decisions (docs/tuner.md): TBCOLL_TUNER=measure reads the file if there and rank 0 adds each decision to it; the model only reads it (it must exist); a wrong or stale file is refused"},
      {"TBCOLL_FLIGHT_CALLS", "1024", "the flight recorder: how many of a communicator's last calls each rank keeps in its flight file (0: off; docs/hangs.md)"},
      {"TBCOLL_FLIGHT_DIR", "", "where the flight files go (default ${TMPDIR:-/tmp}/tbcoll-flight-<uid>; tbcoll-run gives each job its own): tbcoll-doctor DIR reads them, also while the job runs"},
      {"TBCOLL_TRACE", "", "a directory: each rank writes its calls there as Chrome trace JSON (chrome://tracing, Perfetto) when its communicator is destroyed"},
      {"TBCOLL_LINK_ALPHA_US", "", "the cost model's one-way latency per message between hosts (every link on one host), overriding the transport's figure and the emulation's"},
      {"TBCOLL_LINK_GBPS", "", "the cost model's link bandwidth in Gbit/s per direction between hosts (every link on one host), overriding the emulation's"},
      {"TBCOLL_HOST_ID", "", "host identity (default: hostname + boot id): ranks with equal ids use shm, and the hierarchical schedules group ranks by it"},
      {"TBCOLL_SOCKET_ADDR", "", "address to listen on and advertise (default: the one that reaches the root)"},
      {"TBCOLL_SOCKET_IFNAME", "", "interfaces for the tcp and ibverbs side-channel listeners and tbcoll-run's rendezvous, as NCCL_SOCKET_IFNAME: prefixes (en5,eth), =exact, ^ excludes (^docker,lo); default: the one that reaches the root"},
      {"TBCOLL_TCP_BUFFER_BYTES", "4194304", "SO_SNDBUF/SO_RCVBUF of data sockets, 64 KiB to 1 GiB (0 = kernel default)"},
      {"TBCOLL_IB_MODE", "auto", "ibverbs queue pairs: uc (Apple's Thunderbolt subset: unreliable connected, SEND only), rc (reliable connected, RoCE/InfiniBand), auto (rc where the device creates an RC queue pair, else uc; both ends of a pair agree, uc if they differ)"},
      {"TBCOLL_IB_DEVICES", "", "ibverbs devices to use, comma-separated (rdma_en3,rdma_en4 or rxe0; default: for each peer the device whose IPv4 subnet holds one of the peer's, as each Thunderbolt cable has a subnet of its own), or a device matrix: a path to MLX's JSON file (N x N, row = this rank, each cell null or [] for no cable, \"rdma_enX\" or a list, one name per cable) or the JSON itself; unset: MLX_IBV_DEVICES (tbcoll-run sets it from a hostfile's \"rdma\" fields)"},
      {"TBCOLL_IB_RAILS", "1", "ibverbs without a device matrix: how many cables (devices on a subnet shared with the peer) a peer is reached over at most, each a rail"},
      {"TBCOLL_IB_STRIPE_BYTES", "65536", "ibverbs messages from this size are cut across a peer's rails (several cables); smaller ones go on one"},
      {"TBCOLL_IB_POST_BATCH", "0", "ibverbs work requests posted per ibv_post_send (one doorbell) at most, 1-32; 0: 1 on Apple's librdma (lists untried there), 16 elsewhere"},
      {"TBCOLL_IB_MAX_QPS", "auto", "ibverbs queue pairs per device in a process (two per peer and rail: small frames and bulk slots): auto = the device's max_qp (ibv_query_device), at most 10 on Apple's rdma_enN devices (10 there, no limit elsewhere, when it reports none); past it, peers use tcp (TBCOLL_IB_MODE=auto) or init fails naming it"},
      {"TBCOLL_IB_SLOT_BYTES", "0", "ibverbs bulk slot size, a multiple of 4096 from 16 KiB to 1 MiB (a connection uses the smaller of its ends'); 0: 512 KiB, or none (4 KiB frames only) on Apple's librdma before macOS 26.3"},
      {"TBCOLL_IB_SPIN_US", "auto", "ibverbs waits past the core's spin (TBCOLL_SPIN_US): how long after the last traffic they keep polling (yielding the CPU between polls) before they nap, us; -1: always; auto: always on Apple's librdma (as JACCL and llama.cpp poll), 200 elsewhere"},
      {"TBCOLL_IB_NAP_US", "50", "ibverbs waits: how long a nap lasts once they stop polling, 1 to 10000 us"},
      {"TBCOLL_IB_ZERO_COPY", "auto", "ibverbs: 1 sends large messages in memory registered with the communicator straight from it (no copy into the link's slots; both ends of a link must have it on), 0 copies them; auto: on RC links (on UC a zero-copy slot carries a sum, a pass over it on each side), off on Apple's librdma (UC) until tbcoll-rdma-check has verified it there (its zero-copy line says so)"},
      {"TBCOLL_IB_PAYLOAD_SUM", "0", "1: ibverbs senders sum every frame's payload and receivers check it (a debugging aid; UC loss is caught by sequence numbers either way)"},
      {"TBCOLL_IB_LATENCY_US", "auto", "ibverbs one-way latency the cost model assumes, us (tbcoll-rdma-check and tbcoll-perf --pingpong measure it); auto: Thunderbolt 5's published 4.6 on rdma_enN, 2 elsewhere"},
      {"TBCOLL_IB_GBPS", "auto", "ibverbs bandwidth of one queue pair the cost model assumes, GB/s (measured like TBCOLL_IB_LATENCY_US); auto: Thunderbolt 5's published 9.4 on rdma_enN, 10 elsewhere"},
  };
  return table;
}

const std::vector<Knob>& tool_variables() {
  static const std::vector<Knob> table = {
      {"TBCOLL_LOCAL_RANK", "", "tbcoll-run: the rank's number among the ranks of its host"},
      {"TBCOLL_LOCAL_SIZE", "", "tbcoll-run: how many ranks run on the rank's host"},
      {"TBCOLL_PREFIX", "~/tbcoll", "tools/run-2node-demo.sh: the install prefix on every host"},
      {"TBCOLL_DEMO_MODEL", "", "tools/run-2node-demo.sh: the model's path on every host"},
      {"TBCOLL_DEMO_LAUNCHER", "ssh -o BatchMode=yes", "tools/run-2node-demo.sh: the command that reaches a host"},
      {"TBCOLL_BUILD_DIR", "build", "tests/python: the build tree the module and tbcoll-run are taken from"},
      {"TBCOLL_RDMA_QEMU_CACHE", "", "tools/test-rdma-qemu.sh: where the guest kernel is kept"},
      {"TBCOLL_PIP_BUILD_DIR", "build-pip", "python/setup.py: the CMake build tree pip install builds in"},
  };
  return table;
}

bool is_secret(const std::string& name) { return name == "TBCOLL_SECRET" || name == "TBCOLL_TOKEN"; }

std::string printable(const std::string& name, const std::string& value) {
  return is_secret(name) ? fmt::format("(set, {} bytes)", value.size()) : value;
}

namespace {

// Levenshtein distance, for "did you mean" (names are short).
size_t edits_between(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> unknown_variables(const std::vector<std::string>& names) {
  std::vector<std::string> unknown;
  for (const std::string& name : names) {
    if (name.rfind("TBCOLL_", 0) != 0) continue;
    std::string closest;
    size_t best = 3;  // suggest only within two edits
    bool known = false;
    for (const auto* table : {&knobs(), &tool_variables()}) {
      for (const Knob& knob : *table) {
        const size_t edits = edits_between(name, knob.name);
        known = known || edits == 0;
        if (edits < best) {
          best = edits;
          closest = knob.name;
        }
      }
    }
    if (known) continue;
    unknown.push_back(closest.empty() ? name : fmt::format("{} (did you mean {}?)", name, closest));
  }
  return unknown;
}

bool job_in_environment() {
  for (const char* name : {"TBCOLL_RANK", "TBCOLL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr;
}

void warn_running_alone() {
  log::warn("[config] no rank or world size in the environment (TBCOLL_RANK and TBCOLL_WORLD_SIZE, OpenMPI's, "
            "PMI's, Slurm's or torch's RANK and WORLD_SIZE): this process runs alone, as rank 0 of 1. Start ranks "
            "with tbcoll-run -n N, mpirun, srun or torchrun; TBCOLL_WORLD_SIZE=1 runs one rank without this warning");
}

namespace {
std::atomic<bool> environment_checked{false};
}  // namespace

void warn_unknown_variables() {
  if (environment_checked.exchange(true)) return;  // once per process: its environment does not change
  for (const std::string& unknown : unknown_variables(platform::environment_names())) {
    log::warn("[env] {} is not a tbcoll variable and is ignored (tbcoll-info lists them)", unknown);
  }
}

void check_environment_again() { environment_checked = false; }

static const Knob& find(const char* name) {
  for (const Knob& knob : knobs()) {
    if (std::string(knob.name) == name) return knob;
  }
  throw Error(tbcollInternalError, fmt::format("[env] knob {} is not declared in the knob table", name));
}

namespace {

// Loaded before main() (or before a dlopen returns), while nothing else of the library runs: the environment is
// changed before any thread of ours reads it.
std::string* take_secret() {
  const char* value = std::getenv("TBCOLL_SECRET");
  if (value == nullptr) return nullptr;
  auto* kept = new std::string(value);  // for the life of the process
  unsetenv("TBCOLL_SECRET");
  return kept;
}

const std::string* const taken_at_load = take_secret();

}  // namespace

const std::string* secret_taken_at_load() { return taken_at_load; }

std::string get(const char* name) { return Settings().get(name); }

bool is_set(const char* name) { return Settings().is_set(name); }

long long get_int(const char* name) { return Settings().get_int(name); }

double get_double(const char* name) { return Settings().get_double(name); }

Settings::Settings(std::map<std::string, std::string> overrides) : overrides_(std::move(overrides)) {
  // Knobs with a Config field of their own, or that act on the whole process: not settable per communicator.
  static const char* const kNotPerCommunicator[] = {"TBCOLL_RANK",      "TBCOLL_WORLD_SIZE", "TBCOLL_ROOT",
                                                    "TBCOLL_ROOT_FD",   "TBCOLL_TOKEN",      "TBCOLL_TIMEOUT",
                                                    "TBCOLL_TRANSPORT", "TBCOLL_ALGO",       "TBCOLL_DEBUG",
                                                    "TBCOLL_TRANSPORT_PLUGINS"};
  for (const auto& [name, value] : overrides_) {
    bool known = false;
    for (const Knob& knob : knobs()) known = known || name == knob.name;
    if (!known) throw InvalidArgument(fmt::format("[config] {:?} is not a knob (tbcoll-info lists them)", name));
    for (const char* refused : kNotPerCommunicator) {
      if (name == refused) {
        throw InvalidArgument(fmt::format("[config] {} cannot be set per communicator: it has a Config field of its "
                                          "own or acts on the whole process", name));
      }
    }
  }
}

std::string Settings::get(const char* name) const {
  const Knob& knob = find(name);
  auto it = overrides_.find(name);
  if (it != overrides_.end()) return it->second;
  const char* value = std::getenv(name);
  if (value == nullptr && taken_at_load != nullptr && std::strcmp(name, "TBCOLL_SECRET") == 0) return *taken_at_load;
  return value != nullptr ? std::string(value) : std::string(knob.default_value);
}

bool Settings::is_set(const char* name) const {
  find(name);
  return overrides_.count(name) != 0 || std::getenv(name) != nullptr ||
         (taken_at_load != nullptr && std::strcmp(name, "TBCOLL_SECRET") == 0);
}

long long Settings::get_int(const char* name) const {
  std::string text = get(name);
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0') {
    throw InvalidArgument(fmt::format("[env] {}={:?} is not an integer", name, text));
  }
  return value;
}

double Settings::get_double(const char* name) const {
  std::string text = get(name);
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0') {
    throw InvalidArgument(fmt::format("[env] {}={:?} is not a number", name, text));
  }
  return value;
}

}  // namespace tbcoll::env
