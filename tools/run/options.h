// tbcoll-run's command line (see print_usage in options.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/run/hosts.h"

namespace tbcoll::run {

struct Options {
  int world_size = 0;                  // 0 with hosts: every slot
  bool tag_output = false;
  double timeout_s = 0;                // 0: no time limit
  std::vector<std::string> extra_env;  // NAME=VALUE from -x (a bare NAME takes our value)
  std::vector<char*> prog_argv;        // null-terminated
  std::string bind_to = "auto";        // core | none | auto (core when ranks <= usable CPUs)
  std::string secret;                  // --secret-file's contents; empty: the environment's, or drawn per job
  // Multi-host jobs (--hosts or --hostfile): every rank through an agent command.
  std::optional<HostList> hosts;
  std::string launcher = "ssh -o BatchMode=yes";
  double connect_timeout_s = 30;
  std::string agent_path;  // tbcoll-run on the hosts; default: this program's absolute path
};

void print_usage(FILE* out);
/// Fills `opts`; returns an exit code when the launcher should stop right away (help, or a usage error printed).
std::optional<int> parse_args(int argc, char** argv, Options& opts);

}  // namespace tbcoll::run
