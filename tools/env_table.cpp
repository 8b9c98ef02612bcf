// rgpu-env-table: writes or checks a markdown file's table of environment variables, which is
// generated from the one table in common/env.cpp (env::readme_table()). Two files hold it: the
// README and the docs site's configuration reference.
//
//   rgpu-env-table                 prints the table
//   rgpu-env-table --check FILE    exit 1 when FILE's table differs (ctest env_table_readme,
//                                  env_table_docs)
//   rgpu-env-table --write FILE    replaces FILE's table
//
// The table sits between a begin marker line (kBegin, then the rest of the comment: each file says
// there which command writes it) and the end marker line kEnd; FILE must hold each once.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "common/env.h"
#include "common/version.h"

namespace {

constexpr char kBegin[] = "<!-- environment variables: generated from common/env.cpp by build/bin/rgpu-env-table";
constexpr char kEnd[] = "<!-- end of the generated table -->\n";

int usage() {
  std::fprintf(stderr, "usage: rgpu-env-table [--check FILE | --write FILE | --version]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string table = rgpu::env::readme_table();
  if (argc == 1) {
    std::fputs(table.c_str(), stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("rgpu-env-table %s\n", RGPU_VERSION);
    return 0;
  }
  if (argc != 3) return usage();
  const bool write = std::strcmp(argv[1], "--write") == 0;
  if (!write && std::strcmp(argv[1], "--check") != 0) return usage();
  const char* path = argv[2];
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "rgpu-env-table: cannot read %s\n", path);
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t b = text.find(kBegin);
  // The table starts on the line after the begin marker's.
  const size_t begin_end = b == std::string::npos ? std::string::npos : text.find("-->\n", b);
  const size_t e = begin_end == std::string::npos ? std::string::npos : text.find(kEnd, begin_end);
  if (e == std::string::npos || text.find(kBegin, b + 1) != std::string::npos) {
    std::fprintf(stderr,
                 "rgpu-env-table: %s must hold the lines\n%s ... -->\n...\n%sonce each, in that order\n",
                 path, kBegin, kEnd);
    return 2;
  }
  const size_t start = begin_end + 4;
  const std::string current = text.substr(start, e - start);
  if (current == table) return 0;
  if (!write) {
    std::fprintf(stderr,
                 "rgpu-env-table: the table of environment variables in %s differs from the one in "
                 "common/env.cpp, which is the source. Run build/bin/rgpu-env-table --write %s (after "
                 "building) and commit the result. Generated:\n%s",
                 path, path, table.c_str());
    return 1;
  }
  std::ofstream out(path, std::ios::trunc);
  out << text.substr(0, start) << table << text.substr(e);
  if (!out.flush()) {
    std::fprintf(stderr, "rgpu-env-table: cannot write %s\n", path);
    return 2;
  }
  return 0;
}
