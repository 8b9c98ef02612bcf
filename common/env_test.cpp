// Tests of common/env: the table is complete (every variable read is in it, nothing else in the
// product reads the environment) and the values read are the table's.
#include "common/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace rgpu::env {
namespace {

namespace fs = std::filesystem;

// Saves every table variable, unsets them, and restores them at the end of the test.
class CleanEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const Variable& v : variables()) {
      const char* value = std::getenv(v.name);
      saved_[v.name] = value ? std::optional<std::string>(value) : std::nullopt;
      unsetenv(v.name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
    reload();
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

using Env = CleanEnvironment;

TEST_F(Env, UnsetVariablesGiveTheTablesDefaults) {
  reload();
  const Settings& s = get();
  EXPECT_EQ(s.server, "127.0.0.1:9713");
  EXPECT_EQ(s.opserver, "127.0.0.1:9720");
  EXPECT_EQ(s.token, "");
  EXPECT_EQ(s.trace, "0");
  EXPECT_TRUE(s.batch);
  EXPECT_EQ(s.log, "info");
  EXPECT_EQ(s.connect_timeout_s, 60);
  EXPECT_EQ(s.bulk_chunk, size_t{1} << 20);
  EXPECT_TRUE(s.oneway_loads && s.oneway_sync && s.alloc_ahead && s.tools_stream && s.image_layouts);
  EXPECT_FALSE(s.cuda_cache_disable);
  EXPECT_FALSE(s.has_visible_devices);
  EXPECT_EQ(s.order_wait_ms, 10000);
  EXPECT_FALSE(s.fake_noop_kernels);
  EXPECT_EQ(s.fake_load_delay_ms, 0);
  EXPECT_EQ(s.home, "");
}

TEST_F(Env, NumbersOutOfRangeOrNotNumbersFallBackOrAreClamped) {
  setenv("RGPU_BULK_CHUNK", "junk", 1);
  setenv("RGPU_CONNECT_TIMEOUT", "-3", 1);
  setenv("RGPU_ORDER_WAIT_MS", "0", 1);
  reload();
  EXPECT_EQ(get().bulk_chunk, size_t{1} << 20);
  EXPECT_EQ(get().connect_timeout_s, 60);
  EXPECT_EQ(get().order_wait_ms, 10000);
  setenv("RGPU_BULK_CHUNK", "1", 1);
  setenv("RGPU_ORDER_WAIT_MS", "300", 1);
  reload();
  EXPECT_EQ(get().bulk_chunk, size_t{64} << 10);
  EXPECT_EQ(get().order_wait_ms, 300);
  setenv("RGPU_BULK_CHUNK", "999999999999", 1);
  reload();
  EXPECT_EQ(get().bulk_chunk, size_t{32} << 20);
}

TEST_F(Env, SwitchesTakeOnlyTheirDocumentedValue) {
  setenv("RGPU_FAKE_NOOP_KERNELS", "yes", 1);  // only "1" turns it on
  setenv("CUDA_CACHE_DISABLE", "0", 1);
  setenv("RGPU_BATCH", "no", 1);  // only "0" turns batching off
  reload();
  EXPECT_FALSE(get().fake_noop_kernels);
  EXPECT_FALSE(get().cuda_cache_disable);
  EXPECT_TRUE(get().batch);
  setenv("RGPU_FAKE_NOOP_KERNELS", "1", 1);
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  setenv("RGPU_BATCH", "0", 1);
  setenv("RGPU_FAKE_LOAD_DELAY_MS", "250", 1);
  reload();
  EXPECT_TRUE(get().fake_noop_kernels);
  EXPECT_TRUE(get().cuda_cache_disable);
  EXPECT_FALSE(get().batch);
  EXPECT_EQ(get().fake_load_delay_ms, 250);
}

TEST_F(Env, ProgressIsOnOffOrLeftToTheTerminal) {
  for (const auto& [value, want] : {std::pair<const char*, int>{"1", 1}, {"0", 0}, {"", -1}, {"yes", -1}}) {
    setenv("RGPU_PROGRESS", value, 1);
    reload();
    EXPECT_EQ(get().progress, want) << value;
  }
}

TEST_F(Env, AnEmptyVisibleDevicesListIsSetAndNamesNoDevice) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  reload();
  EXPECT_TRUE(get().has_visible_devices);
  EXPECT_EQ(get().visible_devices, "");
}

// Names read from the environment by the Python package (it cannot use this file).
std::set<std::string> python_reads(std::vector<std::string>* unknown) {
  std::set<std::string> names;
  const std::regex read(R"(os\.(?:environ\.get|environ\[|getenv)\(?\s*["']([A-Za-z_0-9]+)["'])");
  for (const auto& e : fs::recursive_directory_iterator(fs::path(RGPU_SOURCE_DIR) / "python")) {
    if (e.path().extension() != ".py") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    for (std::sregex_iterator it(text.begin(), text.end(), read), end; it != end; ++it) {
      names.insert((*it)[1]);
      bool listed = false;
      for (const Variable& v : variables()) listed |= (*it)[1] == v.name && (v.readers & kTorch);
      if (!listed) unknown->push_back(e.path().string() + ": " + (*it)[1].str());
    }
  }
  return names;
}

TEST(EnvTable, EveryVariableReadIsInTheTableAndEveryOneInItIsRead) {
  // read_all() aborts on a name missing from the table, so reaching here covers the first half.
  std::set<std::string> read;
  for (const std::string& n : names_read()) read.insert(n);
  std::vector<std::string> unknown;
  for (const std::string& n : python_reads(&unknown)) read.insert(n);
  EXPECT_TRUE(unknown.empty()) << "python/ reads variables the table (common/env.cpp) lacks for the torch "
                                  "device: "
                               << ::testing::PrintToString(unknown);
  for (const Variable& v : variables())
    EXPECT_TRUE(read.count(v.name)) << v.name << " is in the table but nothing reads it";
}

TEST(EnvTable, NothingOutsideCommonEnvReadsTheEnvironment) {
  // Product code only: tests, benchmarks and scripts read their own settings.
  const std::regex call(R"(\b(secure_getenv|getenv)\s*\(|\benviron\b)");
  std::vector<std::string> offenders;
  for (const char* dir : {"client", "common", "protocol", "server", "fakecuda", "opserver", "tools", "python"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(RGPU_SOURCE_DIR) / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".h" && ext != ".c" && ext != ".cc") continue;
      const std::string rel = fs::relative(e.path(), RGPU_SOURCE_DIR).string();
      if (rel == "common/env.cpp" || rel == "common/env.h") continue;
      // Unit tests and fuzz targets beside the code set and read what they test.
      const std::string stem = e.path().stem().string();
      if (stem.ends_with("_test") || stem.ends_with("_fuzz")) continue;
      std::ifstream in(e.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        const size_t comment = line.find("//");
        const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
        if (std::regex_search(code, call)) offenders.push_back(rel + ":" + std::to_string(n) + ": " + line);
      }
    }
  }
  EXPECT_TRUE(offenders.empty()) << "read environment variables through common/env.h (and add them to its "
                                    "table in common/env.cpp):\n"
                                 << ::testing::PrintToString(offenders);
}

TEST(EnvTable, TheReadmeTableHasOneRowPerVariableWithItsDefault) {
  const std::string t = readme_table();
  for (const Variable& v : variables()) {
    const std::string row = "| `" + std::string(v.name) + "` | ";
    const size_t at = t.find(row);
    ASSERT_NE(at, std::string::npos) << v.name;
    EXPECT_EQ(t.find(row, at + 1), std::string::npos) << v.name << " twice";
    const std::string shown = v.shown_default ? v.shown_default : "`" + std::string(v.fallback) + "`";
    EXPECT_EQ(t.compare(at + row.size(), shown.size(), shown), 0) << v.name;
  }
}

}  // namespace
}  // namespace rgpu::env
