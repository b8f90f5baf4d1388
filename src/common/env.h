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
