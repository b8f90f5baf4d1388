// tbcoll-run's agent: what a multi-host job runs on each host for each rank (`tbcoll-run --agent RANK HOST --
// prog args...`, started by ssh or another agent command). It takes its set-up from stdin (common.h), reports
// that it runs, starts the rank in a process group of its own once the launcher says where the rendezvous is, and
// ends it (SIGTERM, SIGKILL 2 s later) when told to or when stdin closes: a launcher that died, or an ssh
// connection that broke, takes the rank with it, which sshd alone would not do. When the rank is gone it removes
// the shared-memory segments dead ranks left on this host and exits with the rank's status (128+signal if killed).
#pragma once

namespace tbcoll::run {

/// The agent's main; argv[1] is "--agent".
int run_agent(int argc, char** argv);

}  // namespace tbcoll::run
