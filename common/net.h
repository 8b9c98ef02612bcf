// TCP plumbing shared by client and server: address parsing, connect and listen with errors a
// user can act on, and whole-buffer reads and writes that survive EINTR and short transfers.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <string>

namespace rgpu::net {

struct Address {
  std::string host;
  uint16_t port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// Parses "host:port" ("[::1]:9713" for IPv6). An empty host or port takes the default.
bool parse_address(const std::string& s, uint16_t default_port, Address* out, std::string* err);

// Connects with TCP_NODELAY, giving up after timeout_ms (negative: the kernel's own limit). On
// failure returns -1 and a sentence naming the address and cause (*cause, when given: the errno).
int connect_tcp(const Address& addr, std::string* err, int timeout_ms = -1, int* cause = nullptr);
// Binds and listens. On failure returns -1 and a sentence naming the address and cause.
int listen_tcp(const Address& addr, std::string* err);
// True when host names a loopback address only (127.0.0.0/8, ::1, localhost).
bool is_loopback(const std::string& host);
// The peer of a connected socket, "host:port".
std::string peer_name(int fd);

void set_nodelay(int fd);
// Limits how long a blocking read may wait (0 = forever).
void set_recv_timeout(int fd, int seconds);
// Larger kernel buffers for bulk transfer.
void set_buffers(int fd, int bytes);

// Reads exactly n bytes. Returns n, 0 on orderly EOF before any byte, -1 on error or EOF mid-way.
ssize_t read_full(int fd, void* buf, size_t n);
// Writes all of the buffers. Returns false on error (the peer is gone).
bool write_full(int fd, const void* buf, size_t n);
// `counted` (optional) grows by each piece the kernel takes, as it takes it (client/progress.h).
bool writev_full(int fd, struct iovec* iov, int iovcnt, std::atomic<uint64_t>* counted = nullptr);

}  // namespace rgpu::net
