// Every TBCOLL_* knob, declared once with its default and a line of help (printed by tbcoll-info).
// Reading a knob that is not in the table is a programming error and throws.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tbcoll::env {

struct Knob {
  const char* name;
  const char* default_value;  ///< "" = unset
  const char* help;
};

/// All knobs, in the order tbcoll-info prints them.
const std::vector<Knob>& knobs();
/// Value from the environment, else the knob's default.
std::string get(const char* name);
/// True when the variable is set in the environment (even if empty).
bool is_set(const char* name);
/// Parses as integer / floating point; throws InvalidArgument naming the knob on junk.
long long get_int(const char* name);
double get_double(const char* name);

/// TBCOLL_* variables that are not library knobs but are read by tbcoll's own tools (tbcoll-run's TBCOLL_LOCAL_RANK,
/// the demo scripts' TBCOLL_PREFIX, ...): known names, never warned about.
const std::vector<Knob>& tool_variables();
/// True for knobs whose value must never be printed (TBCOLL_SECRET, TBCOLL_TOKEN).
bool is_secret(const std::string& name);
/// TBCOLL_SECRET as the process started with it: the library takes it out of the environment when it loads (its
/// children do not inherit the job secret: a launcher gives them theirs explicitly), and Settings reads it from
/// here. Null when the process started without one (a value set later is read from the environment as it is).
const std::string* secret_taken_at_load();
/// What may be shown of a variable's value: the value itself, or for a secret "(set, N bytes)".
std::string printable(const std::string& name, const std::string& value);
/// The TBCOLL_* names in `names` that are neither knobs nor tool variables, each with the closest known name when
/// one is within two edits ("TBCOLL_TIMEUOT (did you mean TBCOLL_TIMEOUT?)"). Pure: for tests and tbcoll-info.
std::vector<std::string> unknown_variables(const std::vector<std::string>& names);
/// True when a launcher's variable gives this process a rank or a world size: TBCOLL_RANK/WORLD_SIZE, OpenMPI's,
/// PMI's, Slurm's, or torch's RANK and WORLD_SIZE (a pair).
bool job_in_environment();
/// Warns (log::warn) that this process runs as a lone rank because nothing described a job: a lone rank's
/// all_reduce returns its own data and looks like a working job.
void warn_running_alone();
/// Warns once per process (log::warn) about every TBCOLL_* variable of the environment that is not a known name:
/// a misspelt knob would otherwise be ignored without a word.
void warn_unknown_variables();
/// For tests: the next warn_unknown_variables() looks at the environment again.
void check_environment_again();

/// A communicator's view of the knobs: its overrides (Config::knobs) first, then the environment, then the
/// defaults. Cheap to copy; read at set-up, never on a call's path.
class Settings {
 public:
  Settings() = default;
  /// Throws InvalidArgument for a name that is not a knob, or one that has a Config field of its own or is
  /// process-wide (TBCOLL_RANK, TBCOLL_DEBUG, ...), naming it.
  explicit Settings(std::map<std::string, std::string> overrides);
  std::string get(const char* name) const;
  /// Set by an override or in the environment.
  bool is_set(const char* name) const;
  long long get_int(const char* name) const;
  double get_double(const char* name) const;
  const std::map<std::string, std::string>& overrides() const { return overrides_; }

 private:
  std::map<std::string, std::string> overrides_;
};

}  // namespace tbcoll::env
