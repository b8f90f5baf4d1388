// End-to-end tests of the tp_inference example: the real binary on the real model, single rank and through
// tbcoll-run. Needs TP_INFERENCE_PATH and TBCOLL_RUN_PATH (binaries) and TBCOLL_SHARED_DIR (holding
// models/stories260K.gguf and models/stories260K.greedy.txt), as compile definitions or environment variables.
#include <fcntl.h>
#include <sys/stat.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace {

#ifndef TBCOLL_SHARED_DIR
#define TBCOLL_SHARED_DIR "/work/main/../shared"
#endif
#ifndef TP_INFERENCE_PATH
#define TP_INFERENCE_PATH "tp_inference"
#endif
#ifndef TP_MAKE_SYNTHETIC_PATH
#define TP_MAKE_SYNTHETIC_PATH "tp_make_synthetic"
#endif
#ifndef TBCOLL_RUN_PATH
#define TBCOLL_RUN_PATH "tbcoll-run"
#endif

std::string setting(const char* env, const char* fallback) {
  const char* v = std::getenv(env);
  return v != nullptr && *v != '\0' ? v : fallback;
}
std::string binary() { return setting("TP_INFERENCE_PATH", TP_INFERENCE_PATH); }
std::string synthesizer() { return setting("TP_MAKE_SYNTHETIC_PATH", TP_MAKE_SYNTHETIC_PATH); }
std::string launcher() { return setting("TBCOLL_RUN_PATH", TBCOLL_RUN_PATH); }
std::string model_path() { return setting("TBCOLL_SHARED_DIR", TBCOLL_SHARED_DIR) + "/models/stories260K.gguf"; }
std::string reference_path() {
  return setting("TBCOLL_SHARED_DIR", TBCOLL_SHARED_DIR) + "/models/stories260K.greedy.txt";
}

bool exists(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct Result {
  bool exited = false;  // false: killed by a signal
  int code = -1;        // exit status, or the signal number
  std::string out, err;
};

std::string describe(const Result& r) {
  return (r.exited ? "exit " : "signal ") + std::to_string(r.code) + "\nstderr:\n" + r.err;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = setting("TMPDIR", "/tmp") + "/tp_inference_test.XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs argv with stdout and stderr captured in files; a 120 s guard comes from tbcoll-run or the test timeout.
Result run(const std::vector<std::string>& args) {
  TempDir dir;
  const std::string out_path = dir.path() + "/out", err_path = dir.path() + "/err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  Result r;
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    r.err = "cannot start " + args[0] + ": " + std::strerror(rc);
    return r;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

// tp_inference arguments; ranks == 1 runs the binary directly, else through tbcoll-run.
Result generate(int ranks, const std::string& mode, const std::vector<std::string>& extra,
                const std::string& model = model_path()) {
  std::vector<std::string> args;
  if (ranks > 1) args = {launcher(), "-n", std::to_string(ranks), "--timeout", "120", "--"};
  args.push_back(binary());
  args.insert(args.end(), {"--model", model, "--mode", mode});
  args.insert(args.end(), extra.begin(), extra.end());
  return run(args);
}

class TpInference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(model_path())) GTEST_SKIP() << "model not found at " << model_path();
  }
};

TEST_F(TpInference, GreedyFromBosReproducesLlama2cReference) {
  const Result r = generate(1, "tensor", {"--tokens", "256"});
  ASSERT_TRUE(r.exited && r.code == 0) << describe(r);
  const std::string expected = read_file(reference_path());
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(r.out, expected);
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << "no stats line: " << r.err;
}

// The same text at every degree of parallelism: TP=1 (direct), TP=2, TP=4, PP=2, for several prompts, greedy and
// seeded sampling.
TEST_F(TpInference, ParallelRunsMatchSingleRank) {
  const std::vector<std::vector<std::string>> cases = {
      {"--tokens", "256"},
      {"--prompt", "Once upon a time, a little dog", "--tokens", "120"},
      {"--prompt", "Tom and Sue went to the shop.", "--tokens", "80"},
      {"--prompt", "The cat", "--tokens", "100", "--temperature", "0.9", "--top-p", "0.9", "--seed", "1234"},
  };
  for (const auto& extra : cases) {
    const Result single = generate(1, "tensor", extra);
    ASSERT_TRUE(single.exited && single.code == 0) << describe(single);
    ASSERT_GT(single.out.size(), 50u);
    // Uneven splits too: TP=3 on 8 heads (4 kv heads: 1/1/2), weighted 2:1 and 1:2:3, and TP=5, where one rank
    // holds no head at all (4 kv heads) but its FFN units.
    for (const auto& [ranks, mode, weights] : std::vector<std::tuple<int, std::string, std::string>>{
             {2, "tensor", ""}, {4, "tensor", ""}, {3, "tensor", ""}, {2, "tensor", "2,1"}, {3, "tensor", "1,2,3"},
             {5, "tensor", ""}, {2, "pipeline", ""}, {3, "pipeline", ""}}) {
      // The rarer splits on the first case only: ranks beyond the two cores make every run slow.
      if ((ranks == 5 || weights == "1,2,3") && &extra != &cases.front()) continue;
      std::vector<std::string> args = extra;
      if (!weights.empty()) args.insert(args.end(), {"--tp-weights", weights});
      const Result r = generate(ranks, mode, args);
      SCOPED_TRACE(mode + " x" + std::to_string(ranks) + " weights " + weights + " " + extra[1]);
      ASSERT_TRUE(r.exited && r.code == 0) << describe(r);
      EXPECT_EQ(r.out, single.out);
    }
  }
}

// The prompt is echoed through encode + decode, so an exact echo shows the tokenizer round-trips, including
// characters only the byte fallback can express.
TEST_F(TpInference, PromptRoundTripsThroughTokenizer) {
  for (const std::string prompt : {"Once upon a time", "Caf\xC3\xA9 \xE2\x9C\x93 {x}~", "  two  spaces"}) {
    const Result r = generate(1, "tensor", {"--prompt", prompt, "--tokens", "4"});
    ASSERT_TRUE(r.exited && r.code == 0) << describe(r);
    EXPECT_EQ(r.out.substr(0, prompt.size()), prompt);
  }
}

TEST_F(TpInference, RejectsBadArgumentsAndShapes) {
  Result r = run({binary(), "--model", model_path(), "--bogus", "1"});
  EXPECT_TRUE(r.exited && r.code == 2) << describe(r);
  r = run({binary(), "--tokens", "3"});
  EXPECT_TRUE(r.exited && r.code == 2) << describe(r);
  r = generate(1, "tensor", {"--tokens", "5000"});
  EXPECT_TRUE(r.exited && r.code == 1) << describe(r);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
  r = generate(2, "tensor", {"--tokens", "4", "--tp-weights", "1,1,1"});  // one weight per rank
  EXPECT_TRUE(r.exited && r.code == 1) << describe(r);
  EXPECT_NE(r.err.find("3 weights (--tp-weights) for 2 ranks"), std::string::npos) << r.err;
  for (const char* weights : {"2,", "2,0", "1,-1", "a,b", ""}) {
    r = generate(1, "tensor", {"--tokens", "4", "--tp-weights", weights});
    EXPECT_TRUE(r.exited && r.code == 2) << weights << ": " << describe(r);
    EXPECT_NE(r.err.find("--tp-weights"), std::string::npos) << r.err;
  }
  r = generate(1, "pipeline", {"--tokens", "4", "--tp-weights", "1"});
  EXPECT_TRUE(r.exited && r.code == 2) << describe(r);
  for (const char* top_p : {"2", "-0.5", "nan"}) {  // silently meant "off" before
    r = generate(1, "tensor", {"--tokens", "4", "--temperature", "1", "--top-p", top_p});
    EXPECT_TRUE(r.exited && r.code == 2) << top_p << ": " << describe(r);
  }
  // Text that cannot be written is an error, not a run that looks fine (it exited 0, the text lost).
  if (exists("/dev/full")) {
    r = run({"/bin/sh", "-c", "exec '" + binary() + "' --model '" + model_path() + "' --tokens 20 > /dev/full"});
    EXPECT_TRUE(r.exited && r.code == 1) << describe(r);
    EXPECT_NE(r.err.find("writing the text to stdout failed"), std::string::npos) << r.err;
  }
}

// A prompt of ~330 tokens: more than LlamaModel::kMaxBatch, so batched prefill also runs in chunks.
std::string long_prompt() {
  const std::string p =
      "Once upon a time, there was a little girl named Lily who lived in a small house near the forest. Every "
      "morning she would walk to the river with her dog, Max, and they would look for shiny stones. ";
  return p + p + p;
}

// Batched prefill (whole prompt per layer, one all-reduce of n_tokens * dim floats) must give exactly the text of
// token-by-token prefill, on one rank and across ranks, for prompts longer and shorter than a batch.
// A collective that fails in the middle of the forward pass (here: ranks given different prompts, so their
// all-reduces differ in size) is reported and the job exits 1; it used to abort the process (an exception
// leaving a target_clones function terminates).
TEST_F(TpInference, RanksThatDisagreeFailWithAMessage) {
  const std::string script = "if [ \"$TBCOLL_RANK\" = 1 ]; then p='Hello there'; else p='Once upon a time there was';"
                             " fi; exec '" + binary() + "' --model '" + model_path() + "' --prompt \"$p\" --tokens 5";
  const Result r = run({launcher(), "-n", "2", "--timeout", "60", "-x", "TBCOLL_TIMEOUT=20", "--", "sh", "-c", script});
  EXPECT_TRUE(r.exited && r.code == 1) << describe(r);
  // The first rank to fail ends the job, so the other may not get to say anything.
  EXPECT_NE(r.err.find(": error: rank "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not match the peer's call"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

TEST_F(TpInference, BatchedPrefillMatchesTokenByToken) {
  for (const std::string& prompt : {long_prompt(), std::string("Tom and Sue went"), std::string("A")}) {
    const std::vector<std::string> base = {"--prompt", prompt, "--tokens", "60"};
    std::vector<std::string> one_by_one = base;
    one_by_one.insert(one_by_one.end(), {"--prefill-batch", "1"});
    const Result reference = generate(1, "tensor", one_by_one);
    ASSERT_TRUE(reference.exited && reference.code == 0) << describe(reference);
    ASSERT_GT(reference.out.size(), prompt.size());
    for (const auto& [ranks, mode, batch] : std::vector<std::tuple<int, std::string, std::string>>{
             {1, "tensor", "128"}, {1, "tensor", "7"}, {2, "tensor", "128"}, {4, "tensor", "5"},
             {2, "pipeline", "128"}}) {
      std::vector<std::string> extra = base;
      extra.insert(extra.end(), {"--prefill-batch", batch});
      SCOPED_TRACE(mode + " x" + std::to_string(ranks) + " batch " + batch + " prompt " +
                   std::to_string(prompt.size()) + " bytes");
      const Result r = generate(ranks, mode, extra);
      ASSERT_TRUE(r.exited && r.code == 0) << describe(r);
      EXPECT_EQ(r.out, reference.out);
    }
  }
}

// tp_make_synthetic writes a valid GGUF (same loader, tokenizer and engine), deterministically, that the engine
// labels as synthetic; TP=2, TP=3 and TP=2 weighted 2:1 (vocabulary-parallel head, greedy and sampled) reproduce
// TP=1 on it.
TEST_F(TpInference, SyntheticModelRunsAndIsLabelled) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string model = dir.path() + "/cache.gguf", again = dir.path() + "/again.gguf";
  Result r = run({synthesizer(), "--shape", "cache", "--out", model});
  ASSERT_TRUE(r.exited && r.code == 0) << describe(r);
  r = run({synthesizer(), "--shape", "cache", "--out", again});
  ASSERT_TRUE(r.exited && r.code == 0) << describe(r);
  const std::string bytes = read_file(model);
  EXPECT_GT(bytes.size(), 8u << 20);
  EXPECT_LT(bytes.size(), 16u << 20);
  EXPECT_TRUE(bytes == read_file(again)) << "generator is not deterministic";
  EXPECT_NE(bytes.find("synthetic"), std::string::npos);
  r = run({synthesizer(), "--shape", "huge", "--out", model});
  EXPECT_TRUE(r.exited && r.code == 2) << describe(r);

  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--prompt", long_prompt(), "--tokens", "40", "--ignore-eos"},
           {"--prompt", "The cat", "--tokens", "40", "--ignore-eos", "--temperature", "1", "--seed", "5"}}) {
    const Result single = generate(1, "tensor", extra, model);
    ASSERT_TRUE(single.exited && single.code == 0) << describe(single);
    EXPECT_NE(single.err.find("SYNTHETIC"), std::string::npos) << single.err;
    // --ignore-eos: fixed length; the first of the 40 tokens comes from the prefill pass.
    EXPECT_NE(single.err.find("decode 39 tok"), std::string::npos) << single.err;
    for (const auto& [ranks, mode, weights] : std::vector<std::tuple<int, std::string, std::string>>{
             {2, "tensor", ""}, {3, "tensor", ""}, {2, "tensor", "2,1"}, {2, "pipeline", ""}}) {
      std::vector<std::string> args = extra;
      if (!weights.empty()) args.insert(args.end(), {"--tp-weights", weights});
      const Result multi = generate(ranks, mode, args, model);
      SCOPED_TRACE(mode + " x" + std::to_string(ranks) + " weights " + weights);
      ASSERT_TRUE(multi.exited && multi.code == 0) << describe(multi);
      EXPECT_EQ(multi.out, single.out);
    }
  }
}

// ---- loader errors on damaged copies of the model --------------------------------------------------------------

// Offset just past the name of tensor `name` in its tensor-info record (the name is stored as u64 length + bytes).
size_t after_tensor_name(const std::string& bytes, const std::string& name) {
  uint64_t len = name.size();
  std::string key(reinterpret_cast<const char*>(&len), sizeof len);
  key += name;
  const size_t at = bytes.find(key);
  return at == std::string::npos ? at : at + key.size();
}

template <typename T>
void patch(std::string& bytes, size_t at, T value) {
  std::memcpy(&bytes[at], &value, sizeof value);
}

class LoaderErrors : public TpInference {
 protected:
  void SetUp() override {
    TpInference::SetUp();
    if (IsSkipped()) return;
    ASSERT_FALSE(dir_.path().empty());
    bytes_ = read_file(model_path());
    ASSERT_GT(bytes_.size(), 100000u);
  }
  // Writes the damaged copy and expects a clean failure (exit 1, no signal) whose message contains `needle`.
  void expect_error(const std::string& damaged, const std::string& needle) {
    const std::string path = dir_.path() + "/damaged.gguf";
    write_file(path, damaged);
    const Result r = run({binary(), "--model", path, "--tokens", "8"});
    EXPECT_TRUE(r.exited) << "crashed: " << describe(r);
    EXPECT_EQ(r.code, 1) << describe(r);
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }

  TempDir dir_;
  std::string bytes_;
};

TEST_F(LoaderErrors, TruncatedFiles) {
  expect_error(bytes_.substr(0, bytes_.size() - 1000), "out of bounds");  // data cut short
  expect_error(bytes_.substr(0, 5000), "truncated");                      // inside the vocabulary
  expect_error(bytes_.substr(0, 30), "truncated");                        // inside the header
  expect_error(bytes_.substr(0, 2), "truncated");
  expect_error(std::string(), "truncated");
}

TEST_F(LoaderErrors, WrongMagic) {
  std::string damaged = bytes_;
  damaged.replace(0, 4, "GGML");
  expect_error(damaged, "not a GGUF file");
}

TEST_F(LoaderErrors, TensorOffsetOutOfBounds) {
  std::string damaged = bytes_;
  const size_t at = after_tensor_name(damaged, "output_norm.weight");
  ASSERT_NE(at, std::string::npos);
  patch<uint64_t>(damaged, at + 4 + 8 + 4, uint64_t{1} << 40);  // n_dims=1 | dim | type | offset
  expect_error(damaged, "out of bounds");
}

TEST_F(LoaderErrors, TensorShapeTooLargeForFile) {
  std::string damaged = bytes_;
  const size_t at = after_tensor_name(damaged, "blk.4.ffn_norm.weight");
  ASSERT_NE(at, std::string::npos);
  patch<uint64_t>(damaged, at + 4, 1u << 20);  // the dim: a megabyte of floats past the end
  expect_error(damaged, "out of bounds");
}

TEST_F(LoaderErrors, UnsupportedTensorType) {
  std::string damaged = bytes_;
  const size_t at = after_tensor_name(damaged, "blk.0.attn_q.weight");
  ASSERT_NE(at, std::string::npos);
  patch<uint32_t>(damaged, at + 4 + 16, 12);  // n_dims=2 | dims | type := Q4_K
  expect_error(damaged, "unsupported type Q4_K");
}

// Offset just past metadata key `key` (u64 length + bytes), where its value type follows.
size_t after_key(const std::string& bytes, const std::string& key) { return after_tensor_name(bytes, key); }

TEST_F(LoaderErrors, TensorsSharingData) {
  // Two tensors pointing at the same bytes: a small file could describe any number of matrices that way.
  std::string damaged = bytes_;
  const size_t norm = after_tensor_name(damaged, "blk.4.ffn_norm.weight");
  const size_t output = after_tensor_name(damaged, "output_norm.weight");
  ASSERT_NE(norm, std::string::npos);
  ASSERT_NE(output, std::string::npos);
  uint64_t offset = 0;
  std::memcpy(&offset, &damaged[norm + 4 + 8 + 4], sizeof offset);  // n_dims=1 | dim | type | offset
  patch<uint64_t>(damaged, output + 4 + 8 + 4, offset);
  expect_error(damaged, "overlap");
}

TEST_F(LoaderErrors, TokenTypeThatIsNoInteger) {
  std::string damaged = bytes_;
  const size_t at = after_key(damaged, "tokenizer.ggml.token_type");
  ASSERT_NE(at, std::string::npos);
  patch<uint32_t>(damaged, at + 4, 6);  // value type (array) | element type := f32 | count | elements
  patch<float>(damaged, at + 4 + 4 + 8, std::numeric_limits<float>::quiet_NaN());
  expect_error(damaged, "not a token type");
}

TEST_F(LoaderErrors, HyperParameterOutOfRange) {
  std::string damaged = bytes_;
  const size_t at = after_key(damaged, "llama.attention.head_count");
  ASSERT_NE(at, std::string::npos);
  uint32_t type = 0;
  std::memcpy(&type, &damaged[at], sizeof type);
  ASSERT_EQ(type, 4u) << "stored as u32";
  patch<uint32_t>(damaged, at + 4, 3000000);
  expect_error(damaged, "'llama.attention.head_count' is 3000000, outside [1, 1048576]");
}

TEST_F(LoaderErrors, PromptTooLongIsRefusedBeforeEncoding) {
  std::string prompt;
  while (prompt.size() < 100000) prompt += "Once upon a time there was a little girl. ";  // < 128 KiB (argv)
  const Result r = run({binary(), "--model", model_path(), "--prompt", prompt, "--tokens", "4"});
  EXPECT_TRUE(r.exited && r.code == 1) << describe(r);
  EXPECT_NE(r.err.find("exceeds the context"), std::string::npos) << r.err;
}

// A metadata record: u64 key length, key, u32 value type, value bytes.
std::string metadata(const std::string& key, uint32_t type, const std::string& value) {
  const uint64_t len = key.size();
  std::string kv(reinterpret_cast<const char*>(&len), sizeof len);
  kv += key;
  kv.append(reinterpret_cast<const char*>(&type), sizeof type);
  return kv + value;
}

template <typename T>
std::string bytes_of(T value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof value);
}

// The model with `records` added to its metadata (before the first tensor info). Their total length must be a
// multiple of the data alignment (32), so the tensor data stays aligned without touching any offset.
std::string with_metadata(const std::string& model, const std::vector<std::string>& records) {
  std::string added;
  for (const std::string& r : records) added += r;
  EXPECT_EQ(added.size() % 32, 0u) << "pad the records to a multiple of 32 bytes";
  std::string out = model;
  const size_t first_tensor = after_tensor_name(out, "token_embd.weight") - 8 - std::string("token_embd.weight").size();
  uint64_t n_kv = 0;
  std::memcpy(&n_kv, &out[16], sizeof n_kv);
  patch<uint64_t>(out, 16, n_kv + records.size());
  out.insert(first_tensor, added);
  return out;
}

TEST_F(LoaderErrors, ValuesThatNarrowToNothingAsFloats) {
  // A float64 rope base of 1e-300 is positive, but 0 as the float the model computes with: every rotary angle
  // became infinite and every logit NaN (the run printed nothing and exited 0). 40 + 24 bytes of records.
  const std::string pad = metadata("general.pad", 0, std::string(1, '\0'));
  expect_error(with_metadata(bytes_, {metadata("llama.rope.freq_base", 12, bytes_of(1e-300)), pad}),
               "rope.freq_base");
  // The model with a valid one still runs (the records themselves are fine).
  const std::string path = dir_.path() + "/rope.gguf";
  write_file(path, with_metadata(bytes_, {metadata("llama.rope.freq_base", 12, bytes_of(10000.0)), pad}));
  const Result r = run({binary(), "--model", path, "--tokens", "8"});
  EXPECT_TRUE(r.exited && r.code == 0) << describe(r);
}

TEST_F(LoaderErrors, DuplicateMetadataKey) {
  // 33 + 31 bytes of records; the last of two llama.block_count values used to win silently.
  expect_error(with_metadata(bytes_, {metadata("llama.block_count", 4, bytes_of(uint32_t{5})),
                                      metadata("general.padding123", 0, std::string(1, '\0'))}),
               "duplicate metadata 'llama.block_count'");
}

TEST_F(LoaderErrors, ArrayCountBeyondTheReadersLimit) {
  // A corrupt count sized an allocation of 8 bytes per element (uint8 arrays: 8x the file) before any check.
  std::string damaged = bytes_;
  const size_t at = after_key(damaged, "tokenizer.ggml.token_type");
  ASSERT_NE(at, std::string::npos);
  patch<uint64_t>(damaged, at + 4 + 4, uint64_t{1} << 30);  // value type (array) | element type | count
  expect_error(damaged, "more than this reader accepts");
}

TEST_F(LoaderErrors, NotARegularFile) {
  const std::string fifo = dir_.path() + "/model.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Result r = run({binary(), "--model", fifo, "--tokens", "8"});  // opening it used to wait for a writer
  EXPECT_TRUE(r.exited && r.code == 1) << describe(r);
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  const Result nan = run({binary(), "--model", model_path(), "--tokens", "nan"});
  EXPECT_TRUE(nan.exited && nan.code == 2) << describe(nan);
}

TEST_F(LoaderErrors, LongVocabularyPieceDoesNotMakeEncodingQuadratic) {
  // One 200 kB piece (replacing the last token, 3 bytes, by 3 + 32 * 6250 bytes: the data stays aligned) let a
  // 120 kB prompt through the early length check, into a merge loop that took 95 s before the real check.
  std::string damaged = bytes_;
  const std::string last = "\xe2\x80\x8a";
  const size_t at = damaged.find(bytes_of(uint64_t{3}) + last);
  ASSERT_NE(at, std::string::npos);
  const std::string piece(3 + 32 * 6250, 'z');
  damaged.replace(at, 8 + last.size(), bytes_of(uint64_t{piece.size()}) + piece);
  const std::string path = dir_.path() + "/long-piece.gguf";
  write_file(path, damaged);
  std::string prompt;
  while (prompt.size() < 120000) prompt += "Once upon a time there was a girl. ";
  prompt.resize(120000);
  const auto start = std::chrono::steady_clock::now();
  const Result r = run({binary(), "--model", path, "--prompt", prompt, "--tokens", "8"});
  EXPECT_TRUE(r.exited && r.code == 1) << describe(r);
  EXPECT_NE(r.err.find("exceeds the context"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "encoding is quadratic again";
}

TEST_F(LoaderErrors, MissingFile) {
  const Result r = run({binary(), "--model", dir_.path() + "/no-such.gguf", "--tokens", "8"});
  EXPECT_TRUE(r.exited && r.code == 1) << describe(r);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
}

}  // namespace
