// Every TBCOLL_* knob, declared once with its default and a line of help (printed by tbcoll-info).
// Reading a knob that is not in the table is a programming error and throws.
#pragma once

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

}  // namespace tbcoll::env
