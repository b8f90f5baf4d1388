// Fuzz target: the tokenizer of examples/tp_inference (tokenizer.cc) on a vocabulary and a text from the input.
// The vocabulary is SentencePiece's shape: <unk> <s> </s> (control), the 256 byte tokens <0x00>..<0xFF>, a space
// piece, then up to 64 pieces from the input (lines of its first part), each with a score from the input.
//   - encode gives ids within the vocabulary, BOS/EOS where asked, at least min_tokens() tokens.
//   - decode(encode(text)) == text when every byte of the text can print (decode drops lone control bytes, as
//     llama2.c's run.c does): pieces never merge into a byte or control token.
#include <vector>

#include "examples/tp_inference/gguf.h"
#include "examples/tp_inference/tokenizer.h"
#include "fuzz_support.h"
#include "gguf_writer.h"

namespace tp = tp_inference;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tbcoll_fuzz::ScratchFile scratch;
  tbcoll_fuzz::Reader in(data, size);
  const uint8_t flags = in.take<uint8_t>();
  const std::string vocab_part = in.bytes(in.take<uint16_t>() % 1024);
  const std::string text = in.rest();

  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    tokens.push_back(piece);
    scores.push_back(0);
    types.push_back(6);
  }
  tokens.push_back("\xE2\x96\x81");  // the space piece
  scores.push_back(-1);
  types.push_back(1);
  size_t start = 0;
  for (int n = 0; n < 64 && start < vocab_part.size(); ++n) {
    size_t end = vocab_part.find('\n', start);
    if (end == std::string::npos) end = vocab_part.size();
    if (end > start) {
      const std::string piece = vocab_part.substr(start, end - start);
      tokens.push_back(piece);
      scores.push_back(-static_cast<float>(static_cast<uint8_t>(piece[0]) % 7) - static_cast<float>(n) * 0.5f);
      types.push_back(1);
    }
    start = end + 1;
  }
  tbcoll_fuzz::GgufWriter writer;
  writer.str("general.architecture", "llama");
  writer.strings("tokenizer.ggml.tokens", tokens);
  writer.floats("tokenizer.ggml.scores", scores);
  writer.ints("tokenizer.ggml.token_type", types);
  writer.u32("tokenizer.ggml.bos_token_id", 1);
  writer.u32("tokenizer.ggml.eos_token_id", 2);
  const std::string file_bytes = writer.file();
  const tp::GgufFile file(scratch.write(file_bytes.data(), file_bytes.size()));
  const tp::Tokenizer tokenizer(file);

  const bool bos = (flags & 1) != 0, eos = (flags & 2) != 0;
  const std::vector<int> ids = tokenizer.encode(text, bos, eos);
  FUZZ_CHECK(ids.size() >= tokenizer.min_tokens(text.size()) + (bos ? 1 : 0) + (eos ? 1 : 0));
  if (bos) FUZZ_CHECK(!ids.empty() && ids.front() == tokenizer.bos());
  if (eos) FUZZ_CHECK(!ids.empty() && ids.back() == tokenizer.eos());
  std::string decoded;
  int prev = tokenizer.bos();  // as if after BOS: the dummy space is dropped
  for (size_t i = bos ? 1 : 0; i < ids.size(); ++i) {
    FUZZ_CHECK(ids[i] >= 0 && ids[i] < tokenizer.vocab_size());
    if (eos && i + 1 == ids.size()) break;
    decoded += tokenizer.decode(prev, ids[i]);
    prev = ids[i];
  }
  bool printable = true;
  for (char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x80 && !std::isprint(byte) && !std::isspace(byte)) printable = false;
  }
  if (printable) FUZZ_CHECK(decoded == text);
  return 0;
}
