// Logging for every rgpu component: one line per event, prefixed with the component's name
// ("rgpu", "rgpu-server[1234]"), printf-style. Errors and warnings always print (stderr);
// info prints unless RGPU_QUIET-like settings lower the level; debug only when raised.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace rgpu::log {

enum Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Sets the prefix printed before every line (e.g. "rgpu-server[4242]").
void set_prefix(const std::string& prefix);
void set_level(Level level);
Level level();

void error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// RGPU_TRACE's destination, opened at the first call (stdout for 1, stderr for 2, else a file
// appended to); nullptr when tracing is off. The CUDA and NVML shims both write their call traces
// there, one fprintf + fflush per line.
FILE* trace_stream();

// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Text from the other side of a connection (a client's identity, a server's reason), made safe to
// log and to show in a table: control characters become '?', so a newline cannot forge a log line
// nor a tab shift a column.
std::string printable(std::string text);

}  // namespace rgpu::log
