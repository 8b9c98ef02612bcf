/* Raw TCP loopback baselines: the floor under rgpu's numbers on this machine. A driver call that
 * waits for its reply cannot beat one TCP round trip, and a bulk copy cannot beat one
 * connection's one-way bandwidth; bench/report.py divides rgpu's numbers by these.
 *
 * Usage: tcp_baseline OUT.json [--quick]
 *   ping-pong: 64-byte messages, TCP_NODELAY both ends, 20000 timed round trips after 2000 warm-up
 *   bulk:      1 GiB (quick: 128 MiB) one way in 8 MiB writes; the receiver answers one byte when
 *              it has everything, and the sender's clock stops at that byte; best of 3
 * The peer is a thread of this process on 127.0.0.1 (an ephemeral port); nothing leaves the host. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"

enum { kMsg = 64, kWarmup = 2000, kRoundTrips = 20000, kBulkReps = 3 };
static const size_t kChunk = 8u << 20;

static void die(const char* what) {
  perror(what);
  exit(1);
}

static void write_all(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k <= 0) die("write");
    c += k;
    n -= (size_t)k;
  }
}

static void read_all(int fd, void* p, size_t n) {
  char* c = p;
  while (n > 0) {
    ssize_t k = read(fd, c, n);
    if (k <= 0) die("read");
    c += k;
    n -= (size_t)k;
  }
}

static void nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("setsockopt TCP_NODELAY");
}

typedef struct {
  int listen_fd;
  size_t bulk_bytes;
} Peer;

/* The far end: first connection echoes 64-byte messages until EOF; each later connection
 * receives bulk_bytes and acknowledges with one byte. */
static void* peer_main(void* arg) {
  Peer* peer = arg;
  int fd = accept(peer->listen_fd, NULL, NULL);
  if (fd < 0) die("accept");
  nodelay(fd);
  char msg[kMsg];
  for (;;) {
    size_t got = 0;
    while (got < kMsg) {
      ssize_t k = read(fd, msg + got, kMsg - got);
      if (k < 0) die("read");
      if (k == 0) goto echo_done;
      got += (size_t)k;
    }
    write_all(fd, msg, kMsg);
  }
echo_done:
  close(fd);

  char* buf = malloc(kChunk);
  if (!buf) die("malloc");
  for (int rep = 0; rep < kBulkReps + 1; ++rep) {
    fd = accept(peer->listen_fd, NULL, NULL);
    if (fd < 0) die("accept");
    size_t left = peer->bulk_bytes;
    while (left > 0) {
      ssize_t k = read(fd, buf, left < kChunk ? left : kChunk);
      if (k <= 0) die("bulk read");
      left -= (size_t)k;
    }
    char ack = 1;
    write_all(fd, &ack, 1);
    close(fd);
  }
  free(buf);
  return NULL;
}

static int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) die("connect");
  return fd;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tcp_baseline OUT.json [--quick]\n");
    return 2;
  }
  int quick = argc > 2 && strcmp(argv[2], "--quick") == 0;
  Peer peer = {.bulk_bytes = (quick ? 128ull : 1024ull) << 20};

  peer.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (peer.listen_fd < 0) die("socket");
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(peer.listen_fd, (struct sockaddr*)&a, sizeof a) != 0) die("bind");
  if (listen(peer.listen_fd, 4) != 0) die("listen");
  socklen_t alen = sizeof a;
  if (getsockname(peer.listen_fd, (struct sockaddr*)&a, &alen) != 0) die("getsockname");
  uint16_t port = ntohs(a.sin_port);
  pthread_t th;
  if (pthread_create(&th, NULL, peer_main, &peer) != 0) die("pthread_create");

  /* Ping-pong. */
  int fd = connect_to(port);
  nodelay(fd);
  char msg[kMsg];
  memset(msg, 0x42, sizeof msg);
  double* rtt = malloc(sizeof(double) * kRoundTrips);
  for (int i = 0; i < kWarmup + kRoundTrips; ++i) {
    double t0 = bench_now_us();
    write_all(fd, msg, kMsg);
    read_all(fd, msg, kMsg);
    if (i >= kWarmup) rtt[i - kWarmup] = bench_now_us() - t0;
  }
  close(fd);
  qsort(rtt, kRoundTrips, sizeof *rtt, bench_cmp_double);
  double rtt_p50 = rtt[kRoundTrips / 2 - 1], rtt_p99 = rtt[(int)(kRoundTrips * 0.99) - 1];

  /* Bulk: one warm-up transfer, then best of kBulkReps. */
  char* buf = malloc(kChunk);
  if (!buf) die("malloc");
  memset(buf, 0x5a, kChunk);
  double best_us = 1e300;
  for (int rep = 0; rep < kBulkReps + 1; ++rep) {
    fd = connect_to(port);
    double t0 = bench_now_us();
    for (size_t sent = 0; sent < peer.bulk_bytes; sent += kChunk) {
      size_t n = peer.bulk_bytes - sent < kChunk ? peer.bulk_bytes - sent : kChunk;
      write_all(fd, buf, n);
    }
    char ack = 0;
    read_all(fd, &ack, 1);
    double us = bench_now_us() - t0;
    close(fd);
    if (rep > 0 && us < best_us) best_us = us;
  }
  pthread_join(th, NULL);
  close(peer.listen_fd);
  double gbps = (double)peer.bulk_bytes / (best_us * 1e3);

  FILE* f = fopen(argv[1], "w");
  if (!f) die(argv[1]);
  fprintf(f,
          "{\n  \"mode\": \"tcp\",\n  \"quick\": %s,\n  \"tcp_rtt_us\": %.2f,\n  \"tcp_rtt_p99_us\": %.2f,\n"
          "  \"tcp_rtt_n\": %d,\n  \"tcp_bulk_gbps\": %.3f,\n  \"tcp_bulk_bytes\": %zu\n}\n",
          quick ? "true" : "false", rtt_p50, rtt_p99, kRoundTrips, gbps, peer.bulk_bytes);
  fclose(f);
  printf("tcp_baseline: 64 B ping-pong %.2f us p50, %.2f us p99 (%d round trips); bulk %zu MiB %.2f GB/s\n",
         rtt_p50, rtt_p99, kRoundTrips, peer.bulk_bytes >> 20, gbps);
  free(rtt);
  free(buf);
  return 0;
}
