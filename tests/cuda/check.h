// Self-checking helpers for the runtime programs (tests/cuda/README.md): every failed check
// prints what failed; main ends with finish(), which prints PASS or FAIL as the last line and
// returns the exit status.
#pragma once
#include <cstdio>

static int g_failures = 0;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      ++g_failures;                                               \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                   \
      std::printf("\n");                                          \
      std::fflush(stdout);                                        \
    }                                                             \
  } while (0)

// A call returning a status where 0 is success; `text` turns the status into words.
#define CHECK_STATUS(expr, text)                                                    \
  do {                                                                              \
    auto st_ = (expr);                                                              \
    CHECK(static_cast<int>(st_) == 0, "returned %d (%s)", static_cast<int>(st_), text(st_)); \
  } while (0)

static int finish() {
  if (g_failures)
    std::printf("FAIL (%d checks failed)\n", g_failures);
  else
    std::printf("PASS\n");
  return g_failures ? 1 : 0;
}
