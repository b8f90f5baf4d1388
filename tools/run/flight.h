// tbcoll-run and the flight recorder (src/flight/flight_file.h): every local rank of a job writes its flight files
// into one fresh directory of the job's (TBCOLL_FLIGHT_DIR, unless the user set it), so that when the job fails
// tbcoll-doctor reads just this job's files and its verdict goes out with tbcoll-run's own messages. On success
// the ranks remove their files and the directory goes too. Ranks on other hosts (multi-host jobs) write on their
// hosts: the failure message says where. POSIX and the standard library only (tbcoll-run links no library).
#pragma once

#include <string>
#include <vector>

namespace tbcoll::run {

/// A fresh directory, mode 0700, under ${TMPDIR:-/tmp}: "tbcoll-run-flight-XXXXXX". Empty, with a warning on
/// stderr, if it cannot be made (the ranks then write to their default directory).
std::string make_flight_dir();

/// Whether dir holds a flight file ("*.flight").
bool has_flight_files(const std::string& dir);

/// Removes dir if it is empty (a directory with anything left in it stays as it is).
void remove_if_empty(const std::string& dir);

/// tbcoll-doctor beside this program (argv0, as own_path() finds it), else on PATH; empty if neither.
std::string find_doctor(const char* argv0);

/// After a failed job: tbcoll-doctor's verdict on dir on stderr, every line prefixed "tbcoll-run: ", then where
/// the files are kept (or, without tbcoll-doctor, that it was not found). Blocks until the doctor exits.
void report_flight_files(const std::string& dir, const char* argv0);

/// After a failed multi-host job: where its ranks wrote their flight files. ranks_of_host: per host name, its
/// ranks; dir: TBCOLL_FLIGHT_DIR as the ranks got it, or empty for each host's default.
std::string remote_flight_note(const std::vector<std::pair<std::string, std::vector<int>>>& ranks_of_host,
                               const std::string& dir);

}  // namespace tbcoll::run
