// tbcoll-perf --compare: algorithms side by side in one run. Each algorithm named (or, for "all", every
// point-to-point algorithm of the collective and the tuner's automatic choice) gets a communicator of its own,
// forced to it (TBCOLL_ALGO's per-collective form), over the one store. Per size, the algorithms take turns:
// rounds x (one timed batch each, the starting algorithm rotating), so the machine's slow drifts (another job,
// a frequency change) fall on all of them alike; the figure is the median over rounds of each batch's median
// (per iteration, the slowest rank's time). Comparing separate runs of one algorithm each is what this avoids:
// on a shared or oversubscribed machine, their noise exceeds the differences between algorithms. The ratios to the
// best forced algorithm (x/b, the CSV's paired_vs_best) are paired by round: the median over rounds of x's batch
// over the best's batch of the same round. Here 4-8 ranks on 2 CPUs run in slow and fast phases lasting seconds;
// a ratio of two medians over rounds compares different phases, a round's two batches mostly share one. A twin
// (ring@2: ring again, on a communicator of its own) shows what is left: at 8 ranks, three communicators forced to
// one algorithm differed by up to 7x in the same rounds (docs/tuner.md). The CSV's paired_vs_twin gives a twin's
// paired ratio to the algorithm it twins (ring@2 over ring), the noise left between two communicators.
//
// "measured" is auto with TBCOLL_TUNER=measure (tuner_measured.h): the model's shortlist timed by its first calls
// of each size octave, then the fastest. Its trial calls run in the first batch's warm-up (measure() calls until
// the ranks have decided), so its timed calls are the decided algorithm's.
//
// Time per size stays bounded: a first batch of one call measures each algorithm, and the rounds and
// iterations are cut so that an algorithm's timed calls take about --budget seconds (at least 2 rounds of 1).
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/registry.h"
#include "benchmarks/perf_calls.h"
#include "bootstrap/open_store.h"

namespace tbcoll::bench {
namespace {

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    if (comma > start) names.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return names;
}

// "all": the collective's table rows (fast paths are a transport's own, chosen by their size ranges) and auto.
std::vector<std::string> algorithm_names(const Options& o) {
  std::vector<std::string> names = split_names(o.compare);
  if (names.size() == 1 && names[0] == "all") {
    names.clear();
    OpKind kind{};
    if (!algo::parse_collective(o.collective, &kind)) throw InvalidArgument("unknown collective " + o.collective);
    for (const algo::Algorithm& row : algo::algorithms_for(kind)) names.emplace_back(row.name);
    names.emplace_back("auto");
  }
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (names[i] == names[j]) throw InvalidArgument("--compare names " + names[i] + " twice");
    }
  }
  if (names.size() < 2) {
    throw InvalidArgument("--compare needs two algorithms or more (\"all\", or a,b,auto; measured: auto with "
                          "TBCOLL_TUNER=measure; a@2: a twin of a on a communicator of its own)");
  }
  return names;
}

// The knobs of a variant, "auto/wait=spin/spin_us=20": {TBCOLL_WAIT: spin, TBCOLL_SPIN_US: 20}.
std::map<std::string, std::string> variant_knobs(const std::string& name) {
  std::map<std::string, std::string> knobs;
  size_t at = name.find('/');
  while (at != std::string::npos) {
    const size_t next = name.find('/', at + 1);
    const std::string assignment = name.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    const size_t equals = assignment.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw InvalidArgument("--compare " + name + ": a variant's knobs are NAME=VALUE (auto/wait=spin)");
    }
    std::string knob = "TBCOLL_" + assignment.substr(0, equals);
    for (char& c : knob) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    knobs[knob] = assignment.substr(equals + 1);
    at = next;
  }
  return knobs;
}

double median_of(std::vector<double> values) {
  if (values.empty()) return -1;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// The paired ratio of two algorithms' per-round medians: the median over the rounds both ran of a's round over b's
// (round r of each ran within a round's time of each other, so the machine's slow and fast phases, which last
// seconds here, mostly fall on both, where the ratio of the two medians over rounds compares different moments);
// -1 when they share no round.
double paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> ratios;
  for (size_t r = 0; r < std::min(a.size(), b.size()); ++r) {
    if (b[r] > 0) ratios.push_back(a[r] / b[r]);
  }
  return median_of(std::move(ratios));
}

}  // namespace

long long run_compare(const Options& o, Config config) {
  const std::vector<std::string> names = algorithm_names(o);
  // "ring@2": a twin of ring, forced to it on a communicator of its own (the noise between two communicators
  // running one algorithm); "auto/wait=spin": auto with a knob of its own (TBCOLL_WAIT=spin), a variant that
  // counts as forced. Per name, the algorithm without the suffixes, and its knobs.
  std::vector<std::string> algos;
  std::vector<std::map<std::string, std::string>> knobs;
  std::vector<bool> twins;
  for (const std::string& name : names) {
    const std::string head = name.substr(0, name.find('/'));
    algos.push_back(head.substr(0, head.find('@')));
    twins.push_back(head.find('@') != std::string::npos);
    knobs.push_back(variant_knobs(name));
  }
  if (config.world_size > 1 && !config.store) {
    const auto opened = bootstrap::open_store(config, Clock::now() + std::chrono::seconds(60));
    config.store = opened.store;
    config.server = opened.server;
  }
  std::vector<Communicator> comms;
  int automatic = -1, measuring = -1;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    Config forced = config;
    const bool tuned = algos[i] == "auto" || algos[i] == "measured";
    forced.algo = tuned ? "" : o.collective + ":" + algos[i];
    for (const auto& [knob, value] : knobs[i]) forced.knobs[knob] = value;
    forced.prefix = config.prefix + "/compare/" + name;
    if (name == "auto") automatic = static_cast<int>(comms.size());
    if (name == "measured") {
      measuring = static_cast<int>(comms.size());
      forced.knobs["TBCOLL_TUNER"] = "measure";
    }
    comms.push_back(Communicator::init(forced));
  }
  Options timed = o;
  if (o.engine.active()) timed.clock_offset_us = clock_offset_us(comms.front());
  Communicator& lead_comm = comms.front();
  const int n = lead_comm.size();
  const bool lead = lead_comm.rank() == 0;
  const size_t es = dtype_size(o.dtype);
  std::FILE* csv = nullptr;
  if (lead && !o.csv.empty()) {
    csv = std::fopen(o.csv.c_str(), "w");
    if (csv == nullptr) throw InvalidArgument("--csv " + o.csv + ": cannot open for writing: " + std::strerror(errno));
    std::fprintf(csv, "collective,ranks,transport,emulation,size,algo,median_us,rounds,iterations,wrong,auto_choice,"
                      "measured_choice,best,paired_vs_best,paired_vs_twin\n");
  }
  if (lead) {
    std::printf("# tbcoll-perf --compare: %s, %d ranks, transport %s, dtype %s, op %s, out of place\n",
                o.collective.c_str(), n, n > 1 ? lead_comm.transport_name(1).c_str() : "self",
                to_string(o.dtype).c_str(), to_string(o.op).c_str());
    std::printf("# link emulation: %s\n", lead_comm.link_emulation().c_str());
    if (o.engine.active()) std::printf("# engine conditions: %s; time = from the last rank's arrival to its end\n",
                                       o.engine.describe(n).c_str());
    std::printf("# time = median over up to %d interleaved rounds of each round's median of the slowest rank (us); "
                "about %.3g s of timed calls per size and algorithm; -: cannot run it\n", o.rounds, o.budget_s);
    std::printf("# x/b: paired ratio to the best forced algorithm, the median over rounds of x's round over the "
                "best's same round; auto chose: what the tuner picked for the size, pick/b: that algorithm's own "
                "x/b (? when it is not among those compared, e.g. a transport's fast path)\n");
    int sizes = 0;
    for (double size = static_cast<double>(o.min_bytes); size <= static_cast<double>(o.max_bytes) * 1.0001;
         size *= o.factor) {
      ++sizes;
    }
    // Every algorithm's timed calls take about the budget per size, plus a probe call and the set-up of the turns.
    const double per_size_s = static_cast<double>(names.size()) * o.budget_s * 1.2;
    std::printf("# expect about %.0f s per size (%zu algorithms x %.3g s), %.0f s for the %d sizes\n", per_size_s,
                names.size(), o.budget_s, per_size_s * sizes, sizes);
    std::printf("#%11s", "size (B)");
    for (const std::string& name : names) std::printf(" %*s", std::max<int>(9, static_cast<int>(name.size())), name.c_str());
    if (automatic >= 0) std::printf("  %-18s %6s %6s", "auto chose", "auto/b", "pick/b");
    if (measuring >= 0) std::printf("  %-18s %6s", "measured chose", "meas/b");
    std::printf("\n");
  }
  long long total_wrong = 0;
  size_t last_count = 0, rows = 0;
  Options later = timed;
  later.warmup = 0;  // the first batch warmed every algorithm up
  const bool per_block = sized_per_block(o);
  for (double size = static_cast<double>(o.min_bytes); size <= static_cast<double>(o.max_bytes) * 1.0001;
       size *= o.factor) {
    const size_t total = static_cast<size_t>(size);
    const size_t count = per_block ? total / es / n : total / es;
    if (count == 0 || count == last_count) continue;
    last_count = count;
    ++rows;
    const size_t bytes = per_block ? count * es * n : count * es;
    Buffers b;
    size_buffers(o, n, count, b);
    const Communicator::Explanation why = lead_comm.explain(o.collective, bytes);
    const size_t k = names.size();
    std::vector<bool> runs(k, true);
    for (size_t i = 0; i < k; ++i) {
      for (const auto& row : why.algorithms) {
        if (row.name == algos[i] && !row.cannot_run.empty()) runs[i] = false;
      }
    }
    // A first batch of one timed call each sizes the rounds (every rank gets the same figures: the same cut).
    std::vector<int> rounds(k, 0), iterations(k, 0);
    std::vector<std::vector<double>> medians(k), iteration_medians(k);
    std::vector<long long> wrong(k, 0);
    for (size_t i = 0; i < k; ++i) {
      if (!runs[i]) continue;
      const Measured probe = measure(comms[i], timed, b, count, false, 1);
      wrong[i] += probe.wrong;
      const double calls = o.budget_s * 1e6 / std::max(probe.median_us, 1.0);
      rounds[i] = static_cast<int>(std::clamp(calls, 2.0, static_cast<double>(std::max(2, o.rounds))));
      iterations[i] =
          static_cast<int>(std::clamp(calls / rounds[i], 1.0, static_cast<double>(iterations_for(o, bytes))));
    }
    const int most_rounds = *std::max_element(rounds.begin(), rounds.end());
    for (int round = 0; round < most_rounds; ++round) {
      for (size_t turn = 0; turn < k; ++turn) {
        const size_t i = (turn + static_cast<size_t>(round)) % k;
        if (!runs[i] || round >= rounds[i]) continue;
        const Measured m = measure(comms[i], later, b, count, false, iterations[i], /*check_first=*/false);
        medians[i].push_back(m.median_us);
        iteration_medians[i].push_back(m.per_iteration_us);
        wrong[i] += m.wrong;
      }
    }
    std::vector<double> figure(k, -1);
    double best = -1;
    size_t best_index = 0;
    for (size_t i = 0; i < k; ++i) {
      total_wrong += wrong[i];
      if (!runs[i]) continue;
      figure[i] = median_of(medians[i]);
      // The best forced algorithm: of the originals and variants (a twin is the noise control, not a candidate).
      const bool candidate = static_cast<int>(i) != automatic && static_cast<int>(i) != measuring && !twins[i];
      if (candidate && (best < 0 || figure[i] < best)) {
        best = figure[i];
        best_index = i;
      }
    }
    std::vector<double> paired(k, -1);
    for (size_t i = 0; best > 0 && i < k; ++i) {
      if (runs[i]) paired[i] = paired_ratio(medians[i], medians[best_index]);
    }
    std::vector<double> twin(k, -1);  // a twin's (ring@2) paired ratio to its original (ring), if that ran too
    for (size_t i = 0; i < k; ++i) {
      for (size_t j = 0; runs[i] && twins[i] && j < k; ++j) {
        if (names[j] == algos[i] && runs[j]) twin[i] = paired_ratio(medians[i], medians[j]);
      }
    }
    const std::string chosen = automatic >= 0 ? comms[static_cast<size_t>(automatic)].algorithm(o.collective, bytes) : "";
    const std::string picked =
        measuring >= 0 ? comms[static_cast<size_t>(measuring)].algorithm(o.collective, bytes) : "";
    if (!lead) continue;
    std::printf("%12zu", bytes);
    for (size_t i = 0; i < k; ++i) {
      const int width = std::max<int>(9, static_cast<int>(names[i].size()));
      if (runs[i]) {
        std::printf(" %*.1f", width, figure[i]);
      } else {
        std::printf(" %*s", width, "-");
      }
    }
    if (automatic >= 0 && best > 0) {
      double pick = -1;
      for (size_t i = 0; i < k; ++i) {
        if (names[i] == chosen && runs[i]) pick = paired[i];
      }
      std::printf("  %-18s %6.2f ", chosen.c_str(), paired[static_cast<size_t>(automatic)]);
      if (pick > 0) {
        std::printf("%6.2f", pick);
      } else {
        std::printf("%6s", "?");  // auto chose an algorithm not compared (a fast path)
      }
    }
    if (measuring >= 0 && best > 0) {
      std::printf("  %-18s %6.2f", picked.c_str(), paired[static_cast<size_t>(measuring)]);
    }
    std::printf("%s\n", total_wrong ? "  WRONG" : "");
    if (o.engine.active()) {  // the loop's time per call, work included: what an engine's throughput sees
      std::printf("#   per iteration:");
      for (size_t i = 0; i < k; ++i) {
        if (runs[i]) std::printf(" %s %.1f us;", names[i].c_str(), median_of(iteration_medians[i]));
      }
      if (automatic >= 0 && best > 0) {
        std::printf(" auto/b %.2f", paired_ratio(iteration_medians[static_cast<size_t>(automatic)],
                                                 iteration_medians[best_index]));
      }
      std::printf("\n");
    }
    std::fflush(stdout);
    for (size_t i = 0; csv != nullptr && i < k; ++i) {
      if (!runs[i]) continue;
      std::fprintf(csv, "%s,%d,%s,\"%s\",%zu,%s,%.3f,%d,%d,%lld,%s,%s,%s,%.4f,%.4f\n", o.collective.c_str(), n,
                   n > 1 ? lead_comm.transport_name(1).c_str() : "self", lead_comm.link_emulation().c_str(), bytes,
                   names[i].c_str(), figure[i], static_cast<int>(medians[i].size()), iterations[i], wrong[i],
                   chosen.c_str(), picked.c_str(), names[best_index].c_str(), paired[i], twin[i]);
    }
  }
  if (csv != nullptr && std::fclose(csv) != 0) {
    throw IoError("--csv " + o.csv + ": writing failed: " + std::strerror(errno));
  }
  if (rows == 0) throw InvalidArgument("no size between -b and -e holds a whole element per rank: nothing measured");
  if (lead) std::printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong == 0 ? "OK" : "WRONG");
  std::fflush(stdout);
  for (Communicator& comm : comms) comm.barrier();  // every rank leaves together (see tbcoll_perf.cc)
  return total_wrong;
}

}  // namespace tbcoll::bench
