// Opening a client's session on a server: dial with backoff, the handshake, what the server
// sends right behind Welcome, then the reliable channel (protocol/channel.h) with its redial, so
// that a broken connection is resumed instead of lost. What every client endpoint shares: the
// CUDA shim's and the NVML shim's connection to rgpu-server (client/connection.cpp) and the
// PyTorch device's connection to rgpu-opserver (python/rgpu/csrc/runtime/connection.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/net.h"
#include "protocol/channel.h"
#include "protocol/handshake.h"
#include "protocol/tls.h"
#include "protocol/transport.h"

namespace rgpu::proto {

// "user@host pid=N prog=NAME" (plus " " and suffix when given): how a client names itself in the
// handshake, and so in the server's log and session list.
std::string client_identity(const std::string& suffix = "");

// Parses a server address as RGPU_SERVER and RGPU_OPSERVER give it: "host:port", or
// "tls://host:port" (*tls set). False with *err.
bool parse_server_address(const std::string& s, uint16_t default_port, net::Address* out, bool* tls,
                          std::string* err);

// Splits RGPU_SERVER's comma-separated list ("a:9713,tls://b:9713") into its entries, each
// checked with parse_server_address. False with *err, which shows the form a list takes.
bool split_server_list(const std::string& list, std::vector<std::string>* out, std::string* err);

struct ClientSessionOptions {
  net::Address address;
  // TLS (tls:// addresses): the client's context (tls_client_context, from RGPU_TLS_*); nullptr:
  // plain TCP.
  std::shared_ptr<TlsContext> tls;
  std::string token;     // RGPU_TOKEN ("" for none)
  std::string identity;  // client_identity()
  // The server's program, in messages ("rgpu-server", "rgpu-opserver").
  std::string server_program = "rgpu-server";
  // What the client asks for in the handshake; kCapChannel is always added (and required).
  uint64_t capabilities = kOurCapabilities;
  // The whole first connect, every attempt and the handshake included (RGPU_CONNECT_TIMEOUT).
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(60);
  // Said after the cause when connecting fails: what the user can do.
  std::string fix;
  // No info line per failed attempt (a probe: is_available()).
  bool quiet = false;
  // Optional: runs on the connection right after a successful handshake, to read what the server
  // sends behind Welcome (the driver path's pushed snapshot), through t (the TLS stream, or the
  // socket fd). kRetry: that server went away mid-way, try again; kGiveUp: stop, with *why.
  std::function<Attempt(int fd, Transport& t, const ClientHandshakeResult& hs, std::string* why)> after_handshake;
  ChannelOptions channel = ChannelOptions::from_env();
};

struct ClientSession {
  std::unique_ptr<Channel> channel;
  ClientHandshakeResult handshake;
};

// Connects, shakes hands and starts the channel (which redials options.address by itself when
// the connection breaks). False with *err a sentence for the user naming the server, the cause
// and options.fix.
bool open_client_session(const ClientSessionOptions& options, ClientSession* out, std::string* err);

// How long an exiting client redials to deliver its goodbye.
inline constexpr std::chrono::seconds kGoodbyeResume{2};

// Tells the server this process is leaving (kOpGoodbye), so that its session ends with the
// connection instead of keeping its GPU state for the whole grace, and waits for the server to
// acknowledge it (one round trip at exit). A connection that is broken now, or breaks meanwhile,
// is redialled and resumed for at most kGoodbyeResume: an exit never waits long for a server that
// is gone.
void send_goodbye(Channel& channel, uint32_t request_id);

}  // namespace rgpu::proto
