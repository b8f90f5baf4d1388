// Runs a fuzz target on files, without libFuzzer (every build that is not build-fuzz): each argument is a file or a
// directory of files, each file one input. ctest replays fuzz/corpus/<target>/ this way, so an input that once
// crashed a target stays a regression test under GCC, ASan and TSan builds too. Exits non-zero when an argument
// holds no input (a corpus went missing); a broken invariant aborts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<uint8_t> input(bytes.begin(), bytes.end());  // its own allocation: ASan sees reads past the end
  std::printf("replay %s (%zu B)\n", path.string().c_str(), input.size());
  std::fflush(stdout);
  LLVMFuzzerTestOneInput(input.data(), input.size());
}

}  // namespace

int main(int argc, char** argv) {
  size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& file : files) run_file(file);
      inputs += files.size();
    } else if (std::filesystem::is_regular_file(path)) {
      run_file(path);
      ++inputs;
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
      return 2;
    }
  }
  std::printf("replay: %zu inputs, no invariant broken\n", inputs);
  return inputs > 0 ? 0 : 1;
}
