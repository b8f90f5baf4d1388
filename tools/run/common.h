// Pieces tbcoll-run's two roles share: the launcher (tbcoll_run.cc) and the agent it starts on every host of a
// multi-host job (agent.cc). POSIX, the standard library and the platform layer only.
//
// The agent protocol, over the agent's stdin (launcher -> agent) and stdout (agent -> launcher), one line each:
//
//   launcher -> agent   env NAME=VALUE        (escaped, see escape())  the rank's environment, repeated
//                       cwd PATH              start the rank there if it exists
//                       bind core|none|auto   CPU binding, as --bind-to
//                       serve [ADDRESS]       (rank 0's agent) listen for the rendezvous, on ADDRESS if given
//                       go                    end of the set-up lines
//   agent -> launcher   <kReadyMarker> [ROOT] the agent runs; rank 0's says where it listens (host:port)
//   launcher -> agent   root HOST:PORT        start the rank with TBCOLL_ROOT=HOST:PORT
//                       kill SIGNAL           end the rank with this signal (then SIGKILL after a grace)
//   EOF on stdin                              the launcher (or the ssh connection) is gone: end the rank
//
// The agent execs nothing before `root`, so a host that cannot be reached never leaves a rank behind.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace tbcoll::run {

/// The line an agent writes (alone on a line, on stdout) once it runs, before anything of its rank.
constexpr const char* kReadyMarker = "\x1e" "tbcoll-agent-ready";

/// Both ends close-on-exec; the read end non-blocking, the write end too if asked. False with errno.
bool make_pipe(int fds[2], bool nonblocking_write);
void close_pipe(int fds[2]);

/// 16 hex digits from /dev/urandom; empty on failure.
std::string random_token(size_t bytes = 8);

/// A blocking TCP socket listening on numeric address host (IPv4 or IPv6) at a port the kernel picks,
/// close-on-exec; -1 with errno.
int open_listener(const std::string& host);
/// "host:port" ("[v6]:port") a listener is bound to; empty on failure.
std::string listener_address(int fd);

/// 'text' for sh, with embedded single quotes as '\''.
std::string shell_quote(const std::string& text);

/// What torch.distributed's env:// and torchrun's scripts expect, from the rank's TBCOLL_* variables: RANK,
/// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (always overwritten: they describe this rank), MASTER_ADDR and
/// MASTER_PORT (left as they are when set). The master is TBCOLL_ROOT's host at master_port, or TBCOLL_ROOT's port
/// + 1 when master_port is 0 (the agents of a multi-host job agree on that without talking). torch's own store
/// listens there, beside tbcoll's.
void export_torch_environment(int master_port);
/// A TCP port free on host now, for torch's store (0 if none could be had).
int free_port(const std::string& host);
/// Protocol values: '%' and newlines as %25 and %0A (and back).
std::string escape(const std::string& text);
std::string unescape(const std::string& text);

/// The absolute path of this program (for agents on other hosts: the same path there), from argv[0] and PATH;
/// empty when it cannot be found.
std::string own_path(const char* argv0);

}  // namespace tbcoll::run
