// Tests of server/module_cache.h: images are kept by the SHA-256 of their bytes, a damaged or
// edited file is never handed out (nor listed in the index clients trust), the size cap holds,
// and the cache is only ever an optimisation.
#include "server/module_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/env.h"

namespace rgpu::server::module_cache {
namespace {

namespace fs = std::filesystem;

// A fatbin of n bytes in all (common/cuda_image.h measures it by its header): magic, version,
// header size 16, payload size n - 16, then seed-dependent bytes.
std::vector<uint8_t> image(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  const uint32_t magic = 0xBA55ED50;
  const uint16_t version = 1, header = 16;
  const uint64_t payload = n - 16;
  std::memcpy(v.data(), &magic, 4);
  std::memcpy(v.data() + 4, &version, 2);
  std::memcpy(v.data() + 6, &header, 2);
  std::memcpy(v.data() + 8, &payload, 8);
  return v;
}

// The cache's files, by name, in dir.
size_t files_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

crypto::Digest digest(const std::vector<uint8_t>& v) { return crypto::sha256(v.data(), v.size()); }

class ModuleCache : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rgpu_module_cache_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::string err;
    ASSERT_TRUE(configure(dir_ + "/cache", 1 << 20, &err)) << err;
  }
  void TearDown() override {
    std::string err;
    configure("", 0, &err);
    fs::remove_all(dir_);
  }
  std::string path(const crypto::Digest& d) const { return dir_ + "/cache/" + hex(d); }
  bool listed(const crypto::Digest& d) {
    std::vector<crypto::Digest> all = index(1000);
    return std::find(all.begin(), all.end(), d) != all.end();
  }
  std::string dir_;
};

TEST_F(ModuleCache, ConfigureCreatesTheDirectoryAndItsParents) {
  EXPECT_TRUE(enabled());
  EXPECT_TRUE(fs::is_directory(dir_ + "/cache"));
  std::string err;
  ASSERT_TRUE(configure(dir_ + "/a/b/c", 1 << 20, &err)) << err;
  EXPECT_TRUE(fs::is_directory(dir_ + "/a/b/c"));
}

TEST_F(ModuleCache, AStoredImageIsFiledUnderTheHexSha256OfItsBytesAndLoadsBack) {
  const auto img = image(5000, 3);
  store(img.data(), img.size());
  const crypto::Digest d = digest(img);
  EXPECT_EQ(hex(d).size(), 64u);
  EXPECT_TRUE(fs::is_regular_file(path(d)));
  EXPECT_EQ(fs::file_size(path(d)), img.size());
  std::vector<uint8_t> got;
  ASSERT_TRUE(load(d, &got));
  EXPECT_EQ(got, img);
  EXPECT_TRUE(listed(d));
  // No temporary file is left beside it.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/cache")) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST_F(ModuleCache, TheSameBytesAreKeptOnceAndOtherBytesApart) {
  const auto a = image(100, 1), b = image(100, 2);
  store(a.data(), a.size());
  store(a.data(), a.size());
  store(b.data(), b.size());
  EXPECT_NE(hex(digest(a)), hex(digest(b)));
  std::vector<crypto::Digest> all = index(1000);
  EXPECT_EQ(all.size(), 2u);
  std::vector<uint8_t> got;
  ASSERT_TRUE(load(digest(b), &got));
  EXPECT_EQ(got, b);
}

TEST_F(ModuleCache, AnImageNeverStoredIsNotFound) {
  std::vector<uint8_t> got = {1, 2, 3};
  EXPECT_FALSE(load(digest(image(10, 9)), &got));
}

TEST_F(ModuleCache, ADamagedFileFailsItsHashIsRemovedAndIsNotListed) {
  const auto img = image(4096, 5);
  store(img.data(), img.size());
  const crypto::Digest d = digest(img);
  {
    std::fstream f(path(d), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put(static_cast<char>(img[100] ^ 0xff));
  }
  EXPECT_FALSE(listed(d));  // the index checks any file changed since the server stamped it
  EXPECT_FALSE(fs::exists(path(d)));
  std::vector<uint8_t> got;
  EXPECT_FALSE(load(d, &got));
  EXPECT_TRUE(got.empty());
}

TEST_F(ModuleCache, ADamagedFileWithTheStampRestoredStillFailsOnLoad) {
  const auto img = image(4096, 6);
  store(img.data(), img.size());
  const crypto::Digest d = digest(img);
  struct stat before;
  ASSERT_EQ(stat(path(d).c_str(), &before), 0);
  {
    std::fstream f(path(d), std::ios::in | std::ios::out | std::ios::binary);
    f.put(static_cast<char>(img[0] ^ 1));
  }
  const timespec times[2] = {before.st_mtim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, path(d).c_str(), times, 0), 0);
  std::vector<uint8_t> got;
  EXPECT_FALSE(load(d, &got));
  EXPECT_FALSE(fs::exists(path(d)));
}

TEST_F(ModuleCache, AFileCutShortIsRefused) {
  const auto img = image(4096, 7);
  store(img.data(), img.size());
  const crypto::Digest d = digest(img);
  fs::resize_file(path(d), 1000);
  std::vector<uint8_t> got;
  EXPECT_FALSE(load(d, &got));
  EXPECT_FALSE(listed(d));
}

TEST_F(ModuleCache, AFileCopiedInUnderItsRightNameIsCheckedThenListed) {
  // Another server's cache copied in: not stamped, so the index checks it before listing it.
  const auto img = image(3000, 8);
  const crypto::Digest d = digest(img);
  {
    std::ofstream f(path(d), std::ios::binary);
    f.write(reinterpret_cast<const char*>(img.data()), static_cast<std::streamsize>(img.size()));
  }
  EXPECT_TRUE(listed(d));
  std::vector<uint8_t> got;
  ASSERT_TRUE(load(d, &got));
  EXPECT_EQ(got, img);
}

TEST_F(ModuleCache, FilesNotNamedByAHashAreNeitherListedNorCounted) {
  for (const char* name : {"notes.txt", "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"}) {
    std::ofstream f(dir_ + "/cache/" + name);
    f << std::string(2 << 20, 'x');  // past the cap, were it counted
  }
  EXPECT_TRUE(index(1000).empty());
  const auto img = image(1000, 9);
  store(img.data(), img.size());
  EXPECT_TRUE(listed(digest(img)));
}

// Issue 17, defect 6: at the cap the cache stopped storing and stayed full for good. Now the least
// recently used images (last stored or loaded) make room.
TEST_F(ModuleCache, AtTheCapTheLeastRecentlyUsedImagesMakeRoom) {
  std::string err;
  ASSERT_TRUE(configure(dir_ + "/cache", 10000, &err));
  const auto a = image(4000, 1), b = image(4000, 2), c = image(4000, 3);
  store(a.data(), a.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  store(b.data(), b.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::vector<uint8_t> got;
  ASSERT_TRUE(load(digest(a), &got));  // a is used again: b is now the least recently used
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  store(c.data(), c.size());  // 12000 > 10000: b goes
  EXPECT_TRUE(listed(digest(a)));
  EXPECT_FALSE(listed(digest(b)));
  EXPECT_FALSE(fs::exists(path(digest(b))));
  EXPECT_TRUE(listed(digest(c)));
  EXPECT_EQ(total_bytes(), 8000u);
  // An image larger than the whole cache is not stored, and removes nothing.
  const auto huge = image(20000, 4);
  store(huge.data(), huge.size());
  EXPECT_FALSE(listed(digest(huge)));
  EXPECT_TRUE(listed(digest(a)));
  EXPECT_TRUE(listed(digest(c)));
}

// Issue 17, defect 6: bytes sent after a valid image were stored with it, under a hash no client
// asks for. Only the image's own length is stored, under the hash of those bytes.
TEST_F(ModuleCache, OnlyTheImageIsStoredNotBytesSentPastItsEnd) {
  const auto img = image(3000, 5);
  std::vector<uint8_t> sent = img;
  sent.resize(img.size() + 100000, 0xEE);
  store(sent.data(), sent.size());
  EXPECT_TRUE(listed(digest(img)));
  EXPECT_EQ(fs::file_size(path(digest(img))), img.size());
  EXPECT_FALSE(fs::exists(path(digest(sent))));
  EXPECT_EQ(total_bytes(), img.size());
  // Bytes that are no image at all are not stored.
  std::vector<uint8_t> junk(5000, 0x41);
  store(junk.data(), junk.size());
  EXPECT_EQ(files_in(dir_ + "/cache"), 1u);
}

// The total is kept in memory: set from one scan at configure, then counted by stores and evictions
// (a store no longer rescans the directory).
TEST_F(ModuleCache, TheTotalIsCountedFromTheFilesAtStartAndByEachStore) {
  const auto a = image(1000, 6), b = image(2000, 7);
  store(a.data(), a.size());
  std::string err;
  ASSERT_TRUE(configure(dir_ + "/cache", 1 << 20, &err));  // a server restarting finds a
  EXPECT_EQ(total_bytes(), 1000u);
  store(b.data(), b.size());
  store(b.data(), b.size());  // already there: not counted twice
  EXPECT_EQ(total_bytes(), 3000u);
}

// Issue 17, defect 1: one cache for all sessions let any client list and load another's modules.
// Each tenant sees only its own images; the "" tenant's are the directory itself.
TEST_F(ModuleCache, EachTenantListsAndLoadsOnlyItsOwnImages) {
  const auto mine = image(1000, 8), theirs = image(1000, 9);
  set_tenant("alice");
  store(mine.data(), mine.size());
  set_tenant("bob");
  store(theirs.data(), theirs.size());
  std::vector<uint8_t> got;
  EXPECT_FALSE(load(digest(mine), &got));
  EXPECT_FALSE(listed(digest(mine)));
  EXPECT_TRUE(listed(digest(theirs)));
  set_tenant("");
  EXPECT_TRUE(index(1000).empty());
  EXPECT_FALSE(load(digest(theirs), &got));
  set_tenant("alice");
  EXPECT_TRUE(load(digest(mine), &got));
  EXPECT_EQ(got, mine);
  EXPECT_TRUE(fs::is_regular_file(dir_ + "/cache/tenant-alice/" + hex(digest(mine))));
  EXPECT_EQ(total_bytes(), 2000u);  // one cap for all tenants
  set_tenant("");
}

TEST_F(ModuleCache, TheIndexStopsAtItsLimit) {
  for (uint8_t i = 0; i < 5; ++i) {
    const auto img = image(100, i);
    store(img.data(), img.size());
  }
  EXPECT_EQ(index(3).size(), 3u);
  EXPECT_EQ(index(1000).size(), 5u);
}

TEST_F(ModuleCache, WhenOffNothingIsStoredOrFound) {
  std::string err;
  ASSERT_TRUE(configure("", 0, &err));
  EXPECT_FALSE(enabled());
  const auto img = image(100, 1);
  store(img.data(), img.size());
  std::vector<uint8_t> got;
  EXPECT_FALSE(load(digest(img), &got));
  EXPECT_TRUE(index(10).empty());
  EXPECT_TRUE(fs::is_empty(dir_ + "/cache"));
}

TEST_F(ModuleCache, ADirectoryThatCannotBeMadeLeavesTheCacheOffWithAReason) {
  {
    std::ofstream f(dir_ + "/file");
  }
  std::string err;
  EXPECT_FALSE(configure(dir_ + "/file/cache", 1 << 20, &err));
  EXPECT_NE(err.find(dir_ + "/file/cache"), std::string::npos) << err;
  EXPECT_FALSE(enabled());
}

TEST(ModuleCacheDefault, DirectoryFollowsXdgCacheHomeThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  setenv("XDG_CACHE_HOME", "/x", 1);
  setenv("HOME", "/h", 1);
  env::reload();
  EXPECT_EQ(default_dir(), "/x/rgpu");
  unsetenv("XDG_CACHE_HOME");
  env::reload();
  EXPECT_EQ(default_dir(), "/h/.cache/rgpu/modules");
  unsetenv("HOME");
  env::reload();
  EXPECT_EQ(default_dir(), "");
  if (xdg) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) setenv("HOME", saved_home.c_str(), 1);
  env::reload();
}

}  // namespace
}  // namespace rgpu::server::module_cache
