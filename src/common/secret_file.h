// Reading a job secret from a file (TBCOLL_SECRET_FILE, tbcoll-run --secret-file) with bounds on what the file may
// be: the library and tbcoll-run share it (POSIX and the standard library only, no exceptions).
//
// Accepted: a regular file, or a pipe / FIFO (`--secret-file <(pass show job)`), owned by this user or root and
// readable and writable by its owner only (mode & 077 == 0, as ssh demands of private keys: a secret other users
// can read, or chose, is no secret), at most kMaxSecretBytes, one trailing newline (and a carriage return before it) dropped, not empty.
// A pipe must deliver everything and close within kSecretPipeSeconds. Refused with a message naming the file
// and what is wrong: devices (/dev/zero would never end), directories, sockets, another user's file, a mode open
// to group or others,
// a size beyond the cap, a pipe that stays silent.
#pragma once

#include <string>

namespace tbcoll::secret_file {

constexpr size_t kMaxSecretBytes = 4096;
constexpr int kSecretPipeSeconds = 5;

struct Read {
  std::string secret;  ///< the file's contents without the trailing newline, when error is empty
  std::string error;   ///< why the file was refused ("" when fine): "cannot read it: ...", "is readable by ..."
};

/// Reads the secret at path. Never blocks beyond kSecretPipeSeconds; never allocates beyond kMaxSecretBytes.
Read read(const std::string& path);

}  // namespace tbcoll::secret_file
