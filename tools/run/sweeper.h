// The sweeper: a process that outlives a launcher killed outright and removes its ranks' shm segments.
#pragma once

#include <sys/types.h>

#include <string>

namespace tbcoll::run {

/// A launcher killed outright (SIGKILL) cannot sweep: its ranks die with it (parent-death guard) and those still
/// in set-up leave their segments. So a sweeper process, in a session of its own (signals to the launcher's group
/// or terminal do not reach it), holds the read end of a pipe the launcher reports every rank's pid on
/// (report_rank). When the pipe closes (the launcher ended, however), it waits for those ranks to be gone (at
/// most a few seconds) and removes the segments they own. After a normal end it finds nothing left and exits at
/// once. Returns the pipe's write end, or -1 when it could not be started (the other sweeps remain).
int start_sweeper();
/// Tells the sweeper behind fd (start_sweeper's; -1: none) about a rank's pid.
void report_rank(int fd, pid_t pid);

/// Whether the ranks can load libcrypto for the job secret's HMAC (src/common/auth.cc loads the same libraries).
bool crypto_loadable();

}  // namespace tbcoll::run
