// tp_inference: Llama text generation on 1..N ranks with tbcoll, tensor parallel or pipeline parallel.
//
//   tbcoll-run -n 2 -- tp_inference --model stories260K.gguf --prompt "Once upon" --tokens 64
//
// Rank 0 prints the text as it is generated (like llama2.c run.c: prompt pieces echoed, a leading space after BOS
// dropped, a newline at the end) and one statistics line on stderr. --tokens counts generated tokens, so an empty
// prompt with --tokens 256 is run.c's "-n 256" from BOS alone. Generation stops early on BOS or EOS.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf.h"
#include "model.h"
#include "sampler.h"
#include "tbcoll/tbcoll.hpp"
#include "tokenizer.h"

namespace tp_inference {
namespace {

struct Options {
  std::string model;
  std::string prompt;
  int tokens = 256;
  float temperature = 0.0f;
  float top_p = 0.9f;
  uint64_t seed = 0;
  bool have_seed = false;  // else rank 0 picks one from the clock and tells the others
  bool pipeline = false;
  std::vector<double> tp_weights;  // empty: equal shares
  bool ignore_eos = false;
  int prefill_batch = LlamaModel::kMaxBatch;
};

const char kUsage[] =
    "usage: tp_inference --model PATH [--prompt TEXT] [--tokens N] [--temperature T] [--top-p P] [--seed S]\n"
    "                    [--mode tensor|pipeline] [--ignore-eos]\n"
    "                    [--prefill-batch N] [--tp-weights W0,W1,...]\n"
    "  --tokens N       tokens to generate after the prompt (default 256)\n"
    "  --temperature T  0 = greedy (default 0)\n"
    "  --top-p P        nucleus sampling threshold when T > 0 (default 0.9; 1 = off)\n"
    "  --seed S         sampler seed, 0 to 2^64-1 (default: from the clock, the same on every rank)\n"
    "  --mode M         tensor (default): heads and FFN units split across ranks;\n"
    "                   pipeline: layers split across ranks\n"
    "  --tp-weights W   tensor mode: shares of heads and FFN units in proportion to one weight per rank\n"
    "                   (2,1: rank 0 takes two thirds; default equal; any number of heads per rank)\n"
    "  --prefill-batch N  prompt tokens per batched forward pass (default 128; 1 = token by token)\n"
    "  --ignore-eos     keep generating through BOS/EOS (fixed-length runs for benchmarks)\n"
    "Run on several ranks with: tbcoll-run -n N -- tp_inference ...\n";

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

double parse_number(const std::string& flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0') throw UsageError(flag + ": not a number: '" + text + "'");
  return v;
}

uint64_t parse_seed(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || text[0] == '-' || text[0] == '+') {
    throw UsageError(flag + ": not an integer from 0 to 2^64-1: '" + text + "'");
  }
  return static_cast<uint64_t>(v);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--ignore-eos") {
      o.ignore_eos = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError(flag + " needs a value (or unknown flag)");
    const char* value = argv[++i];
    if (flag == "--model") {
      o.model = value;
    } else if (flag == "--prompt") {
      o.prompt = value;
    } else if (flag == "--tokens" || flag == "-n") {
      const double n = parse_number(flag, value);
      if (!(n >= 0 && n <= 1e7) || n != std::floor(n)) throw UsageError("--tokens must be a non-negative integer");
      o.tokens = static_cast<int>(n);
    } else if (flag == "--temperature" || flag == "-t") {
      o.temperature = static_cast<float>(parse_number(flag, value));
      if (!(o.temperature >= 0.0f)) throw UsageError("--temperature must be >= 0");
    } else if (flag == "--top-p" || flag == "-p") {
      o.top_p = static_cast<float>(parse_number(flag, value));
      if (!(o.top_p >= 0.0f && o.top_p <= 1.0f)) throw UsageError("--top-p must be in [0, 1] (a probability mass)");
    } else if (flag == "--seed" || flag == "-s") {
      o.seed = parse_seed(flag, value);
      o.have_seed = true;
    } else if (flag == "--prefill-batch") {
      const double n = parse_number(flag, value);
      if (!(n >= 1 && n <= 1e6) || n != std::floor(n)) throw UsageError("--prefill-batch must be a positive integer");
      o.prefill_batch = static_cast<int>(n);
    } else if (flag == "--tp-weights") {
      try {
        o.tp_weights = parse_weights(value);
      } catch (const std::invalid_argument& error) {
        throw UsageError(std::string("--tp-weights: ") + error.what());
      }
    } else if (flag == "--mode") {
      const std::string mode = value;
      if (mode != "tensor" && mode != "pipeline") throw UsageError("--mode must be tensor or pipeline");
      o.pipeline = mode == "pipeline";
    } else {
      throw UsageError("unknown flag " + flag);
    }
  }
  if (o.model.empty()) throw UsageError("--model is required");
  if (o.pipeline && !o.tp_weights.empty()) throw UsageError("--tp-weights is for --mode tensor");
  return o;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int run(const Options& options, tbcoll::Communicator& comm) {
  const int rank = comm.rank();
  const int world = comm.size();
  const GgufFile file(options.model);
  const LlamaConfig config = LlamaConfig::from_gguf(file);
  const Tokenizer tokenizer(file);
  if (tokenizer.vocab_size() != config.vocab_size) {
    throw GgufError("model: " + file.path() + ": tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                    " tokens but the embedding has " + std::to_string(config.vocab_size) + " rows");
  }
  const ShardSpec shard = options.pipeline ? pipeline_shard(config, rank, world)
                                           : tensor_parallel_shard(config, rank, world, options.tp_weights);

  // Refuse a prompt that cannot fit before spending time encoding it (a non-empty text gets a space prefix).
  const size_t least = tokenizer.min_tokens(options.prompt.empty() ? 0 : options.prompt.size() + 1);
  if (static_cast<double>(least) + options.tokens > static_cast<double>(config.context_length)) {
    throw GgufError("prompt of " + std::to_string(options.prompt.size()) + " bytes (at least " +
                    std::to_string(least) + " tokens) plus --tokens " + std::to_string(options.tokens) +
                    " exceeds the context of " + std::to_string(config.context_length));
  }
  const std::vector<int> prompt = tokenizer.encode(options.prompt, true, false);
  const int n_prompt = static_cast<int>(prompt.size());
  const int positions = n_prompt - 1 + options.tokens;
  if (positions > config.context_length) {
    throw GgufError("prompt (" + std::to_string(n_prompt) + " tokens) plus --tokens " +
                    std::to_string(options.tokens) + " exceeds the context of " +
                    std::to_string(config.context_length));
  }
  // Random-weight models from tp_make_synthetic say so in general.name; label them wherever numbers are printed.
  const GgufValue* name_value = file.find("general.name");
  const std::string model_name =
      name_value != nullptr && name_value->type == GgufValueType::kString ? name_value->str : "unnamed";
  const bool synthetic = model_name.find("synthetic") != std::string::npos;
  if (rank == 0 && synthetic) {
    std::fprintf(stderr, "tp_inference: SYNTHETIC model '%s': random weights, the text is meaningless (speed tests "
                         "only)\n", model_name.c_str());
  }
  LlamaModel model(file, config, shard, positions > 0 ? positions : 1, rank == 0);
  // Every rank samples the same gathered logits with the same generator: an unseeded run takes rank 0's clock.
  uint64_t seed = options.seed;
  if (!options.have_seed) {
    seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    comm.broadcast(&seed, &seed, 1, tbcoll::DataType::kUint64, 0);
  }
  Sampler sampler(config.vocab_size, options.temperature, options.top_p, seed);
  CommCounter counter(&comm);
  const int n_prefill = n_prompt < positions ? n_prompt : positions;  // prompt tokens that go through the model
  const size_t dim = static_cast<size_t>(config.dim);
  const int batch = n_prefill < options.prefill_batch ? n_prefill : options.prefill_batch;
  Floats x(dim * static_cast<size_t>(batch > 1 ? batch : 1));
  const int last = world - 1;
  const bool greedy = options.temperature <= 0.0f;

  // Runs tokens[0..n) at positions pos0.. on this rank's part of the model; when `sample`, returns the next token
  // (on every rank) picked from the last position's logits, else -1.
  auto forward = [&](const int* tokens, int pos0, int n, bool sample) -> int {
    float* last_row = x.data() + static_cast<size_t>(n - 1) * dim;
    if (!options.pipeline) {
      for (int t = 0; t < n; ++t) model.embed(tokens[t], x.data() + static_cast<size_t>(t) * dim);
      model.forward_batch(x.data(), pos0, n, &counter);
      if (!sample) return -1;
      // Vocabulary-parallel head: every rank ends with the same token (argmax over gathered shard maxima, or the
      // same seeded sampler over bitwise-equal gathered logits).
      return greedy ? model.greedy_token(last_row, &counter) : sampler.sample(model.logits(last_row, &counter));
    }
    const size_t count = static_cast<size_t>(n) * dim;
    if (rank == 0) {
      for (int t = 0; t < n; ++t) model.embed(tokens[t], x.data() + static_cast<size_t>(t) * dim);
    } else {
      counter.recv(x.data(), count, rank - 1);
    }
    model.forward_batch(x.data(), pos0, n, nullptr);
    if (rank != last) counter.send(x.data(), count, rank + 1);
    if (!sample) return -1;
    int32_t chosen = -1;
    if (rank == last) chosen = greedy ? model.greedy_token(last_row, nullptr) : sampler.sample(model.logits(last_row, nullptr));
    if (world > 1) counter.broadcast(&chosen, last);
    return chosen;
  };
  auto is_stop = [&](int t) { return !options.ignore_eos && (t == tokenizer.bos() || t == tokenizer.eos()); };
  const bool stdout_is_terminal = ::isatty(STDOUT_FILENO) != 0;
  // Stream to a terminal token by token; into a file or pipe, in blocks of 4 KiB (a write system call per token
  // on rank 0 would hold every other rank up in the next all-reduce). Pieces are appended to a buffer of our
  // own: stdio's fwrite (locking included) cost ~0.2 us per token, which rank 1 then waited for.
  struct Pending {
    std::string text;
    void flush() {
      if (!text.empty()) std::fwrite(text.data(), 1, text.size(), stdout);
      text.clear();
    }
    ~Pending() { flush(); }  // also when generation fails part-way: what was generated is printed
  } pending;
  pending.text.reserve(8192);
  auto emit = [&](int prev, int next) {
    if (rank != 0) return;
    pending.text.append(tokenizer.decode(prev, next));
    if (stdout_is_terminal || pending.text.size() >= 4096) {
      pending.flush();
      if (stdout_is_terminal) std::fflush(stdout);
    }
  };

  comm.barrier();
  const double start = now_seconds();
  // Prefill: the whole prompt in one batched pass, then the first generated token from its last position.
  const bool sample_after_prompt = n_prefill == n_prompt && n_prefill > 0;
  int next = -1;
  for (int done = 0; done < n_prefill;) {
    const int n = n_prefill - done < options.prefill_batch ? n_prefill - done : options.prefill_batch;
    next = forward(prompt.data() + done, done, n, sample_after_prompt && done + n == n_prefill);
    done += n;
  }
  const double prefill_end = now_seconds();
  const double prefill_comm = counter.seconds();
  const CommCounter at_prefill_end = counter;  // the per-token figures below are decode's
  int forwards = n_prefill;
  bool stopped = false;
  const int n_echo = n_prompt - 1 < positions ? n_prompt - 1 : positions;
  for (int i = 1; i <= n_echo && !stopped; ++i) {  // echo the prompt as run.c does
    if (is_stop(prompt[static_cast<size_t>(i)])) {
      stopped = true;
    } else {
      emit(prompt[static_cast<size_t>(i) - 1], prompt[static_cast<size_t>(i)]);
    }
  }
  int token = prompt[static_cast<size_t>(n_prompt) - 1];
  if (sample_after_prompt && !stopped) {
    for (int pos = n_prompt;; ++pos) {
      if (is_stop(next)) break;
      emit(token, next);
      token = next;
      if (pos >= positions) break;
      next = forward(&token, pos, 1, true);
      ++forwards;
    }
  }
  const double end = now_seconds();
  pending.flush();
  if (rank == 0) {
    std::fputs("\n", stdout);
    // A full disk or a closed stdout must not look like success: the text is lost.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      throw std::runtime_error(std::string("writing the text to stdout failed: ") + std::strerror(errno));
    }
    const int prefill_tokens = n_prefill;
    const int decode_tokens = forwards - prefill_tokens;
    const double prefill_s = prefill_end - start;
    const double decode_s = end - prefill_end;
    const double total_s = end - start;
    const double decode_comm = counter.seconds() - prefill_comm;
    const double per_token = decode_tokens > 0 ? 1.0 / decode_tokens : 0.0;
    auto decode_only = [&](uint64_t CommCounter::*field) {
      return static_cast<double>(counter.*field - at_prefill_end.*field) * per_token;
    };
    std::fprintf(stderr,
                 "tp_inference: model=%s%s mode=%s ranks=%d | prefill %d tok %.0f tok/s | decode %d tok %.0f tok/s "
                 "%.4f ms/tok | comm %.1f%% of time, %.1f%% of decode (%.1f us/tok) | per decode token: all_reduce "
                 "%.1f calls %.0f B, all_gather %.1f calls %.0f B, p2p %.0f B | link emulation %s\n",
                 model_name.c_str(), synthetic ? " [SYNTHETIC random weights]" : "",
                 options.pipeline ? "pipeline" : "tensor", world, prefill_tokens,
                 prefill_s > 0 ? prefill_tokens / prefill_s : 0.0, decode_tokens,
                 decode_s > 0 ? decode_tokens / decode_s : 0.0,
                 decode_tokens > 0 ? decode_s * 1e3 / decode_tokens : 0.0,
                 total_s > 0 ? 100.0 * counter.seconds() / total_s : 0.0,
                 decode_s > 0 ? 100.0 * decode_comm / decode_s : 0.0,
                 decode_tokens > 0 ? decode_comm * 1e6 / decode_tokens : 0.0,
                 decode_only(&CommCounter::all_reduce_calls), decode_only(&CommCounter::all_reduce_bytes),
                 decode_only(&CommCounter::all_gather_calls), decode_only(&CommCounter::all_gather_bytes),
                 decode_only(&CommCounter::p2p_bytes), comm.link_emulation().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tp_inference

int main(int argc, char** argv) {
  using namespace tp_inference;
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tp_inference: %s\n%s", e.what(), kUsage);
    return 2;
  }
  int rank = -1;
  try {
    auto comm = tbcoll::Communicator::init(tbcoll::Config::from_env());
    rank = comm.rank();
    return run(options, comm);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tp_inference: rank %d: error: %s\n", rank, e.what());
    return 1;
  }
}
