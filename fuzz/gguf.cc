// Fuzz target: the GGUF reader of examples/tp_inference (gguf.cc), on any file content.
//   - GgufFile either opens the file or throws GgufError (no other exception, no read outside the file).
//   - A file that opens can be used as the engine uses it: every tensor's first and last rows convert to finite or
//     non-finite floats without reading outside the mapping (ASan checks it), getters of every key return or throw
//     GgufError, and the tokenizer built from it (when it has a vocabulary) encodes and decodes text.
#include <vector>

#include "examples/tp_inference/gguf.h"
#include "examples/tp_inference/tokenizer.h"
#include "fuzz_support.h"
#include "gguf_writer.h"

namespace tp = tp_inference;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tbcoll_fuzz::ScratchFile scratch;
  const std::string& path = scratch.write(data, size);
  try {
    tp::GgufFile file(path);
    FUZZ_CHECK(file.file_size() == size);
    std::vector<float> row;
    for (const tp::GgufTensor& tensor : file.tensors()) {
      FUZZ_CHECK(tensor.data != nullptr || tensor.n_bytes == 0);
      FUZZ_CHECK(tensor.offset <= size && tensor.n_bytes <= size);
      FUZZ_CHECK(file.find_tensor(tensor.name) != nullptr);
      if (tensor.rows() == 0 || tensor.cols() == 0) continue;
      row.resize(tensor.cols());
      tp::GgufFile::read_row(tensor, 0, 0, tensor.cols(), row.data());
      tp::GgufFile::read_row(tensor, tensor.rows() - 1, tensor.cols() / 2, tensor.cols(), row.data());
    }
    for (const char* key : {"general.architecture", "llama.block_count", "llama.embedding_length",
                            "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "general.alignment"}) {
      try {
        if (file.find(key) == nullptr) continue;
        (void)file.get_int_in(key, 0, -1, 1 << 20);
        (void)file.get_number(key, 0.0);
        (void)file.get_string(key);
      } catch (const tp::GgufError&) {
      }
    }
    try {
      const tp::Tokenizer tokenizer(file);
      const std::vector<int> tokens = tokenizer.encode("Once upon a time, \xE2\x96\x81 <0x41> \xff", true, true);
      int prev = tokenizer.bos();
      for (int token : tokens) {
        FUZZ_CHECK(token >= 0 && token < tokenizer.vocab_size());
        (void)tokenizer.decode(prev, token);
        prev = token;
      }
    } catch (const tp::GgufError&) {
    }
  } catch (const tp::GgufError&) {
  }
  return 0;
}
