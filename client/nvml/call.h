// One NVML call on its way to rgpu-server: what the generated stubs (gen/nvml_client_stubs.gen.cpp)
// and the hand-written entries (client/nvml/entry.cpp) use to reach the wire.
//
// The NVML shim has a connection of its own (opened by nvmlInit*, kept until the process exits),
// separate from libcuda's: a program may load either library without the other. Every NVML call
// waits for its reply; NVML is never on a hot path.
//
// invoke() returns the call's nvmlReturn_t, NVML_ERROR_UNINITIALIZED before nvmlInit has connected,
// and NVML_ERROR_GPU_IS_LOST once the connection is gone. replied() says whether reply() holds the
// handler's outputs (it does whenever the server answered, whatever the result).
#pragma once

#include <nvml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/wire.h"
#include "protocol/messages.h"

#define RGPU_NVML_API __attribute__((visibility("default")))

namespace rgpu::client::nvml {

inline constexpr unsigned int kMaxArray = proto::kNvmlMaxArray;
inline constexpr unsigned int kMaxString = proto::kNvmlMaxString;

// Several servers (RGPU_SERVER=a,b): their GPUs are one list, and a call goes to the server of
// the handles it names. A handle is the server's id with, above kServerShift, the number of its
// server (0 for the first: with one server, handles are the server's ids as they are). The
// generated stubs read a call's handles with handle_id before invoke(), which sends the call to
// the server they name (route_to's, else the first), and make the handles of its reply with
// handle_from, which marks them with that server. A call naming two servers' handles is refused.
inline constexpr unsigned kServerShift = 48;
namespace detail {
struct Route {
  int server = -1;  // the server the call being built goes to; -1: none named yet
  bool mixed = false;
  int last = 0;  // the server of the last call made: handle_from marks its handles
};
extern thread_local Route t_route;
}  // namespace detail
// Sends this thread's next call to server s.
inline void route_to(int s) {
  if (detail::t_route.server >= 0 && detail::t_route.server != s) detail::t_route.mixed = true;
  detail::t_route.server = s;
}
// The server of the last call this thread made.
inline int last_server() { return detail::t_route.last; }
// How many servers the shim is connected to (1 before connect()).
int server_count();

inline uint64_t handle_id(const void* h) {
  const uint64_t id = reinterpret_cast<uint64_t>(h);
  if (id == 0) return 0;
  route_to(static_cast<int>(id >> kServerShift));
  return id & ((uint64_t{1} << kServerShift) - 1);
}
template <class H>
H handle_from(uint64_t id) {
  if (id == 0) return nullptr;
  return reinterpret_cast<H>(id | (static_cast<uint64_t>(detail::t_route.last) << kServerShift));
}

class Call {
 public:
  Call(uint16_t op, const char* name) : op_(op), name_(name) {}
  // The next call on this thread is routed afresh.
  ~Call() {
    detail::t_route.server = -1;
    detail::t_route.mixed = false;
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  Writer& args() { return args_; }
  nvmlReturn_t invoke();
  bool replied() const { return replied_; }
  Reader& reply() { return reply_reader_; }
  // The reply did not decode: logs it, and the call fails with NVML_ERROR_UNKNOWN.
  nvmlReturn_t bad_reply();

 private:
  nvmlReturn_t invoke_once();
  uint16_t op_;
  const char* name_;
  std::vector<uint8_t> args_buf_;
  Writer args_{&args_buf_};
  std::vector<uint8_t> reply_buf_;
  Reader reply_reader_;
  bool replied_ = false;
};

// Logs (once per name) a call this build does not forward; returns NVML_ERROR_NOT_SUPPORTED.
nvmlReturn_t unsupported(const char* name);
// An array count the wire does not carry (negative, or over kMaxArray).
nvmlReturn_t unsupported_size(const char* name, long long count);
// Copies a string from the server into the caller's buffer of len bytes, always NUL-terminated.
void copy_string(const std::string& s, char* dst, unsigned int len);

// Connects to RGPU_SERVER (once; again after the connection broke). On failure logs why, with
// what to do, and returns an NVML error.
nvmlReturn_t connect();
bool connected();
// How many connections connect() has made: what the client knows of the server's NVML state
// (its init count, the device count) holds only for one of them.
uint64_t connection_number();

}  // namespace rgpu::client::nvml
