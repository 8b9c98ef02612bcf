// Implementation of protocol/tls_records.h.
#include "protocol/tls_records.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <unistd.h>
#if RGPU_HAVE_NETTLE
#include <nettle/aes.h>
#include <nettle/gcm.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "common/env.h"
#include "common/log.h"

namespace rgpu::proto::tls13 {

namespace {

constexpr uint8_t kApplicationData = 23, kHandshake = 22, kAlert = 21;
constexpr uint8_t kKeyUpdate = 24, kNewSessionTicket = 4;

std::atomic<uint64_t> g_serial{0};
// Records smaller than this are gathered and sealed in one EVP call.
constexpr size_t kGatherBelow = 2048;
// AES-GCM records of at most this much inner plaintext (data and content type: a call, a reply)
// are sealed and opened with Nettle where the build has it (RGPU_HAVE_NETTLE). OpenSSL 3's EVP
// calls cost more than the cipher on a record this small: a nonce's set-up and the tag go through
// OSSL_PARAM look-ups, about 2,000 of the 3,000 instructions of a 100-byte record (callgrind);
// Nettle's are plain calls, about 1,000 in all. A small call's round trip opens two records and
// seals two. Per byte Nettle is the slower (OpenSSL's AES-GCM is one stitched pass over the
// data, Nettle's two: counter mode, then GHASH): from about 1 KiB a record costs more with it, so
// larger records, bulk above all, stay with EVP.
constexpr size_t kSmallInner = 512;
// Records opened by several threads only when this many are at hand (512 KiB: bulk); fewer are
// opened by the reader alone, whose latency waking the threads would cost.
constexpr size_t kParallelRecords = 32;

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

const EVP_CIPHER* cipher_of(Suite s) {
  // Fetched once: EVP_aes_128_gcm() and the like fetch their implementation at every init.
  static EVP_CIPHER* aes128 = EVP_CIPHER_fetch(nullptr, "AES-128-GCM", nullptr);
  static EVP_CIPHER* aes256 = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  static EVP_CIPHER* chacha = EVP_CIPHER_fetch(nullptr, "ChaCha20-Poly1305", nullptr);
  switch (s) {
    case Suite::kAes128Gcm: return aes128;
    case Suite::kAes256Gcm: return aes256;
    case Suite::kChaCha20Poly1305: return chacha;
  }
  return nullptr;
}

const char* digest_of(Suite s) { return s == Suite::kAes256Gcm ? "SHA384" : "SHA256"; }
size_t hash_len(Suite s) { return s == Suite::kAes256Gcm ? 48 : 32; }

// HKDF-Expand-Label(secret, label, "", n) (RFC 8446 §7.1).
bool expand_label(Suite suite, const uint8_t* secret, size_t secret_len, const char* label, uint8_t* out, size_t n) {
  uint8_t info[2 + 1 + 255 + 1];
  const size_t ll = 6 + std::strlen(label);
  info[0] = static_cast<uint8_t>(n >> 8);
  info[1] = static_cast<uint8_t>(n);
  info[2] = static_cast<uint8_t>(ll);
  std::memcpy(info + 3, "tls13 ", 6);
  std::memcpy(info + 9, label, ll - 6);
  info[3 + ll] = 0;  // no context
  static EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (!kdf) return false;
  EVP_KDF_CTX* k = EVP_KDF_CTX_new(kdf);
  if (!k) return false;
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(digest_of(suite)), 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret), secret_len),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, 4 + ll),
      OSSL_PARAM_construct_end(),
  };
  bool ok = EVP_KDF_derive(k, out, n, params) == 1;
  EVP_KDF_CTX_free(k);
  return ok;
}

#if RGPU_HAVE_NETTLE
// One direction's Nettle AES-GCM state: the key schedule and GHASH table of one traffic key, and
// the record in progress.
struct SmallGcm {
  union {
    aes128_ctx a128;
    aes256_ctx a256;
  } aes;
  nettle_cipher_func* encrypt_block = nullptr;
  gcm_key key;
  gcm_ctx ctx;
  uint64_t serial = 0;
};
#endif

// A cipher context per thread and direction (EVP's, and Nettle's for small records), set up with
// the key it last used: a record costs its nonce's set-up, not the key schedule, while one key is
// in use. Held through a plain thread_local pointer and freed by a pthread key's destructor when
// the thread ends: a thread_local object with a destructor is destroyed at exit() before the
// atexit handlers run, and the CUDA shim says goodbye to its servers from one (over TLS: sealing
// a record).
struct Contexts {
  EVP_CIPHER_CTX* ctx[2] = {};
  uint64_t serial[2] = {};
#if RGPU_HAVE_NETTLE
  SmallGcm small[2];
#endif
};

void free_contexts(void* p) {
  auto* c = static_cast<Contexts*>(p);
  EVP_CIPHER_CTX_free(c->ctx[0]);
  EVP_CIPHER_CTX_free(c->ctx[1]);
  delete c;
}

Contexts* thread_contexts() {
  static pthread_key_t key = [] {
    pthread_key_t kk;
    pthread_key_create(&kk, free_contexts);
    return kk;
  }();
  thread_local Contexts* t = nullptr;
  if (!t) {
    t = new Contexts;
    pthread_setspecific(key, t);
  }
  return t;
}

EVP_CIPHER_CTX* context_for(const TrafficKey& k, bool encrypt) {
  Contexts* t = thread_contexts();
  const int d = encrypt ? 1 : 0;
  if (!t->ctx[d] && !(t->ctx[d] = EVP_CIPHER_CTX_new())) return nullptr;
  if (t->serial[d] != k.serial) {
    if (EVP_CipherInit_ex(t->ctx[d], cipher_of(k.suite), nullptr, k.key, nullptr, d) != 1) {
      t->serial[d] = 0;
      return nullptr;
    }
    t->serial[d] = k.serial;
  }
  return t->ctx[d];
}

// Whether a record of n bytes of inner plaintext is sealed and opened with Nettle (kSmallInner).
bool small_record(const TrafficKey& k, size_t n) {
#if RGPU_HAVE_NETTLE
  return n <= kSmallInner && k.suite != Suite::kChaCha20Poly1305;
#else
  (void)k;
  (void)n;
  return false;
#endif
}

// Seals (encrypt) or opens n bytes of inner plaintext with Nettle: the header authenticated, in
// to out (they may be the same), the tag computed into tag. small_record() must hold.
void small_gcm(const TrafficKey& k, bool encrypt, const uint8_t nonce[12], const uint8_t* header, const uint8_t* in,
               size_t n, uint8_t* out, uint8_t tag[kTag]) {
#if RGPU_HAVE_NETTLE
  SmallGcm& g = thread_contexts()->small[encrypt ? 1 : 0];
  if (g.serial != k.serial) {
    if (k.suite == Suite::kAes128Gcm) {
      aes128_set_encrypt_key(&g.aes.a128, k.key);
      g.encrypt_block = reinterpret_cast<nettle_cipher_func*>(aes128_encrypt);
    } else {
      aes256_set_encrypt_key(&g.aes.a256, k.key);
      g.encrypt_block = reinterpret_cast<nettle_cipher_func*>(aes256_encrypt);
    }
    gcm_set_key(&g.key, &g.aes, g.encrypt_block);
    g.serial = k.serial;
  }
  gcm_set_iv(&g.ctx, &g.key, 12, nonce);
  gcm_update(&g.ctx, &g.key, kHeader, header);
  if (encrypt)
    gcm_encrypt(&g.ctx, &g.key, &g.aes, g.encrypt_block, n, out, in);
  else
    gcm_decrypt(&g.ctx, &g.key, &g.aes, g.encrypt_block, n, out, in);
  gcm_digest(&g.ctx, &g.key, &g.aes, g.encrypt_block, kTag, tag);
#else
  (void)k, (void)encrypt, (void)nonce, (void)header, (void)in, (void)n, (void)out, (void)tag;
#endif
}

// The record header for a ciphertext of `len` bytes (data, content type, tag).
void put_header(uint8_t* out, size_t len) {
  out[0] = kApplicationData;
  out[1] = 3;
  out[2] = 3;
  out[3] = static_cast<uint8_t>(len >> 8);
  out[4] = static_cast<uint8_t>(len);
}

// Walks bytes [from, from + n) of the concatenation of iov.
template <class F>
void each_piece(const iovec* iov, int count, size_t from, size_t n, F&& f) {
  for (int i = 0; i < count && n; ++i) {
    if (from >= iov[i].iov_len) {
      from -= iov[i].iov_len;
      continue;
    }
    const size_t take = std::min(n, iov[i].iov_len - from);
    f(static_cast<const uint8_t*>(iov[i].iov_base) + from, take);
    from = 0;
    n -= take;
  }
}

// Seals one record: bytes [from, from + n) of iov, then the content type.
bool seal_record(const TrafficKey& k, uint64_t seq, uint8_t type, const iovec* iov, int count, size_t from, size_t n,
                 uint8_t* out) {
  uint8_t nonce[12];
  k.nonce(seq, nonce);
  put_header(out, n + 1 + kTag);
  // A small record (a call, a reply): its pieces and type gathered where its ciphertext goes and
  // encrypted there in one call; with EVP, each call costs about as much as 100 bytes of AES-GCM.
  auto gather = [&](uint8_t* g) {
    each_piece(iov, count, from, n, [&](const uint8_t* src, size_t m) {
      std::memcpy(g, src, m);
      g += m;
    });
    *g = type;
  };
  if (small_record(k, n + 1)) {
    uint8_t* p = out + kHeader;
    gather(p);
    small_gcm(k, true, nonce, out, p, n + 1, p, p + n + 1);
    return true;
  }
  EVP_CIPHER_CTX* c = context_for(k, true);
  if (!c) return false;
  int len = 0;
  if (EVP_CipherInit_ex(c, nullptr, nullptr, nullptr, nonce, 1) != 1 || EVP_EncryptUpdate(c, nullptr, &len, out, kHeader) != 1)
    return false;
  uint8_t* p = out + kHeader;
  bool ok = true;
  if (n < kGatherBelow) {
    gather(p);
    ok = EVP_EncryptUpdate(c, p, &len, p, static_cast<int>(n + 1)) == 1;
    p += len;
  } else {
    each_piece(iov, count, from, n, [&](const uint8_t* src, size_t m) {
      ok = ok && EVP_EncryptUpdate(c, p, &len, src, static_cast<int>(m)) == 1;
      p += len;
    });
    ok = ok && EVP_EncryptUpdate(c, p, &len, &type, 1) == 1;
    p += len;
  }
  ok = ok && EVP_EncryptFinal_ex(c, p, &len) == 1;
  p += len;
  return ok && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, kTag, p) == 1;
}

// Opens one record (header at rec, ciphertext of len bytes after it): its first len - 17 bytes
// into dst and the last into *last. With `room` (dst has len - 16 bytes, the last may be
// overwritten), all of it into dst in one call, the last byte copied out after. False when it
// does not authenticate.
bool open_record(const TrafficKey& k, uint64_t seq, const uint8_t* rec, size_t len, uint8_t* dst, uint8_t* last,
                 bool room) {
  uint8_t nonce[12];
  k.nonce(seq, nonce);
  const uint8_t* body = rec + kHeader;
  const int data = static_cast<int>(len - kTag - 1);
  if (small_record(k, len - kTag)) {
    uint8_t tag[kTag], spare[kSmallInner];
    uint8_t* to = room ? dst : spare;
    small_gcm(k, false, nonce, rec, body, len - kTag, to, tag);
    *last = to[data];
    if (!room) std::memcpy(dst, spare, data);
    return CRYPTO_memcmp(tag, body + len - kTag, kTag) == 0;
  }
  EVP_CIPHER_CTX* c = context_for(k, false);
  if (!c) return false;
  int out = 0;
  if (EVP_CipherInit_ex(c, nullptr, nullptr, nullptr, nonce, 0) != 1 || EVP_DecryptUpdate(c, nullptr, &out, rec, kHeader) != 1)
    return false;
  if (room) {
    if (EVP_DecryptUpdate(c, dst, &out, body, data + 1) != 1) return false;
    *last = dst[data];
  } else if ((data > 0 && EVP_DecryptUpdate(c, dst, &out, body, data) != 1) ||
             EVP_DecryptUpdate(c, last, &out, body + data, 1) != 1) {
    return false;
  }
  return EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, kTag, const_cast<uint8_t*>(body + data + 1)) == 1 &&
         EVP_DecryptFinal_ex(c, last + 1, &out) == 1;
}

// What an alert the peer sent says (RFC 8446 §6), and what to do where the user can do something.
std::string alert_text(uint8_t desc) {
  static const struct {
    uint8_t desc;
    const char* name;
  } kNames[] = {
      {10, "unexpected_message"}, {20, "bad_record_mac"}, {22, "record_overflow"}, {40, "handshake_failure"},
      {42, "bad_certificate"}, {43, "unsupported_certificate"}, {44, "certificate_revoked"},
      {45, "certificate_expired"}, {46, "certificate_unknown"}, {47, "illegal_parameter"}, {48, "unknown_ca"},
      {49, "access_denied"}, {50, "decode_error"}, {51, "decrypt_error"}, {70, "protocol_version"},
      {71, "insufficient_security"}, {80, "internal_error"}, {90, "user_canceled"}, {109, "missing_extension"},
      {110, "unsupported_extension"}, {112, "unrecognized_name"}, {116, "certificate_required"},
  };
  const char* name = "unknown";
  for (const auto& n : kNames)
    if (n.desc == desc) name = n.name;
  std::string s = log::format("the peer ended the connection with the TLS alert %s (%u)", name, desc);
  if (desc == 116)
    s += ": the server takes only clients with a certificate its --tls-client-ca signed; set RGPU_TLS_CERT and "
         "RGPU_TLS_KEY";
  else if (desc >= 42 && desc <= 48)
    s += ": the server did not accept this client's certificate (RGPU_TLS_CERT); it must be signed by the CA the "
         "server was given with --tls-client-ca";
  return s;
}

// ---- The threads ----

struct Batch {
  size_t n = 0;
  std::function<void(size_t)> fn;
  std::atomic<size_t> next{0}, done{0};
  std::mutex mu;
  std::condition_variable cv;
  // Claims and runs items until none is left.
  void work() {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      fn(i);
      if (done.fetch_add(1) + 1 == n) {
        std::lock_guard<std::mutex> lk(mu);
        cv.notify_all();
      }
    }
  }
  void finish() {
    work();
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done.load() == n; });
  }
};

class Pool {
 public:
  explicit Pool(int threads) : threads_(threads) {
    // Never joined: the pool lives as long as the process (it is never freed, so a thread never
    // finds it gone at exit).
    for (int i = 0; i < threads; ++i) std::thread([this] { loop(); }).detach();
  }
  void submit(const std::shared_ptr<Batch>& b) {
    if (threads_ == 0) return;  // the caller does it all in finish()
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(b);
    }
    cv_.notify_all();
  }
  int threads() const { return threads_; }

 private:
  void loop() {
    for (;;) {
      std::shared_ptr<Batch> b;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return !queue_.empty(); });
        b = queue_.front();
      }
      b->work();
      std::lock_guard<std::mutex> lk(mu_);
      if (!queue_.empty() && queue_.front() == b) queue_.pop_front();  // every item is taken
    }
  }
  const int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Batch>> queue_;
};

Pool& pool() {
  // Made again in a forked child (a server's session process), which has none of its parent's
  // threads; the parent's copy is left as it is.
  static std::mutex mu;
  static Pool* p = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lk(mu);
  if (!p || owner != getpid()) {
    int n = env::get().tls_threads;
    if (n < 0) n = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 0, 4);
    p = new Pool(n);
    owner = getpid();
  }
  return *p;
}

class Run : public ParallelRun {
 public:
  explicit Run(std::shared_ptr<Batch> b) : b_(std::move(b)) {}
  ~Run() override { wait(); }
  void wait() override {
    if (b_) b_->finish();
    b_.reset();
  }

 private:
  std::shared_ptr<Batch> b_;
};

}  // namespace

bool suite_of(uint16_t id, Suite* out) {
  if (id != 0x1301 && id != 0x1302 && id != 0x1303) return false;
  *out = static_cast<Suite>(id);
  return true;
}

// ---- Keys ----

TrafficKey::~TrafficKey() {
  OPENSSL_cleanse(key, sizeof key);
  OPENSSL_cleanse(iv, sizeof iv);
  OPENSSL_cleanse(secret, sizeof secret);
}

bool TrafficKey::init(Suite s, const uint8_t* sec, size_t n) {
  suite = s;
  if (n != hash_len(s) || !cipher_of(s)) return false;
  std::memcpy(secret, sec, n);
  secret_len = n;
  key_len = s == Suite::kAes128Gcm ? 16 : 32;
  if (!expand_label(s, secret, secret_len, "key", key, key_len) || !expand_label(s, secret, secret_len, "iv", iv, 12))
    return false;
  seq = 0;
  serial = ++g_serial;
  return true;
}

bool TrafficKey::update() {
  uint8_t next[48];
  if (!expand_label(suite, secret, secret_len, "traffic upd", next, secret_len)) return false;
  bool ok = init(suite, next, secret_len);
  OPENSSL_cleanse(next, sizeof next);
  return ok;
}

void TrafficKey::nonce(uint64_t n, uint8_t out[12]) const {
  std::memcpy(out, iv, 12);
  for (int i = 0; i < 8; ++i) out[4 + i] ^= static_cast<uint8_t>(n >> (56 - 8 * i));
}

// ---- Threads ----

void parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  Pool& p = pool();
  if (n == 1 || p.threads() == 0) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto b = std::make_shared<Batch>();
  b->n = n;
  b->fn = fn;
  p.submit(b);
  b->finish();
}

std::unique_ptr<ParallelRun> parallel_start(size_t n, std::function<void(size_t)> fn) {
  auto b = std::make_shared<Batch>();
  b->n = n;
  b->fn = std::move(fn);
  if (n) pool().submit(b);
  return std::make_unique<Run>(std::move(b));
}

int parallel_threads() { return pool().threads(); }

// ---- Sealing ----

bool seal_inner(TrafficKey& k, const uint8_t* inner, size_t n, uint8_t* out) {
  iovec v{const_cast<uint8_t*>(inner), n - 1};
  return n >= 1 && seal_record(k, k.seq++, inner[n - 1], &v, 1, 0, n - 1, out);
}

size_t Sealer::key_update_size(size_t records) const {
  return owed_ || (key_.seq > 0 && key_.seq + records > records_per_key_) ? kKeyUpdateRecord : 0;
}

bool Sealer::seal_key_update(uint8_t* out) {
  // KeyUpdate (handshake type 24), 1 byte of body: update_not_requested (0).
  const uint8_t msg[5] = {kKeyUpdate, 0, 0, 1, 0};
  iovec v{const_cast<uint8_t*>(msg), sizeof msg};
  if (!seal_record(key_, key_.seq++, kHandshake, &v, 1, 0, sizeof msg, out)) return false;
  owed_ = false;
  return key_.update();
}

bool Sealer::seal(const iovec* iov, int count, size_t from, size_t n, uint8_t* out, bool parallel) {
  const size_t records = (n + kMaxPlain - 1) / kMaxPlain;
  if (key_update_size(records)) {
    if (!seal_key_update(out)) return false;
    out += kKeyUpdateRecord;
  }
  const uint64_t first = key_.seq;
  std::atomic<bool> ok{true};
  auto one = [&](size_t r) {
    const size_t at = r * kMaxPlain, len = std::min(kMaxPlain, n - at);
    if (!seal_record(key_, first + r, kApplicationData, iov, count, from + at, len, out + r * (kMaxPlain + kOverhead)))
      ok.store(false, std::memory_order_relaxed);
  };
  if (parallel && records > 1)
    parallel_for(records, one);
  else
    for (size_t r = 0; r < records; ++r) one(r);
  key_.seq += records;
  return ok.load();
}

// ---- Opening ----

bool Opener::whole_record(const uint8_t* in, size_t n) { return n >= kHeader && n - kHeader >= be16(in + 3); }

bool Opener::open_one(const uint8_t* in, Outcome* o) {
  const size_t len = be16(in + 3);
  plain_.resize(kMaxCipherText);
  pbeg_ = pend_ = 0;
  uint8_t last[2];
  if (!open_record(key_, key_.seq, in, len, plain_.data(), last, true)) {
    o->status = fail(
        "a TLS record did not authenticate: it was changed on the way, or it is not from the peer this connection was "
        "made with");
    return false;
  }
  plain_[len - kTag - 1] = last[0];
  // The content type is the last byte that is not zero (the zeros after it are padding).
  size_t end = len - kTag;
  while (end > 0 && plain_[end - 1] == 0) --end;
  if (end == 0) {
    o->status = fail("a TLS record without a content type");
    return false;
  }
  const uint8_t type = plain_[end - 1];
  const size_t data = end - 1;
  ++key_.seq;
  o->consumed += kHeader + len;
  switch (type) {
    case kApplicationData:
      if (data > kMaxPlain) {
        o->status = fail("a TLS record longer than 16 KiB (record_overflow)");
        return false;
      }
      pend_ = data;
      return true;
    case kAlert:
      if (data == 2 && plain_[1] == 0) {  // close_notify
        failed_ = true;
        o->status = Status::kClosed;
        return false;
      }
      o->status = fail(data == 2 ? alert_text(plain_[1]) : std::string("a malformed TLS alert"));
      return false;
    case kHandshake: {
      // After the handshake: KeyUpdate (last in its record), and session tickets, which are ignored.
      size_t at = 0;
      while (at < data) {
        if (data - at < 4) break;
        const uint8_t t = plain_[at];
        const size_t ml = size_t{plain_[at + 1]} << 16 | size_t{plain_[at + 2]} << 8 | plain_[at + 3];
        if (ml > data - at - 4) break;
        if (t == kKeyUpdate) {
          if (ml != 1 || plain_[at + 4] > 1 || at + 5 != data) break;
          if (plain_[at + 4] == 1) o->update_requested = true;
          if (!key_.update()) {
            o->status = fail("cannot follow the peer's TLS key update");
            return false;
          }
          return true;
        }
        if (t != kNewSessionTicket) {
          o->status = fail(log::format("an unexpected TLS handshake message (type %u) after the handshake", t));
          return false;
        }
        at += 4 + ml;
      }
      if (at == data) return true;
      o->status = fail("a malformed TLS handshake message after the handshake");
      return false;
    }
    default:
      o->status = fail(log::format("a TLS record of content type %u after the handshake", type));
      return false;
  }
}

Opener::Outcome Opener::open(const uint8_t* in, size_t n, uint8_t* dst, size_t cap, bool parallel) {
  Outcome o;
  if (failed_) {
    o.status = why_.empty() ? Status::kClosed : Status::kFailed;
    return o;
  }
  if (pend_ > pbeg_) {
    o.produced = std::min(cap, pend_ - pbeg_);
    std::memcpy(dst, plain_.data() + pbeg_, o.produced);
    pbeg_ += o.produced;
    return o;
  }
  // The records whose data fits in dst (taking each as application data without padding, as
  // rgpu sends them; one that is not is opened again on its own below).
  std::vector<Rec>& recs = recs_;
  recs.clear();
  size_t at = 0, out = 0;
  while (n - at >= kHeader) {
    const uint8_t* h = in + at;
    const size_t len = be16(h + 3);
    if (h[0] != kApplicationData) {
      o.status = fail(log::format("a TLS record of type %u after the handshake (not application data): the peer does "
                                  "not speak TLS 1.3 as rgpu does, or the stream is corrupt",
                                  h[0]));
      failed_ = true;
      return o;
    }
    if (len < kTag + 1 || len > kMaxCipherText) {
      o.status = fail(log::format("a TLS record %zu bytes long (at most %zu, at least %zu)", len, kMaxCipherText,
                                  kTag + 1));
      failed_ = true;
      return o;
    }
    if (n - at - kHeader < len || out + (len - kTag - 1) > cap) break;
    recs.push_back({at, len, out});
    at += kHeader + len;
    out += len - kTag - 1;
  }
  if (recs.empty()) {
    if (!whole_record(in, n)) return o;  // more input first
    return give_whole(in, dst, cap, o);    // a record larger than dst
  }
  // Opened straight into dst; a record is good when it authenticates as application data of at
  // most 16 KiB without padding (last byte 23).
  std::vector<uint8_t>& good = good_;
  good.assign(recs.size(), 0);
  const uint64_t first = key_.seq;
  // In parallel, a record must not write its type byte where the next one's data begins; one
  // after the other, it may (the next overwrites it), when dst has the byte to spare.
  const bool many = parallel && recs.size() >= kParallelRecords;
  auto one = [&](size_t i) {
    uint8_t last[2];
    const bool room = !many && recs[i].out + recs[i].len - kTag <= cap;
    good[i] = open_record(key_, first + i, in + recs[i].at, recs[i].len, dst + recs[i].out, last, room) &&
              last[0] == kApplicationData && recs[i].len - kTag - 1 <= kMaxPlain;
  };
  size_t ok = 0;
  if (many) {
    parallel_for(recs.size(), one);
    while (ok < recs.size() && good[ok]) ++ok;
  } else {
    for (; ok < recs.size(); ++ok) {
      one(ok);
      if (!good[ok]) break;
    }
  }
  key_.seq += ok;
  if (ok == recs.size()) {
    o.consumed = at;
    o.produced = out;
    return o;
  }
  o.consumed = recs[ok].at;
  o.produced = recs[ok].out;
  if (ok > 0) return o;  // the odd record is the next call's
  // The first record is not plain data: a KeyUpdate, an alert, padding, or a forgery.
  return give_whole(in, dst, cap, o);
}

Opener::Outcome Opener::give_whole(const uint8_t* in, uint8_t* dst, size_t cap, Outcome o) {
  if (!open_one(in, &o)) {
    failed_ = true;
    return o;
  }
  o.produced = std::min(cap, pend_);
  std::memcpy(dst, plain_.data(), o.produced);
  pbeg_ = o.produced;
  return o;
}

}  // namespace rgpu::proto::tls13
