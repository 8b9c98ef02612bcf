// What the channel (protocol/channel.h) costs over loopback TCP, against raw frames
// (protocol/frame.h) on the same machine in the same run: a small synchronous round trip (a
// 64-byte request, a 16-byte answer, as a small driver call), and one-way throughput of
// 4 KiB frames sent in 256 KiB batches (as launches and copies are). Issue 16's budget: at most
// 2 µs more per synchronous call, at most 2% less one-way throughput. Raw round trips are measured
// twice: with FrameReader (which busy-polls before blocking) and with plain blocking reads. The
// channel's two are measured over TLS 1.3 too (protocol/tls.h; issue 17), what `tls://` costs.
//   build/bin/channel_bench --benchmark_out=FILE.json --benchmark_out_format=json
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/net.h"
#include "protocol/channel.h"
#include "protocol/frame.h"
#include "protocol/tls.h"

namespace {

using namespace rgpu;
using namespace rgpu::proto;

constexpr size_t kRequest = 64, kAnswer = 16, kOneWay = 4096, kBatch = 256 << 10, kBulk = 1 << 20;
constexpr uint16_t kOpEcho = 300, kOpSink = 301;

// A connected loopback TCP pair: (client fd, server fd).
std::pair<int, int> loopback_pair() {
  std::string err;
  int l = net::listen_tcp({"127.0.0.1", 0}, &err);
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  int c = net::connect_tcp({"127.0.0.1", ntohs(a.sin_port)}, &err);
  int s = ::accept(l, nullptr, nullptr);
  ::close(l);
  net::set_nodelay(s);
  return {c, s};
}

// The server side for raw frames: answers kOpEcho, swallows kOpSink, ends at EOF.
void raw_server(int fd) {
  FrameHeader h;
  std::vector<uint8_t> p;
  std::string why;
  std::vector<uint8_t> answer(kAnswer, 1);
  FrameReader reader(fd, kMaxPayload);
  Bytes payload;
  while (reader.next(&h, &payload, &why) == ReadResult::kOk) {
    if (h.op == kOpEcho && !write_frame(fd, h.op, kReply, h.request_id, 0, answer.data(), answer.size())) return;
  }
}

// The same with blocking reads (read_frame: header, then payload), the way the channel waits:
// FrameReader busy-polls 50 µs before it blocks, which on a loaded 2-core machine costs more than
// it saves (issue 16, item 9), so the spinning baseline alone would flatter the channel.
void raw_blocking_server(int fd) {
  FrameHeader h;
  std::vector<uint8_t> payload;
  std::string why;
  std::vector<uint8_t> answer(kAnswer, 1);
  while (read_frame(fd, kMaxPayload, &h, &payload, &why) == ReadResult::kOk) {
    if (h.op == kOpEcho && !write_frame(fd, h.op, kReply, h.request_id, 0, answer.data(), answer.size())) return;
  }
}

void BM_RoundTripRawFramesBlocking(benchmark::State& state) {
  auto [c, s] = loopback_pair();
  std::thread server(raw_blocking_server, s);
  std::vector<uint8_t> req(kRequest, 2);
  FrameHeader h;
  std::vector<uint8_t> payload;
  std::string why;
  uint32_t id = 0;
  for (auto _ : state) {
    write_frame(c, kOpEcho, 0, ++id, 0, req.data(), req.size());
    if (read_frame(c, kMaxPayload, &h, &payload, &why) != ReadResult::kOk) state.SkipWithError(why.c_str());
  }
  ::shutdown(c, SHUT_RDWR);
  server.join();
  ::close(c);
  ::close(s);
}

void channel_server(Channel* ch) {
  std::vector<uint8_t> answer(kAnswer, 1);
  iovec part{answer.data(), answer.size()};
  FrameHeader h;
  Bytes payload;
  while (ch->receive_frame(&h, &payload, Wait::kPassive) == Status::kOk) {
    if (h.op == kOpEcho && ch->send(h.op, kReply, h.request_id, 0, &part, 1, true) != Status::kOk) return;
  }
}

void BM_RoundTripRawFrames(benchmark::State& state) {
  auto [c, s] = loopback_pair();
  std::thread server(raw_server, s);
  std::vector<uint8_t> req(kRequest, 2);
  FrameReader reader(c, kMaxPayload);
  FrameHeader h;
  Bytes payload;
  std::string why;
  uint32_t id = 0;
  for (auto _ : state) {
    write_frame(c, kOpEcho, 0, ++id, 0, req.data(), req.size());
    if (reader.next(&h, &payload, &why) != ReadResult::kOk) state.SkipWithError(why.c_str());
  }
  ::shutdown(c, SHUT_RDWR);
  server.join();
  ::close(c);
  ::close(s);
}

// A loopback pair inside TLS 1.3: a self-signed server certificate, a client pinning it.
std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> tls_pair() {
  static std::shared_ptr<TlsContext> server_ctx, client_ctx;
  std::string err;
  if (!server_ctx) {
    CertificateSpec spec;
    spec.names = {"127.0.0.1"};
    std::string cert, key;
    make_certificate(spec, &cert, &key, &err);
    char dir[] = "/tmp/rgpu-bench-tls-XXXXXX";
    mkdtemp(dir);
    const std::string cf = std::string(dir) + "/c.pem", kf = std::string(dir) + "/k.pem";
    FILE* f = fopen(cf.c_str(), "w");
    fputs(cert.c_str(), f);
    fclose(f);
    f = fopen(kf.c_str(), "w");
    fputs(key.c_str(), f);
    fclose(f);
    server_ctx = tls_server_context({cf, kf, ""}, &err);
    unlink(cf.c_str());
    unlink(kf.c_str());
    rmdir(dir);
    TlsClientConfig cc;
    cc.fingerprint = tls_fingerprint(*server_ctx);
    client_ctx = tls_client_context(cc, &err);
  }
  auto [c, s] = loopback_pair();
  std::unique_ptr<Transport> server_end;
  std::thread accept([&, s = s] {
    uint32_t magic;
    TlsPreamble pre;
    std::string e;
    if (net::read_full(s, &magic, 4) == 4 && read_tls_preamble_rest(s, &pre, Clock::now() + std::chrono::seconds(5)))
      server_end = tls_accept(server_ctx, s, true, Clock::now() + std::chrono::seconds(5), &e);
  });
  TlsFailure failure;
  std::unique_ptr<Transport> client_end = tls_connect(client_ctx, c, true, "127.0.0.1", kTlsNew, SessionId{}, "bench",
                                                      Clock::now() + std::chrono::seconds(5), &err, &failure);
  accept.join();
  return {std::move(client_end), std::move(server_end)};
}

// Both ends of a channel session over one loopback connection (in TLS with tls).
struct ChannelPair {
  SessionId id{};
  Channel client{Side::kClient, id, "", ChannelOptions{}};
  Channel server{Side::kServer, id, "", ChannelOptions{}};
  std::thread server_thread;
  explicit ChannelPair(bool tls = false) {
    if (tls) {
      auto [c, s] = tls_pair();
      client.start(std::move(c));
      server.start(std::move(s));
    } else {
      auto [c, s] = loopback_pair();
      client.start(socket_transport(c));
      server.start(socket_transport(s));
    }
    server_thread = std::thread(channel_server, &server);
  }
  ~ChannelPair() {
    client.close();
    server.close();
    server_thread.join();
  }
};

void BM_RoundTripChannel(benchmark::State& state) {
  ChannelPair p(state.range(0) != 0);
  std::vector<uint8_t> req(kRequest, 2);
  iovec part{req.data(), req.size()};
  FrameHeader h;
  Bytes payload;
  uint32_t id = 0;
  for (auto _ : state) {
    p.client.send(kOpEcho, 0, ++id, 0, &part, 1, true);
    if (p.client.receive_frame(&h, &payload, Wait::kAwaiting) != Status::kOk) state.SkipWithError("lost");
  }
}

void BM_OneWayRawFrames(benchmark::State& state) {
  auto [c, s] = loopback_pair();
  std::thread server(raw_server, s);
  std::vector<uint8_t> data(kOneWay, 3), batch;
  batch.reserve(kBatch + kOneWay + 64);
  FrameReader reader(c, kMaxPayload);
  for (auto _ : state) {
    FrameHeader fh = make_header(kOpSink, kNoReply, 0, 0, data.size());
    batch.insert(batch.end(), reinterpret_cast<uint8_t*>(&fh), reinterpret_cast<uint8_t*>(&fh) + sizeof fh);
    batch.insert(batch.end(), data.begin(), data.end());
    if (batch.size() >= kBatch) {
      net::write_full(c, batch.data(), batch.size());
      batch.clear();
    }
  }
  // Everything sent has been read: one round trip behind it.
  FrameHeader h;
  Bytes payload;
  std::string why;
  net::write_full(c, batch.data(), batch.size());
  write_frame(c, kOpEcho, 0, 1, 0, nullptr, 0);
  reader.next(&h, &payload, &why);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kOneWay);
  ::shutdown(c, SHUT_RDWR);
  server.join();
  ::close(c);
  ::close(s);
}

void BM_OneWayChannel(benchmark::State& state) {
  ChannelPair p(state.range(0) != 0);
  std::vector<uint8_t> data(kOneWay, 3);
  iovec part{data.data(), data.size()};
  for (auto _ : state) {
    p.client.send(kOpSink, kNoReply, 0, 0, &part, 1, false);
    if (p.client.unflushed() >= kBatch) p.client.flush();
  }
  p.client.send(kOpEcho, 0, 1, 0, nullptr, 0, true);
  FrameHeader h;
  Bytes payload;
  p.client.receive_frame(&h, &payload, Wait::kAwaiting);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kOneWay);
  // How far the peer's acknowledgements lagged: what a one-way stream holds in memory.
  state.counters["replay_high_water_mib"] = static_cast<double>(p.client.stats().replay_high_water) / (1 << 20);
  state.counters["ack_waits"] = static_cast<double>(p.client.stats().ack_waits);
}

// Bulk one way: 1 MiB payloads (a copy's chunks), what a tls:// copy costs against plain TCP.
void BM_BulkChannel(benchmark::State& state) {
  ChannelPair p(state.range(0) != 0);
  std::vector<uint8_t> data(kBulk, 5);
  iovec part{data.data(), data.size()};
  for (auto _ : state) p.client.send(kOpSink, kNoReply, 0, 0, &part, 1, true);
  p.client.send(kOpEcho, 0, 1, 0, nullptr, 0, true);
  FrameHeader h;
  Bytes payload;
  p.client.receive_frame(&h, &payload, Wait::kAwaiting);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBulk);
}

// Interleaved, so both kinds see the same machine load.
BENCHMARK(BM_RoundTripRawFrames)->UseRealTime()->MinTime(1.0)->Repetitions(3);
BENCHMARK(BM_RoundTripRawFramesBlocking)->UseRealTime()->MinTime(1.0)->Repetitions(3);
// Arg 0: plain TCP; 1: TLS 1.3.
BENCHMARK(BM_RoundTripChannel)->Arg(0)->Arg(1)->UseRealTime()->MinTime(1.0)->Repetitions(3);
BENCHMARK(BM_OneWayRawFrames)->UseRealTime()->MinTime(1.0)->Repetitions(3);
BENCHMARK(BM_OneWayChannel)->Arg(0)->Arg(1)->UseRealTime()->MinTime(1.0)->Repetitions(3);
BENCHMARK(BM_BulkChannel)->Arg(0)->Arg(1)->UseRealTime()->MinTime(1.0)->Repetitions(3);

}  // namespace

BENCHMARK_MAIN();
