// Fuzz target for the TLS 1.3 records rgpu opens after the handshake (protocol/tls_records.h,
// Opener): what a tls:// connection's reader does with the bytes on the wire.
//   byte 0   bits 0-1 the cipher suite (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305; 3 is the
//            first), bit 2 the mode, bit 3 open many records at once (parallel_for)
//   byte 1   the reader's buffer: 1 + byte * 97 bytes (byte 255: 1 MiB)
//   byte 2   how many bytes reach the reader at a time: 1 + byte * 67 (byte 255: all)
//   mode 0   the rest is the wire: bytes that cannot authenticate (a record's header, its
//            length, its type are what is tested; every record must be refused or wait for more)
//   mode 1   the rest is records' inner plaintext (data, content type, padding), each a 2-byte
//            length and its bytes, sealed here with the reader's key (following the KeyUpdates
//            among them), so that what comes after authentication is reached: KeyUpdate, alerts,
//            handshake messages, padding, overflows. When every record is application data of at
//            most 16 KiB, the reader must give exactly their data, in order.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdlib.h>
#include <vector>

#include "protocol/tls_records.h"

namespace {

using namespace rgpu::proto::tls13;

TrafficKey key_for(int suite_bits) {
  static const Suite kSuites[] = {Suite::kAes128Gcm, Suite::kAes256Gcm, Suite::kChaCha20Poly1305, Suite::kAes128Gcm};
  const Suite s = kSuites[suite_bits & 3];
  uint8_t secret[48];
  std::memset(secret, 0x5a, sizeof secret);
  TrafficKey k;
  if (!k.init(s, secret, s == Suite::kAes256Gcm ? 48 : 32)) std::abort();
  return k;
}

// A record's inner plaintext as the reader must take it: its data when it is application data of
// at most 16 KiB (true), else false.
bool plain_data(const uint8_t* inner, size_t n, std::vector<uint8_t>* data) {
  while (n > 0 && inner[n - 1] == 0) --n;
  if (n == 0 || inner[n - 1] != 23 || n - 1 > kMaxPlain) return false;
  data->insert(data->end(), inner, inner + n - 1);
  return true;
}

bool is_key_update(const uint8_t* inner, size_t n) {
  while (n > 0 && inner[n - 1] == 0) --n;
  return n == 6 && inner[5] == 22 && inner[0] == 24 && inner[1] == 0 && inner[2] == 0 && inner[3] == 1 && inner[4] <= 1;
}

void put_record(std::vector<uint8_t>* seed, const std::vector<uint8_t>& inner) {
  seed->push_back(static_cast<uint8_t>(inner.size() >> 8));
  seed->push_back(static_cast<uint8_t>(inner.size()));
  seed->insert(seed->end(), inner.begin(), inner.end());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // No threads beside the caller's unless told otherwise: many records still take the parallel
  // path's code (parallel_for runs the items on the caller), the same on every machine. With a
  // thread, its reference to each batch was dropped after the input returned, so libFuzzer saw
  // more allocations than frees and ran a leak scan of the whole heap after most inputs: 330
  // executions a second, not 1,300 (the thread pool is tls_records_test's, RGPU_TLS_THREADS=3).
  setenv("RGPU_TLS_THREADS", "0", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int suite = data[0] & 3;
  const bool generated = data[0] & 4, parallel = data[0] & 8;
  const size_t cap = data[1] == 255 ? size_t{1} << 20 : 1 + size_t{data[1]} * 97;
  const size_t feed = data[2] == 255 ? SIZE_MAX : 1 + size_t{data[2]} * 67;
  data += 3;
  size -= 3;

  std::vector<uint8_t> wire, want;
  bool all_data = true;
  if (!generated) {
    wire.assign(data, data + size);
  } else {
    TrafficKey gen = key_for(suite);
    size_t at = 0;
    while (size - at >= 2) {
      size_t n = size_t{data[at]} << 8 | data[at + 1];
      at += 2;
      n = std::min({n, size - at, kMaxCipherText + 64});  // past the limit, not past 16 bits
      if (n == 0) continue;
      const size_t w = wire.size();
      wire.resize(w + n + kHeader + kTag);
      if (!seal_inner(gen, data + at, n, wire.data() + w)) std::abort();
      if (n + kTag > kMaxCipherText) all_data = false;  // the reader refuses its length
      if (all_data && !plain_data(data + at, n, &want)) all_data = false;
      if (is_key_update(data + at, n) && !gen.update()) std::abort();
      at += n;
    }
  }

  Opener o(key_for(suite));
  static std::vector<uint8_t> dst(size_t{1} << 20);  // once: a fresh MiB an input was most of the time
  std::vector<uint8_t> in, got;
  size_t given = 0;
  for (int guard = 0; guard < 1 << 22; ++guard) {
    auto out = o.open(in.data(), in.size(), dst.data(), cap, parallel);
    if (out.consumed > in.size() || out.produced > cap) std::abort();
    in.erase(in.begin(), in.begin() + static_cast<long>(out.consumed));
    got.insert(got.end(), dst.begin(), dst.begin() + static_cast<long>(out.produced));
    if (out.status != Opener::Status::kOk) {
      if (generated && all_data) std::abort();  // application data only: nothing may be refused
      if (o.why().empty() && out.status == Opener::Status::kFailed) std::abort();  // a refusal says why
      return 0;
    }
    if (out.produced || out.consumed) continue;
    if (given == wire.size()) break;
    const size_t n = std::min(feed, wire.size() - given);
    in.insert(in.end(), wire.begin() + static_cast<long>(given), wire.begin() + static_cast<long>(given + n));
    given += n;
  }
  if (Opener::whole_record(in.data(), in.size())) std::abort();  // a whole record left neither opened nor refused
  if (generated && all_data && (got != want || !in.empty())) std::abort();
  return 0;
}

// Seeds: application data of a few sizes, a KeyUpdate between them (asked for and not), padding,
// an alert, a session ticket; and real records on the wire for mode 0.
void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  for (uint8_t head : {uint8_t{4}, uint8_t{5}, uint8_t{6}, uint8_t{12}}) {
    std::vector<uint8_t> s = {head, 255, 255};
    put_record(&s, {'h', 'i', 23});
    put_record(&s, {24, 0, 0, 1, 1, 22});
    std::vector<uint8_t> big(3000, 7);
    big.push_back(23);
    put_record(&s, big);
    put_record(&s, {'p', 'a', 'd', 23, 0, 0, 0, 0});
    put_record(&s, {4, 0, 0, 2, 9, 9, 22});
    put_record(&s, {1, 0, 21});
    out->push_back(s);
  }
  std::vector<uint8_t> s = {4, 3, 7};
  put_record(&s, std::vector<uint8_t>(16385, 23));  // 16 KiB of data, then its type
  out->push_back(s);
  // Mode 0: records as a Sealer writes them, cut and whole.
  Sealer sealer(key_for(0));
  std::vector<uint8_t> msg(20000, 1);
  iovec v{msg.data(), msg.size()};
  std::vector<uint8_t> wire(Sealer::sealed_size(msg.size()));
  sealer.seal(&v, 1, 0, msg.size(), wire.data(), false);
  std::vector<uint8_t> m = {0, 255, 255};
  m.insert(m.end(), wire.begin(), wire.end());
  out->push_back(m);
  out->push_back({0, 10, 0, 23, 3, 3, 0, 17});
}
