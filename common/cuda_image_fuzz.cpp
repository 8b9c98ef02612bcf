// Fuzz target for rgpu::image: module images arrive from the network (the server parses what a
// client sends) and from arbitrary programs (the client parses what they load), so detect,
// image_size and parse must survive any bytes.
//
// Built two ways. With libFuzzer (RGPU_FUZZ, clang): the usual LLVMFuzzerTestOneInput.
// With -DRGPU_FUZZ_STANDALONE: a plain main that mutates seed images (the real nvcc-built ones)
// for --seconds N and feeds each mutant through the same entry; built with ASan/UBSan, it runs
// as a ctest.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exact-size heap buffer so ASan sees any read past the end.
  std::vector<uint8_t> buf(data, data + size);
  const uint8_t* p = buf.empty() ? nullptr : buf.data();
  rgpu::image::detect(p, size);
  size_t n = rgpu::image::image_size(p, size);
  if (n > size) std::abort();  // image_size promised to stay within max_len
  rgpu::image::Image img;
  std::string err;
  if (rgpu::image::parse(p, size, &img, &err)) {
    for (const auto& k : img.kernels)
      for (size_t i = 0; i < k.params.size(); ++i)
        if (k.params[i].ordinal != i) std::abort();  // the contract: sorted, 0..n-1
  }
  return 0;
}

#ifdef RGPU_FUZZ_STANDALONE
#include <chrono>
#include <fstream>
#include <iterator>
#include <random>

namespace {

std::vector<uint8_t> mutate(const std::vector<uint8_t>& seed, std::mt19937_64& rng) {
  std::vector<uint8_t> d = seed;
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  int rounds = 1 + int(rng() % 8);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!d.empty()) d[pick(d.size())] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (!d.empty()) d[pick(d.size())] = uint8_t(rng());
        break;
      case 2: {  // an interesting 16/32/64-bit value at an aligned offset (sizes, offsets, counts)
        static const uint64_t kVals[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x10000, 0x7fffffff, 0xffffffff,
                                         0x100000000ull, ~0ull, ~0ull >> 1};
        uint64_t v = kVals[rng() % (sizeof(kVals) / sizeof(kVals[0]))];
        size_t w = size_t(2) << (rng() % 3);
        if (d.size() >= w) std::memcpy(&d[pick(d.size() / w) * w], &v, w);
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
      default:  // PTX-ish tokens into text
        static const char* kToks[] = {".entry", ".param", "(", ")", ",", "[", "]", ".align", ".ptr", ".b8", "/*", "//"};
        const char* t = kToks[rng() % (sizeof(kToks) / sizeof(kToks[0]))];
        d.insert(d.begin() + long(pick(d.size() + 1)), t, t + std::strlen(t));
        break;
    }
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  std::vector<std::vector<uint8_t>> seeds;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
      continue;
    }
    std::ifstream f(argv[i], std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "cuda_image_fuzz: cannot read seed %s\n", argv[i]);
      return 2;
    }
    seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  seeds.push_back({});
  std::mt19937_64 rng(0x7267707521ull);
  uint64_t runs = 0;
  for (auto& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size()), ++runs;
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 64; ++i, ++runs) {
      std::vector<uint8_t> m = mutate(seeds[rng() % seeds.size()], rng);
      LLVMFuzzerTestOneInput(m.data(), m.size());
    }
  }
  std::printf("cuda_image_fuzz: %llu inputs, no crash\n", static_cast<unsigned long long>(runs));
  return 0;
}
#endif
