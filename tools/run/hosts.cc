#include "tools/run/hosts.h"

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>

namespace tbcoll::run {
namespace {

constexpr int kMaxSlots = 1024;

int parse_slots(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 1 || n > kMaxSlots) {
    throw HostError(where + ": slots '" + text + "' is not a number in 1.." + std::to_string(kMaxSlots));
  }
  return static_cast<int>(n);
}

void check_name(const std::string& name, const std::string& where) {
  if (name.empty()) throw HostError(where + ": empty host name");
  if (name[0] == '-') throw HostError(where + ": host name '" + name + "' starts with '-' (ssh would take it for an option)");
  for (char c : name) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '\'' || c == '"' || c == ',') {
      throw HostError(where + ": host name '" + name + "' has a space, quote or comma");
    }
  }
}

// A JSON value: just what hostfiles need.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
};

class JsonReader {
 public:
  JsonReader(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  Json document() {
    Json value = parse(0);
    skip_space();
    if (at_ != text_.size()) fail("text after the end of the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    int line = 1;
    for (size_t i = 0; i < at_ && i < text_.size(); ++i) line += text_[i] == '\n';
    throw HostError(path_ + ":" + std::to_string(line) + ": JSON hostfile: " + what);
  }
  void skip_space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool take(char c) {
    skip_space();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  std::string string_value() {
    expect('"');
    std::string out;
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c == '\\') {
        if (at_ >= text_.size()) break;
        const char e = text_[at_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': fail("\\u escapes are not supported in hostfiles");
          default: out += e;
        }
      } else {
        out += c;
      }
    }
    if (at_ >= text_.size()) fail("unterminated string");
    ++at_;
    return out;
  }
  Json parse(int depth) {
    if (depth > 16) fail("nested too deeply");
    skip_space();
    if (at_ >= text_.size()) fail("unexpected end");
    Json value;
    const char c = text_[at_];
    if (c == '{') {
      ++at_;
      value.kind = Json::kObject;
      if (take('}')) return value;
      do {
        skip_space();
        std::string key = string_value();
        expect(':');
        value.fields[key] = parse(depth + 1);
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++at_;
      value.kind = Json::kArray;
      if (take(']')) return value;
      do {
        value.items.push_back(parse(depth + 1));
      } while (take(','));
      expect(']');
    } else if (c == '"') {
      value.kind = Json::kString;
      value.text = string_value();
    } else if (text_.compare(at_, 4, "null") == 0) {
      at_ += 4;
    } else if (text_.compare(at_, 4, "true") == 0 || text_.compare(at_, 5, "false") == 0) {
      value.kind = Json::kBool;
      value.number = c == 't';
      at_ += c == 't' ? 4 : 5;
    } else {
      const char* start = text_.c_str() + at_;
      char* end = nullptr;
      value.number = std::strtod(start, &end);
      if (end == start) fail(std::string("unexpected '") + c + "'");
      value.kind = Json::kNumber;
      at_ += static_cast<size_t>(end - start);
    }
    return value;
  }

  const std::string& text_;
  const std::string& path_;
  size_t at_ = 0;
};

// An entry's "rdma": one cell per host, each null, [], a name or a list of names.
void read_rdma(const Json& rdma, const std::string& where, Host* host) {
  if (rdma.kind != Json::kArray) throw HostError(where + ": \"rdma\" is not a list (one cell per host)");
  host->has_rdma = true;
  for (size_t k = 0; k < rdma.items.size(); ++k) {
    const Json& cell = rdma.items[k];
    const std::string at = where + ": \"rdma\" cell " + std::to_string(k);
    std::vector<std::string> names;
    if (cell.kind == Json::kString) {
      names.push_back(cell.text);
    } else if (cell.kind == Json::kArray) {
      for (const Json& name : cell.items) {
        if (name.kind != Json::kString) throw HostError(at + " holds something other than device names");
        names.push_back(name.text);
      }
    } else if (cell.kind != Json::kNull) {
      throw HostError(at + " is not null, a device name or a list of them");
    }
    for (const std::string& name : names) {
      if (name.empty() || name.find_first_of("\"\\ ") != std::string::npos) {
        throw HostError(at + ": '" + name + "' is not a device name");
      }
    }
    host->rdma.push_back(std::move(names));
  }
}

// Every host's "rdma" has a cell per host, and nothing on the diagonal.
void check_rdma(const HostList& list, const std::string& path) {
  for (size_t h = 0; h < list.hosts.size(); ++h) {
    const Host& host = list.hosts[h];
    if (!host.has_rdma) continue;
    const std::string where = path + ": host " + std::to_string(h);
    if (host.rdma.size() != list.hosts.size()) {
      throw HostError(where + ": \"rdma\" has " + std::to_string(host.rdma.size()) + " cells, one per host needs " +
                      std::to_string(list.hosts.size()));
    }
    if (!host.rdma[h].empty()) throw HostError(where + ": \"rdma\" cell " + std::to_string(h) + " (itself) is not null");
  }
}

HostList from_json(const Json& document, const std::string& path) {
  HostList list;
  const Json* hosts = &document;
  if (document.kind == Json::kObject) {
    auto it = document.fields.find("hosts");
    if (it == document.fields.end()) throw HostError(path + ": JSON hostfile without \"hosts\"");
    hosts = &it->second;
    auto envs = document.fields.find("envs");
    if (envs != document.fields.end()) {
      if (envs->second.kind != Json::kArray) throw HostError(path + ": \"envs\" is not a list");
      for (const Json& item : envs->second.items) {
        if (item.kind != Json::kString || item.text.find('=') == std::string::npos || item.text[0] == '=') {
          throw HostError(path + ": \"envs\" entries must be \"NAME=VALUE\" strings");
        }
        list.env.push_back(item.text);
      }
    }
  }
  if (hosts->kind != Json::kArray) throw HostError(path + ": \"hosts\" is not a list");
  for (size_t i = 0; i < hosts->items.size(); ++i) {
    const Json& entry = hosts->items[i];
    const std::string where = path + ": host " + std::to_string(i);
    if (entry.kind != Json::kObject) throw HostError(where + " is not an object");
    auto ssh = entry.fields.find("ssh");
    if (ssh == entry.fields.end() || ssh->second.kind != Json::kString) throw HostError(where + " has no \"ssh\" name");
    Host host;
    host.name = ssh->second.text;
    check_name(host.name, where);
    auto ips = entry.fields.find("ips");
    if (ips != entry.fields.end()) {
      if (ips->second.kind != Json::kArray) throw HostError(where + ": \"ips\" is not a list");
      if (!ips->second.items.empty()) {
        if (ips->second.items[0].kind != Json::kString) throw HostError(where + ": \"ips\" holds a non-string");
        host.address = ips->second.items[0].text;
      }
    }
    auto slots = entry.fields.find("slots");
    if (slots != entry.fields.end()) {
      const double n = slots->second.number;
      if (slots->second.kind != Json::kNumber || n < 1 || n > kMaxSlots || n != static_cast<int>(n)) {
        throw HostError(where + ": \"slots\" is not a number in 1.." + std::to_string(kMaxSlots));
      }
      host.slots = static_cast<int>(n);
    }
    auto rdma = entry.fields.find("rdma");
    if (rdma != entry.fields.end()) read_rdma(rdma->second, where, &host);
    list.hosts.push_back(host);
  }
  if (list.hosts.empty()) throw HostError(path + ": no hosts");
  check_rdma(list, path);
  return list;
}

}  // namespace

HostList parse_hosts(const std::string& text) {
  HostList list;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::string where = "--hosts '" + text + "'";
    Host host;
    size_t colon = item.rfind(':');
    if (!item.empty() && item[0] == '[') {  // [v6]:slots
      const size_t close = item.find(']');
      if (close == std::string::npos) throw HostError(where + ": '" + item + "' lacks ']'");
      host.name = item.substr(1, close - 1);
      colon = close + 1 < item.size() && item[close + 1] == ':' ? close + 1 : std::string::npos;
      if (close + 1 < item.size() && colon == std::string::npos) throw HostError(where + ": bad item '" + item + "'");
    } else {
      host.name = item.substr(0, colon);
    }
    check_name(host.name, where);
    if (colon != std::string::npos) host.slots = parse_slots(item.substr(colon + 1), where);
    list.hosts.push_back(host);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return list;
}

HostList parse_hostfile(const std::string& text, const std::string& path) {
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '[' || text[first] == '{')) {
    return from_json(JsonReader(text, path).document(), path);
  }
  HostList list;
  size_t start = 0;
  for (int line_number = 1; start < text.size(); ++line_number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    const std::string where = path + ":" + std::to_string(line_number);
    line = line.substr(0, line.find('#'));
    std::vector<std::string> words;
    size_t at = 0;
    while (true) {
      at = line.find_first_not_of(" \t\r", at);
      if (at == std::string::npos) break;
      const size_t stop = line.find_first_of(" \t\r", at);
      words.push_back(line.substr(at, stop == std::string::npos ? std::string::npos : stop - at));
      at = stop;
    }
    if (words.empty()) continue;
    Host host;
    host.name = words[0];
    check_name(host.name, where);
    for (size_t k = 1; k < words.size(); ++k) {
      if (words[k].compare(0, 6, "slots=") == 0) {
        host.slots = parse_slots(words[k].substr(6), where);
      } else if (words[k].compare(0, 10, "max_slots=") != 0) {  // OpenMPI's, harmless here
        throw HostError(where + ": unknown word '" + words[k] + "' (expected: host [slots=N])");
      }
    }
    list.hosts.push_back(host);
  }
  if (list.hosts.empty()) throw HostError(path + ": no hosts");
  return list;
}

std::vector<int> place_ranks(const HostList& list, int world_size) {
  int slots = 0;
  for (const Host& host : list.hosts) slots += host.slots;
  if (world_size == 0) world_size = slots;
  if (world_size > slots) {
    throw HostError("-n " + std::to_string(world_size) + " ranks but the hosts have " + std::to_string(slots) +
                    " slots");
  }
  std::vector<int> host_of_rank;
  for (size_t h = 0; h < list.hosts.size() && static_cast<int>(host_of_rank.size()) < world_size; ++h) {
    for (int s = 0; s < list.hosts[h].slots && static_cast<int>(host_of_rank.size()) < world_size; ++s) {
      host_of_rank.push_back(static_cast<int>(h));
    }
  }
  return host_of_rank;
}

namespace {

std::string json_cell(const std::vector<std::string>& names) {
  if (names.empty()) return "null";
  std::string out = "[";
  for (size_t k = 0; k < names.size(); ++k) out += (k == 0 ? "\"" : ", \"") + names[k] + "\"";
  return out + "]";
}

}  // namespace

std::string rank_device_matrix(const HostList& list, const std::vector<int>& placed) {
  int with = 0;
  for (const Host& host : list.hosts) with += host.has_rdma ? 1 : 0;
  if (with == 0) return "";
  if (with != static_cast<int>(list.hosts.size())) {
    throw HostError("the hostfile gives \"rdma\" for " + std::to_string(with) + " of its " +
                    std::to_string(list.hosts.size()) + " hosts: give it for all (a device matrix) or none");
  }
  std::string out = "[";
  for (size_t r = 0; r < placed.size(); ++r) {
    out += r == 0 ? "[" : ", [";
    for (size_t s = 0; s < placed.size(); ++s) {
      const Host& host = list.hosts[static_cast<size_t>(placed[r])];
      const bool same_host = placed[r] == placed[s];
      out += (s == 0 ? "" : ", ") + (same_host ? std::string("null") : json_cell(host.rdma[static_cast<size_t>(placed[s])]));
    }
    out += "]";
  }
  return out + "]";
}

}  // namespace tbcoll::run
