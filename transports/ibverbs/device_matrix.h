// Which RDMA devices a rank uses to reach each peer: MLX's device-matrix file (MLX_IBV_DEVICES), which
// TBCOLL_IB_DEVICES also accepts, so MLX users reuse theirs.
//
//   [[null,        "rdma_en3",            null      ],     row = this rank (its world rank), column = the peer;
//    ["rdma_en3",  null,                  ["rdma_en4", "rdma_en5"]],   a name: one cable; a list: one name per
//    [null,        ["rdma_en4", "rdma_en5"], null   ]]     cable (the k-th names of both ends are the same cable)
//
// The diagonal is null or []; a null or [] cell means the pair does not use ibverbs (the next transport, tcp, joins
// it); exo writes [] for both. The
// parser is a small one that takes only what these files contain (arrays, strings, null), no dependency.
#pragma once

#include <string>
#include <vector>

namespace tbcoll::ibverbs {

struct DeviceMatrix {
  std::string source;  ///< the file's path, or "TBCOLL_IB_DEVICES" for an inline matrix: for messages
  /// cells[row][column]: the devices `row` uses to reach `column`, one per cable; empty for null.
  std::vector<std::vector<std::vector<std::string>>> cells;

  int size() const { return static_cast<int>(cells.size()); }
};

/// Parses a matrix from `text`; `source` names it in messages. Throws InvalidArgument naming the source and the
/// line and column of malformed JSON, or the row and column of a cell that is wrong: not N x N, a diagonal cell
/// that is not null or [], a cell that is not null / a name / a list of names, an empty name, a name twice in
/// one cell, or a pair whose two cells disagree (one null, or different cable counts).
DeviceMatrix parse_device_matrix(const std::string& text, const std::string& source);

/// Reads and parses the file at path (InvalidArgument when unreadable).
DeviceMatrix load_device_matrix(const std::string& path);

/// Whether a TBCOLL_IB_DEVICES / MLX_IBV_DEVICES value is a matrix (inline JSON, or a path: it has a '/' or ends
/// in .json) rather than a comma-separated list of names.
bool names_a_matrix(const std::string& value);

/// Checks the matrix against the job: `world_size` ranks (N must equal it), and this rank's row (`rank`) against
/// the devices present here (`devices_here`: every name listed, whatever its port state). Throws InvalidArgument
/// naming the source, row and column.
void check_device_matrix(const DeviceMatrix& matrix, int world_size, int rank,
                         const std::vector<std::string>& devices_here);

}  // namespace tbcoll::ibverbs
