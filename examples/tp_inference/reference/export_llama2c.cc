// tp_export_llama2c MODEL.gguf OUT.bin: writes a Llama GGUF model as a llama2.c-style checkpoint (7-int header,
// then every weight as f32 in llama2.c's order), the input of reference.c. For the single-rank speed comparison
// in bench.sh only.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "gguf.h"

using tp_inference::GgufFile;
using tp_inference::GgufTensor;

namespace {

void write_tensor(std::FILE* out, const GgufFile& file, const std::string& name) {
  const GgufTensor* t = file.find_tensor(name);
  if (t == nullptr) throw tp_inference::GgufError(file.path() + ": no tensor " + name);
  std::vector<float> row(t->cols());
  for (uint64_t r = 0; r < t->rows(); ++r) {
    GgufFile::read_row(*t, r, 0, t->cols(), row.data());
    if (std::fwrite(row.data(), sizeof(float), row.size(), out) != row.size()) throw std::runtime_error("write failed");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tp_export_llama2c MODEL.gguf OUT.bin\n");
    return 2;
  }
  try {
    GgufFile file(argv[1]);
    const int dim = static_cast<int>(file.get_int("llama.embedding_length"));
    const int layers = static_cast<int>(file.get_int("llama.block_count"));
    const int heads = static_cast<int>(file.get_int("llama.attention.head_count"));
    const bool shared = file.find_tensor("output.weight") == nullptr;
    const int vocab = static_cast<int>(file.get_array("tokenizer.ggml.tokens").strings.size());
    const int seq = static_cast<int>(file.get_int("llama.context_length"));
    const int header[7] = {dim, static_cast<int>(file.get_int("llama.feed_forward_length")), layers, heads,
                           static_cast<int>(file.get_int("llama.attention.head_count_kv", heads)),
                           shared ? vocab : -vocab, seq};
    std::FILE* out = std::fopen(argv[2], "wb");
    if (out == nullptr) throw std::runtime_error(std::string("cannot write ") + argv[2]);
    std::fwrite(header, sizeof(int), 7, out);
    write_tensor(out, file, "token_embd.weight");
    for (const char* kind : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                             "ffn_down", "ffn_up"}) {
      for (int l = 0; l < layers; ++l) write_tensor(out, file, "blk." + std::to_string(l) + "." + kind + ".weight");
    }
    write_tensor(out, file, "output_norm.weight");
    std::vector<float> unused_rope_tables(static_cast<size_t>(seq) * static_cast<size_t>(dim / heads), 0.0f);
    std::fwrite(unused_rope_tables.data(), sizeof(float), unused_rope_tables.size(), out);
    if (!shared) write_tensor(out, file, "output.weight");
    if (std::fclose(out) != 0) throw std::runtime_error("write failed");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_export_llama2c: %s\n", e.what());
    return 1;
  }
  return 0;
}
