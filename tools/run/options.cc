#include "tools/run/options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/secret_file.h"
#include "tools/run/common.h"

namespace tbcoll::run {
namespace {

constexpr int kMaxRanks = 1024;
constexpr int kExitUsage = 2;
constexpr double kMaxTimeoutSeconds = 1e8;
constexpr const char* kSecretInArgv =
    "a secret on the command line is readable by every user of this machine (ps): give it with --secret-file FILE "
    "(mode 0600), or export TBCOLL_SECRET (or TBCOLL_SECRET_FILE) before tbcoll-run";

// One line: what is wrong, and where the help is.
int usage_error(const std::string& message) {
  std::fprintf(stderr, "tbcoll-run: %s (usage: tbcoll-run -n N [options] [--] prog [args...]; tbcoll-run --help "
               "lists the options)\n", message.c_str());
  return kExitUsage;
}

bool parse_seconds(const std::string& value, double* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(value.c_str(), &end);
  // Capped: far beyond it, a deadline's nanosecond count would overflow (and land in the past).
  return !value.empty() && *end == '\0' && errno == 0 && std::isfinite(*out) && *out > 0 && *out <= kMaxTimeoutSeconds;
}

// The secret's sources in our environment: set means set to something (an empty TBCOLL_SECRET would run the job
// without a secret, silently).
std::optional<int> check_secret_environment(const Options& opts) {
  if (!opts.secret.empty()) return std::nullopt;  // --secret-file wins over the environment
  for (const char* name : {"TBCOLL_SECRET", "TBCOLL_SECRET_FILE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value == '\0') {
      return usage_error(std::string(name) + " is set but empty: unset it (tbcoll-run draws a secret per job) or give "
                         "the secret (--secret-file FILE)");
    }
  }
  for (const std::string& assignment : opts.extra_env) {
    if (assignment == "TBCOLL_SECRET=" || assignment == "TBCOLL_SECRET_FILE=") {
      return usage_error("-x " + assignment.substr(0, assignment.size() - 1) + ": it is empty here");
    }
  }
  return std::nullopt;
}

}  // namespace

void print_usage(FILE* out) {
  std::fputs(
      "usage: tbcoll-run -n N [options] [--] prog [args...]\n"
      "       tbcoll-run --hosts H1[:SLOTS],H2[:SLOTS] [-n N] [options] [--] prog [args...]\n"
      "       tbcoll-run --hostfile FILE [-n N] [options] [--] prog [args...]\n"
      "Starts N copies of prog as tbcoll ranks 0..N-1: on this machine, or placed host by host over\n"
      "the slots of the hosts (default N: every slot) and started there through an agent command.\n"
      "  -n, -np N           number of ranks (1..1024; required without hosts)\n"
      "  --tag-output        prefix every output line with \"[RANK] \" (\"[RANK HOST] \" with hosts)\n"
      "  --timeout SECONDS   kill the job and exit 124 if it runs longer\n"
      "  -x NAME[=VALUE]     set an extra environment variable in every rank, NAME alone passes ours on\n"
      "                      (repeatable; the variables tbcoll-run sets below, the token excepted,\n"
      "                      are refused: each rank gets its own)\n"
      "  --bind-to core|none pin rank i (local rank i on a host) to the i-th usable CPU, as mpirun does\n"
      "                      (default: core when there are at least as many CPUs as ranks, else none;\n"
      "                      with hosts, only on hosts that run several ranks)\n"
      "  --hosts LIST        hosts and their slots (default 1), comma-separated\n"
      "  --hostfile FILE     one `host [slots=N]` per line, or MLX's JSON hostfile ({\"ssh\", \"ips\"})\n"
      "  --launcher CMD      agent command, run as `CMD HOST sh -c '<command>'` (default\n"
      "                      \"ssh -o BatchMode=yes\"; e.g. \"ip netns exec\" for network namespaces)\n"
      "  --connect-timeout S a host whose agent has not answered after S seconds fails the job (30)\n"
      "  --agent-path PATH   tbcoll-run on the hosts (default: this program's absolute path)\n"
      "  --secret-file FILE  the job secret the ranks prove to each other: FILE's contents (mode 0600,\n"
      "                      a pipe too: <(pass show job)); default: TBCOLL_SECRET or TBCOLL_SECRET_FILE\n"
      "                      of the environment, else one drawn per job. Never on the command line\n"
      "                      (--secret, -x TBCOLL_SECRET=...): every user of the machine can read it\n"
      "  -h, --help          show this help\n"
      "  --version           print the version\n"
      "Ranks get TBCOLL_RANK, TBCOLL_WORLD_SIZE, TBCOLL_LOCAL_RANK, TBCOLL_LOCAL_SIZE, TBCOLL_ROOT\n"
      "and TBCOLL_TOKEN (random unless already set), and what torch.distributed's env:// reads: RANK,\n"
      "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (the last two unless set:\n"
      "a free port here; with hosts, rank 0's host at TBCOLL_ROOT's port + 1).\n"
      "With hosts, rank 0's host serves the rendezvous\n"
      "on its address on TBCOLL_SOCKET_IFNAME's interface (never loopback), and the ranks get the -x\n"
      "variables and every TBCOLL_* variable of ours. The first failing rank stops the job on every\n"
      "host and its status becomes the exit status (128+signal if it was killed by a signal).\n"
      "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every rank; ctrl-Z stops the local ranks\n"
      "with the launcher.\n",
      out);
}

// One option with its value into opts; a usage error's exit status otherwise. hosts_from: the option that gave
// the hosts, if one did.
namespace {
std::optional<int> apply_option(const std::string& arg, std::string value, Options& opts, std::string& hosts_from) {
  if (arg == "--secret") {
    return usage_error(kSecretInArgv);
  } else if (arg == "--secret-file") {
    const secret_file::Read read = secret_file::read(value);
    if (!read.error.empty()) return usage_error("--secret-file " + value + " " + read.error);
    opts.secret = read.secret;
  } else if (arg == "--bind-to") {
    if (value != "core" && value != "none") return usage_error("--bind-to expects core or none, got '" + value + "'");
    opts.bind_to = value;
  } else if (arg == "-x") {
    if (value.empty() || value[0] == '=') return usage_error("-x expects NAME=VALUE or NAME, got '" + value + "'");
    if (value.rfind("TBCOLL_SECRET=", 0) == 0) return usage_error(std::string("-x TBCOLL_SECRET=...: ") + kSecretInArgv);
    const std::string name = value.substr(0, value.find('='));
    for (const char* set : {"TBCOLL_RANK", "TBCOLL_WORLD_SIZE", "TBCOLL_LOCAL_RANK", "TBCOLL_LOCAL_SIZE", "TBCOLL_ROOT",
                            "TBCOLL_ROOT_FD", "TBCOLL_HOST_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
      if (name == set) return usage_error("-x " + value + ": tbcoll-run sets " + name + " for every rank itself");
    }
    if (value.find('=') == std::string::npos) {
      const char* ours = std::getenv(value.c_str());
      if (ours == nullptr) return usage_error("-x " + value + ": " + value + " is not set here");
      value += std::string("=") + ours;
    }
    opts.extra_env.push_back(value);
  } else if (arg == "--timeout") {
    if (!parse_seconds(value, &opts.timeout_s)) {
      return usage_error("bad timeout '" + value + "' (expected seconds in (0, 1e8])");
    }
  } else if (arg == "--connect-timeout") {
    if (!parse_seconds(value, &opts.connect_timeout_s)) {
      return usage_error("bad connect timeout '" + value + "' (expected seconds in (0, 1e8])");
    }
  } else if (arg == "--hosts" || arg == "--hostfile") {
    if (!hosts_from.empty()) return usage_error(arg + " after " + hosts_from + ": give the hosts once");
    hosts_from = arg;
    try {
      if (arg == "--hosts") {
        opts.hosts = parse_hosts(value);
      } else {
        std::ifstream file(value);
        if (!file) return usage_error("cannot read hostfile " + value + ": " + std::strerror(errno));
        std::stringstream text;
        text << file.rdbuf();
        opts.hosts = parse_hostfile(text.str(), value);
      }
    } catch (const HostError& error) {
      return usage_error(error.what());
    }
  } else if (arg == "--launcher") {
    if (value.find_first_not_of(" \t") == std::string::npos) return usage_error("--launcher is empty");
    opts.launcher = value;
  } else if (arg == "--agent-path") {
    opts.agent_path = value;
  } else if (arg == "-n" || arg == "-np") {
    char* end = nullptr;
    errno = 0;
    long n = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno != 0 || n < 1 || n > kMaxRanks) {
      return usage_error("bad number of ranks '" + value + "' (expected 1.." + std::to_string(kMaxRanks) + ")");
    }
    opts.world_size = static_cast<int>(n);
  } else {
    return usage_error("unknown option " + arg);
  }
  return std::nullopt;
}
}  // namespace

std::optional<int> parse_args(int argc, char** argv, Options& opts) {
  int i = 1;
  std::string hosts_from;  // the option that gave the hosts
  for (; i < argc && argv[i][0] == '-'; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      print_usage(stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("tbcoll-run %s\n", TBCOLL_VERSION);
      return 0;
    }
    if (arg == "--tag-output") {
      opts.tag_output = true;
      continue;
    }
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {  // --timeout=5, --hosts=a,b
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
    } else if (arg == "-n" || arg == "-np" || arg == "--timeout" || arg == "-x" || arg == "--bind-to" || arg == "--secret" ||
               arg == "--secret-file" ||
               arg == "--hosts" || arg == "--hostfile" || arg == "--launcher" || arg == "--connect-timeout" ||
               arg == "--agent-path") {
      if (i + 1 >= argc) return usage_error("option " + arg + " needs a value");
      value = argv[++i];
    } else {
      return usage_error("unknown option " + arg);
    }
    if (std::optional<int> refused = apply_option(arg, value, opts, hosts_from)) return refused;
  }
  if (std::optional<int> refused = check_secret_environment(opts)) return refused;
  if (opts.world_size == 0 && !opts.hosts) return usage_error("the number of ranks (-n N) is required");
  if (i >= argc) return usage_error("no program to run");
  if (opts.hosts) {
    try {
      const std::vector<int> placed = place_ranks(*opts.hosts, opts.world_size);
      if (placed.size() > static_cast<size_t>(kMaxRanks)) return usage_error("more than 1024 ranks");
      rank_device_matrix(*opts.hosts, placed);  // throws HostError for a partial "rdma" matrix
      opts.world_size = static_cast<int>(placed.size());
    } catch (const HostError& error) {
      return usage_error(error.what());
    }
    if (opts.agent_path.empty()) opts.agent_path = own_path(argv[0]);
    if (opts.agent_path.empty()) return usage_error("cannot find this program's path: give --agent-path");
  }
  opts.prog_argv.assign(argv + i, argv + argc);
  opts.prog_argv.push_back(nullptr);
  return std::nullopt;
}

}  // namespace tbcoll::run
