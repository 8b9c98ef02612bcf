// The standalone fuzz driver for toolchains without libFuzzer (g++): links with one target's
// LLVMFuzzerTestOneInput (and its optional LLVMFuzzerInitialize and rgpu_fuzz_seeds), runs the
// seeds, then random and mutated seeds for --seconds, and stops by itself. Built with ASan/UBSan
// it runs as a ctest. On a crash (sanitizer report, signal) or an input that runs longer than
// --hang-seconds, the input is written to ./crash-<target>-<n> (or --crash-dir) so that
//   <target>_standalone --seconds 0 crash-file
// replays exactly it. The mutations follow common/cuda_image_fuzz.cpp's, without its PTX tokens.
// With --write-seeds DIR it writes the target's built-in seeds to DIR/seed-NNN and stops: how the
// libFuzzer corpus in the repository (tests/fuzz/corpus/<target>/, bench/fuzz.sh) is seeded.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
// A target's built-in seeds (valid messages), so a ctest needs no corpus files.
__attribute__((weak)) void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out);
extern "C" __attribute__((weak)) void __sanitizer_set_death_callback(void (*)(void));

// UBSan (a runtime of its own under g++) ends a fatal check (-fno-sanitize-recover, as the fuzz
// builds compile) with abort(), which the SIGABRT handler below sees, so its input is saved like
// any other crash's. Checks compiled recoverable (RGPU_SANITIZE=ON's libraries) only print.
extern "C" const char* __ubsan_default_options() { return "abort_on_error=1:print_stacktrace=1"; }

namespace {

const char* g_name = "fuzz";
std::string g_crash_path;
const std::vector<uint8_t>* g_current = nullptr;

// Async-signal-safe: open/write/close only, path prepared beforehand.
void dump_current() {
  if (!g_current) return;
  int fd = ::open(g_crash_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  ssize_t ignored = ::write(fd, g_current->data(), g_current->size());
  (void)ignored;
  ::close(fd);
  const char msg[] = "\nfuzz: the input that failed is in ";
  ignored = ::write(2, msg, sizeof msg - 1);
  ignored = ::write(2, g_crash_path.c_str(), g_crash_path.size());
  ignored = ::write(2, "\n", 1);
}

void on_signal(int sig) {
  if (sig == SIGALRM) {
    const char msg[] = "\nfuzz: an input ran past --hang-seconds (a hang)\n";
    ssize_t ignored = ::write(2, msg, sizeof msg - 1);
    (void)ignored;
  }
  dump_current();
  signal(sig, SIG_DFL);
  if (sig == SIGALRM) abort();
  raise(sig);
}

std::vector<uint8_t> mutate(const std::vector<std::vector<uint8_t>>& seeds, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  if (rng() % 16 == 0) {  // plain random bytes
    std::vector<uint8_t> d(pick(512));
    for (auto& b : d) b = uint8_t(rng());
    return d;
  }
  std::vector<uint8_t> d = seeds[pick(seeds.size())];
  int rounds = 1 + int(rng() % 8);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 8) {
      case 0:  // flip a bit
        if (!d.empty()) d[pick(d.size())] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (!d.empty()) d[pick(d.size())] = uint8_t(rng());
        break;
      case 2: {  // an interesting 16/32/64-bit value (sizes, lengths, counts, ids) at any offset
        static const uint64_t kVals[] = {0,          1,          2,           0x7f,        0x80,     0xff,
                                         0x1000,     0xffff,     0x10000,     0x7fffffff,  0x80000000, 0xffffffff,
                                         0x100000000ull, ~0ull,  ~0ull >> 1,  1ull << 62, (1ull << 62) | 1};
        uint64_t v = kVals[rng() % (sizeof(kVals) / sizeof(kVals[0]))];
        size_t w = size_t(2) << (rng() % 3);
        if (d.size() >= w) std::memcpy(&d[pick(d.size() - w + 1)], &v, w);
        break;
      }
      case 3:  // truncate
        d.resize(pick(d.size() + 1));
        break;
      case 4: {  // duplicate a chunk
        if (d.empty()) break;
        size_t a = pick(d.size()), len = std::min<size_t>(d.size() - a, 1 + pick(256));
        std::vector<uint8_t> chunk(d.begin() + long(a), d.begin() + long(a + len));
        d.insert(d.begin() + long(pick(d.size())), chunk.begin(), chunk.end());
        break;
      }
      case 5: {  // erase a chunk
        if (d.empty()) break;
        size_t a = pick(d.size()), len = std::min<size_t>(d.size() - a, 1 + pick(64));
        d.erase(d.begin() + long(a), d.begin() + long(a + len));
        break;
      }
      case 6: {  // insert random bytes
        size_t at = pick(d.size() + 1), len = 1 + pick(16);
        std::vector<uint8_t> b(len);
        for (auto& x : b) x = uint8_t(rng());
        d.insert(d.begin() + long(at), b.begin(), b.end());
        break;
      }
      default: {  // splice: our head, another seed's tail
        const auto& o = seeds[pick(seeds.size())];
        size_t a = pick(d.size() + 1), b = pick(o.size() + 1);
        d.resize(a);
        d.insert(d.end(), o.begin() + long(b), o.end());
        break;
      }
    }
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  g_name = std::strrchr(argv[0], '/') ? std::strrchr(argv[0], '/') + 1 : argv[0];
  double seconds = 3;
  unsigned hang_seconds = 10;
  uint64_t seed = 0x7267707521ull;
  std::string crash_dir = ".";
  std::string seeds_dir;
  std::vector<std::vector<uint8_t>> seeds;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--hang-seconds" && i + 1 < argc) {
      hang_seconds = unsigned(std::atoi(argv[++i]));
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--crash-dir" && i + 1 < argc) {
      crash_dir = argv[++i];
    } else if (a == "--write-seeds" && i + 1 < argc) {
      seeds_dir = argv[++i];
    } else {
      std::ifstream f(a, std::ios::binary);
      if (!f) {
        std::fprintf(stderr, "%s: cannot read seed %s\n", g_name, a.c_str());
        return 2;
      }
      seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
  }
  g_crash_path = crash_dir + "/crash-" + g_name + "-" + std::to_string(getpid());
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  bool replay_only = !seeds.empty() && seconds <= 0;
  if (!replay_only && rgpu_fuzz_seeds) rgpu_fuzz_seeds(&seeds);
  if (!seeds_dir.empty()) {
    int n = 0;
    for (const auto& s : seeds) {
      char name[32];
      std::snprintf(name, sizeof name, "/seed-%03d", n++);
      std::ofstream f(seeds_dir + name, std::ios::binary);
      f.write(reinterpret_cast<const char*>(s.data()), std::streamsize(s.size()));
      if (!f) {
        std::fprintf(stderr, "%s: cannot write %s%s\n", g_name, seeds_dir.c_str(), name);
        return 2;
      }
    }
    std::printf("%s: %d seeds written to %s\n", g_name, n, seeds_dir.c_str());
    return 0;
  }
  seeds.push_back({});

  // Under ASan its own handlers report faults (with a stack) and then call dump_current.
  if (__sanitizer_set_death_callback) {
    __sanitizer_set_death_callback(dump_current);
  } else {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(sig, on_signal);
  }
  for (int sig : {SIGABRT, SIGALRM}) signal(sig, on_signal);

  std::mt19937_64 rng(seed);
  uint64_t runs = 0;
  auto run_one = [&](const std::vector<uint8_t>& in) {
    g_current = &in;
    alarm(hang_seconds);
    LLVMFuzzerTestOneInput(in.data(), in.size());
    alarm(0);
    g_current = nullptr;
    ++runs;
  };
  for (const auto& s : seeds) run_one(s);
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!replay_only && std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 16; ++i) run_one(mutate(seeds, rng));
  }
  std::printf("%s: %llu inputs (%zu seeds), no crash\n", g_name, static_cast<unsigned long long>(runs), seeds.size());
  return 0;
}
