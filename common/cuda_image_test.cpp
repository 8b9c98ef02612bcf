// Pins rgpu::image against images nvcc built from tests/kernels/test_kernels.cu: every image
// kind must give the same kernels with the same layouts, and broken images must be refused.
#include "common/cuda_image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "test_kernel_paths.h"

namespace rgpu::image {
namespace {

std::vector<uint8_t> read_file(const char* path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct Expected {
  std::vector<Param> params;
  uint32_t bytes;
};

// The layouts the CUDA ABI gives test_kernels.cu's signatures.
const std::map<std::string, Expected>& expected() {
  static const std::map<std::string, Expected> m = {
      {"rgpu_vec_add", {{{0, 0, 8}, {1, 8, 8}, {2, 16, 8}, {3, 24, 4}}, 28}},
      {"rgpu_fill_u32", {{{0, 0, 8}, {1, 8, 4}, {2, 16, 8}}, 24}},
      {"rgpu_affine", {{{0, 0, 8}, {1, 8, 24}, {2, 32, 4}}, 36}},
      {"rgpu_spin", {{{0, 0, 8}}, 8}},
      {"rgpu_empty", {{}, 0}},
      {"rgpu_printf", {{{0, 0, 4}}, 4}},
      // Over 4 KiB of parameters: the cubin describes them in the wide record (attribute 0x45).
      {"rgpu_big_params", {{{0, 0, 8192}, {1, 8192, 8}, {2, 8200, 4}}, 8204}},
      {"rgpu_count", {{{0, 0, 4}}, 4}},
  };
  return m;
}

// The kernel of internal linkage (a LOCAL ELF symbol; its name carries a per-file hash).
const Kernel* local_kernel(const Image& img) {
  for (const Kernel& k : img.kernels)
    if (k.name.find("rgpu_local_scale") != std::string::npos) return &k;
  return nullptr;
}

void expect_test_kernels(const Image& img) {
  ASSERT_EQ(img.kernels.size(), expected().size() + 1);
  // rgpu_local_scale(float* x, float factor, int n), in an anonymous namespace: read like the
  // others (the client once skipped such kernels, as PyTorch has thousands of).
  const Kernel* local = local_kernel(img);
  ASSERT_NE(local, nullptr);
  EXPECT_EQ(local->param_bytes, 16u);
  ASSERT_EQ(local->params.size(), 3u);
  EXPECT_EQ(local->params[1].offset, 8u);
  EXPECT_EQ(local->params[2].offset, 12u);
  for (const auto& [name, want] : expected()) {
    const Kernel* k = img.find(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->param_bytes, want.bytes) << name;
    ASSERT_EQ(k->params.size(), want.params.size()) << name;
    for (size_t i = 0; i < want.params.size(); ++i) {
      EXPECT_EQ(k->params[i].ordinal, want.params[i].ordinal) << name << " param " << i;
      EXPECT_EQ(k->params[i].offset, want.params[i].offset) << name << " param " << i;
      EXPECT_EQ(k->params[i].size, want.params[i].size) << name << " param " << i;
    }
  }
}

struct Case {
  const char* label;
  const char* path;
  Kind kind;
};

class RealImage : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time, so there are no images";
    bytes_ = read_file(GetParam().path);
    ASSERT_FALSE(bytes_.empty()) << GetParam().path;
    if (GetParam().kind == Kind::kPtx) bytes_.push_back(0);  // as cuModuleLoadData takes it
  }
  std::vector<uint8_t> bytes_;
};

TEST_P(RealImage, IsDetectedAndSized) {
  EXPECT_EQ(detect(bytes_.data(), bytes_.size()), GetParam().kind);
  EXPECT_EQ(image_size(bytes_.data(), bytes_.size()), bytes_.size());
  // A bare pointer (cuModuleLoadData) finds the same end.
  EXPECT_EQ(image_size(bytes_.data(), SIZE_MAX), bytes_.size());
}

TEST_P(RealImage, GivesTheSignatureLayoutOfEveryKernel) {
  Image img;
  std::string err;
  ASSERT_TRUE(parse(bytes_.data(), bytes_.size(), &img, &err)) << err;
  expect_test_kernels(img);
}

// Module-scope variables of a cubin, with their sizes (the fake driver places them in memory).
TEST_P(RealImage, ListsTheGlobalsOfMachineCode) {
  Image img;
  std::string err;
  ASSERT_TRUE(parse(bytes_.data(), bytes_.size(), 90, &img, &err)) << err;
  if (!img.native) return;  // PTX: globals are not read
  std::map<std::string, uint64_t> globals;
  for (const auto& g : img.globals) globals[g.name] = g.size;
  EXPECT_EQ(globals["rgpu_global_counter"], 4u) << GetParam().label;
  EXPECT_EQ(globals["rgpu_constant_table"], 64u) << GetParam().label;
}

// native says whether the kernels came from machine code for the asked GPU: the client loads
// those without waiting for the server's answer (client/modules.cpp).
TEST_P(RealImage, SaysWhetherItHoldsMachineCodeForTheGpu) {
  Image img;
  std::string err;
  ASSERT_TRUE(parse(bytes_.data(), bytes_.size(), 90, &img, &err)) << err;
  const std::string label = GetParam().label;
  const bool has_sm90_cubin = label == "cubin" || (GetParam().kind == Kind::kFatbin && label != "fatbin_ptx_only");
  EXPECT_EQ(img.native, has_sm90_cubin) << label;
  if (GetParam().kind == Kind::kFatbin) {
    ASSERT_TRUE(parse(bytes_.data(), bytes_.size(), 12, &img, &err)) << err;  // no sm_12 code: PTX or another cubin
    EXPECT_FALSE(img.native) << label;
  }
}

TEST_P(RealImage, RefusesEveryTruncationWithoutCrashing) {
  // Every prefix either fails or (PTX cut between entries) parses to a subset; none may crash.
  for (size_t n = 0; n < bytes_.size(); n += (n < 256 ? 1 : 61)) {
    std::vector<uint8_t> cut(bytes_.begin(), bytes_.begin() + long(n));
    Image img;
    std::string err;
    bool ok = parse(cut.data(), cut.size(), &img, &err);
    if (GetParam().kind != Kind::kPtx) {
      EXPECT_FALSE(ok) << "prefix of " << n << " bytes";
    }
    if (!ok) {
      EXPECT_FALSE(err.empty());
    }
    EXPECT_LE(image_size(cut.data(), cut.size()), cut.size());
  }
}

INSTANTIATE_TEST_SUITE_P(
    TestKernels, RealImage,
    ::testing::Values(Case{"cubin", RGPU_TEST_KERNEL_CUBIN, Kind::kCubin}, Case{"ptx", RGPU_TEST_KERNEL_PTX, Kind::kPtx},
                      Case{"fatbin", RGPU_TEST_KERNEL_FATBIN, Kind::kFatbin},
                      Case{"fatbin_lz4", RGPU_TEST_KERNEL_FATBIN_LZ4, Kind::kFatbin},
                      Case{"fatbin_zstd", RGPU_TEST_KERNEL_FATBIN_ZSTD, Kind::kFatbin},
                      Case{"fatbin_none", RGPU_TEST_KERNEL_FATBIN_NONE, Kind::kFatbin},
                      Case{"fatbin_ptx_only", RGPU_TEST_KERNEL_FATBIN_PTX, Kind::kFatbin}),
    [](const auto& info) { return std::string(info.param.label); });

// The compressed fatbins really hold compressed entries with the flag we decode.
TEST(CudaImage, CompressedFatbinsCarryTheirCodecFlag) {
  if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time";
  for (auto [path, flag] : {std::pair{RGPU_TEST_KERNEL_FATBIN_LZ4, 0x2000u}, std::pair{RGPU_TEST_KERNEL_FATBIN_ZSTD, 0x8000u}}) {
    std::vector<uint8_t> d = read_file(path);
    ASSERT_GE(d.size(), 16u + 64u);
    uint16_t hsize;
    std::memcpy(&hsize, &d[6], 2);
    uint64_t flags;
    std::memcpy(&flags, &d[hsize + 40], 8);
    EXPECT_TRUE(flags & flag) << path;
  }
}

// A compressed entry whose header claims more than its bytes can inflate to is refused before
// anything is allocated for it (an LZ4 block expands a byte 255 times at most; a zstd frame says
// its own size), not found corrupt after zeroing what it claimed.
TEST(CudaImage, RefusesACompressedEntryClaimingMoreThanItsBytesHold) {
  if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time";
  for (const char* path : {RGPU_TEST_KERNEL_FATBIN_LZ4, RGPU_TEST_KERNEL_FATBIN_ZSTD}) {
    std::vector<uint8_t> d = read_file(path);
    ASSERT_GE(d.size(), 16u + 64u);
    uint16_t hsize;
    std::memcpy(&hsize, &d[6], 2);
    // Each entry's uncompressed size (entry header offset 56) set to 300 times its bytes.
    for (size_t pos = hsize; pos + 64 <= d.size();) {
      uint32_t ehsize;
      uint64_t n;
      std::memcpy(&ehsize, &d[pos + 4], 4);
      std::memcpy(&n, &d[pos + 8], 8);
      if (ehsize < 64) break;
      const uint64_t claim = n * 300 + 4096;
      std::memcpy(&d[pos + 56], &claim, 8);
      pos += ehsize + n;
    }
    Image img;
    std::string err;
    EXPECT_FALSE(parse(d.data(), d.size(), &img, &err)) << path;
    EXPECT_NE(err.find("implausible uncompressed size"), std::string::npos) << path << ": " << err;
  }
}

TEST(CudaImage, FatbinWrapperIsNamedButNotFollowed) {
  struct {
    uint32_t magic, version;
    const void* data;
    const void* unused;
  } w{kFatbinWrapperMagic, 1, reinterpret_cast<const void*>(0x1234), nullptr};
  EXPECT_EQ(detect(&w, sizeof w), Kind::kFatbinWrapper);
  EXPECT_EQ(fatbin_wrapper_data(&w, sizeof w), reinterpret_cast<const void*>(0x1234));
  EXPECT_EQ(image_size(&w, sizeof w), 0u);
  Image img;
  std::string err;
  EXPECT_FALSE(parse(&w, sizeof w, &img, &err));
  EXPECT_NE(err.find("wrapper"), std::string::npos);
}

TEST(CudaImage, ParsesPtxParameterForms) {
  const char* ptx =
      "// header\n.version 8.0\n.target sm_90\n.address_size 64\n"
      ".extern .entry declared(.param .u32 x);\n"
      ".visible .entry k(\n"
      "  .param .u8 a,\n"
      "  .param .u64 .ptr .global .align 16 p,  /* pointee alignment, not the param's */\n"
      "  .param .align 4 .b8 s[12],\n"
      "  .param .f16 h,\n"
      "  .param .align 16 .b8 v[32]\n"
      ") .maxntid 128, 1, 1\n{ ret; }\n"
      ".entry noparams { ret; }\n";
  Image img;
  std::string err;
  ASSERT_TRUE(parse(ptx, std::strlen(ptx) + 1, &img, &err)) << err;
  ASSERT_EQ(img.kernels.size(), 2u);
  const Kernel* k = img.find("k");
  ASSERT_NE(k, nullptr);
  std::vector<std::pair<uint32_t, uint32_t>> got;
  for (const Param& p : k->params) got.emplace_back(p.offset, p.size);
  EXPECT_EQ(got, (std::vector<std::pair<uint32_t, uint32_t>>{{0, 1}, {8, 8}, {16, 12}, {28, 2}, {32, 32}}));
  EXPECT_EQ(k->param_bytes, 64u);
  ASSERT_NE(img.find("noparams"), nullptr);
  EXPECT_TRUE(img.find("noparams")->params.empty());
  EXPECT_EQ(img.find("declared"), nullptr);
}

TEST(CudaImage, RefusesGarbage) {
  Image img;
  std::string err;
  EXPECT_FALSE(parse(nullptr, 0, &img, &err));
  EXPECT_EQ(detect(nullptr, 10), Kind::kUnknown);
  const uint8_t junk[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  EXPECT_EQ(detect(junk, sizeof junk), Kind::kUnknown);
  EXPECT_FALSE(parse(junk, sizeof junk, &img, &err));
  EXPECT_EQ(image_size(junk, sizeof junk), 0u);

  // A fatbin header whose payload claims more than there is.
  uint8_t fb[32] = {};
  uint32_t magic = kFatbinMagic;
  std::memcpy(fb, &magic, 4);
  fb[6] = 16;
  uint64_t huge = ~0ull - 8;
  std::memcpy(fb + 8, &huge, 8);
  EXPECT_EQ(detect(fb, sizeof fb), Kind::kFatbin);
  EXPECT_EQ(image_size(fb, sizeof fb), 0u);
  EXPECT_FALSE(parse(fb, sizeof fb, &img, &err));

  // An ELF whose section table points far away.
  uint8_t elf[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  uint64_t shoff = 1ull << 40;
  std::memcpy(elf + 0x28, &shoff, 8);
  elf[0x3a] = 64;
  elf[0x3c] = 3;
  EXPECT_EQ(image_size(elf, sizeof elf), 0u);
  EXPECT_FALSE(parse(elf, sizeof elf, &img, &err));

  // PTX with a broken parameter list.
  const char* ptx = ".version 8.0\n.entry k(.param .u32 a, .param b)\n";
  EXPECT_FALSE(parse(ptx, std::strlen(ptx), &img, &err));
  // Unterminated PTX has no self-delimited size.
  const char text[4] = {'.', 'v', 'e', 'r'};
  EXPECT_EQ(image_size(text, sizeof text), 0u);
}

TEST(CudaImage, CorruptedCubinRecordsAreRefusedOrIgnoredButNeverMisread) {
  if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time";
  std::vector<uint8_t> d = read_file(RGPU_TEST_KERNEL_CUBIN);
  // Flip each byte in turn over the first 4 KiB (headers, symbols, .nv.info): no crash, and
  // whatever parses keeps the ordinal contract.
  for (size_t i = 0; i < std::min<size_t>(d.size(), 4096); ++i) {
    std::vector<uint8_t> m = d;
    m[i] ^= 0xff;
    Image img;
    std::string err;
    if (!parse(m.data(), m.size(), &img, &err)) continue;
    for (const Kernel& k : img.kernels) {
      for (size_t j = 0; j < k.params.size(); ++j) ASSERT_EQ(k.params[j].ordinal, j);
    }
  }
}

// The section header of the section named `name` in an ELF image (its offset in d); 0 if none.
size_t section_header(const std::vector<uint8_t>& d, const std::string& name) {
  auto u16 = [&](size_t at) { uint16_t v; std::memcpy(&v, &d[at], 2); return v; };
  auto u64 = [&](size_t at) { uint64_t v; std::memcpy(&v, &d[at], 8); return v; };
  const uint64_t shoff = u64(0x28);
  const uint16_t shentsize = u16(0x3a), shnum = u16(0x3c), shstrndx = u16(0x3e);
  const uint64_t strtab = u64(shoff + uint64_t(shstrndx) * shentsize + 24);
  for (uint16_t i = 0; i < shnum; ++i) {
    const size_t h = shoff + size_t(i) * shentsize;
    uint32_t at;
    std::memcpy(&at, &d[h], 4);
    if (name == reinterpret_cast<const char*>(&d[strtab + at])) return h;
  }
  return 0;
}

// A .nv.info section marked NOBITS may claim any offset (read_elf checks only sections with file
// bytes): found by cuda_image_fuzz on the GPU host (2026-12-06), a read far past the image.
TEST(CudaImage, ParameterRecordsOutsideTheImageAreRefused) {
  if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time";
  std::vector<uint8_t> d = read_file(RGPU_TEST_KERNEL_CUBIN);
  const size_t h = section_header(d, ".nv.info.rgpu_vec_add");
  ASSERT_NE(h, 0u);
  const uint32_t nobits = 8;
  const uint64_t far = uint64_t{1} << 46;
  std::memcpy(&d[h + 4], &nobits, 4);
  std::memcpy(&d[h + 24], &far, 8);
  Image img;
  std::string err;
  EXPECT_FALSE(parse(d.data(), d.size(), &img, &err));
  EXPECT_NE(err.find(".nv.info.rgpu_vec_add lies past the end"), std::string::npos) << err;
}

// A kernel whose parameter records the reader does not know keeps its buffer size but is marked
// unknown (callers then ask the driver), and the image's other kernels stay usable: issue 3, where
// an unread 8 KiB layout was packed as zeros and the kernel faulted on the device.
TEST(CudaImage, UnreadableParameterRecordsLeaveOnlyThatKernelsLayoutUnknown) {
  if (!RGPU_HAVE_TEST_KERNELS) GTEST_SKIP() << "nvcc was not found at configure time";
  std::vector<uint8_t> d = read_file(RGPU_TEST_KERNEL_CUBIN);
  // The wide records are {u8 format 4, u8 attribute 0x45, u16 size 12}: rename the attribute.
  int renamed = 0;
  for (size_t i = 0; i + 4 <= d.size(); ++i) {
    if (d[i] == 0x04 && d[i + 1] == 0x45 && d[i + 2] == 0x0c && d[i + 3] == 0x00) {
      d[i + 1] = 0x7e;
      ++renamed;
    }
  }
  ASSERT_EQ(renamed, 3) << "rgpu_big_params should have one wide record per parameter";
  Image img;
  std::string err;
  ASSERT_TRUE(parse(d.data(), d.size(), &img, &err)) << err;
  const Kernel* big = img.find("rgpu_big_params");
  ASSERT_NE(big, nullptr);
  EXPECT_FALSE(big->layout_known);
  EXPECT_TRUE(big->params.empty());
  EXPECT_EQ(big->param_bytes, 8204u);
  const Kernel* vec = img.find("rgpu_vec_add");
  ASSERT_NE(vec, nullptr);
  EXPECT_TRUE(vec->layout_known);
  EXPECT_EQ(vec->params.size(), 4u);
}

}  // namespace
}  // namespace rgpu::image
