// TLS 1.3 records after the handshake (RFC 8446 §5.2 to 5.5), sealed and opened by rgpu itself
// with OpenSSL's AEAD ciphers, as the kernel's TLS offload (kTLS) does (issue 17).
//
// Why not OpenSSL's own SSL_write and SSL_read: they make one record at a time, in order, on the
// calling thread, with a copy on each side, and a bulk copy over TLS ran at half the bandwidth of
// plain TCP (the H100 host, bench/recorded/h100-2026-12-06 call5). A record's nonce is its
// number, known before it is made, so the records of one write can be sealed by several threads
// at once, straight into the buffer that goes to send(), and opened by several straight into the
// reader's buffer. The bytes on the wire are TLS 1.3's: a test has OpenSSL's record layer read
// what this one writes and the reverse (protocol/tls_records_test.cpp).
//
// OpenSSL still runs the handshake (certificates, key exchange, the exporter); it hands over the
// two application traffic secrets (its key log callback) and reads nothing past its Finished.
// Keys are updated (KeyUpdate) well before AES-GCM's limit of 2^24.5 records per key; a peer's
// KeyUpdate is followed, and one that asks for an update in return gets it before the next write.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace rgpu::proto::tls13 {

// The TLS 1.3 cipher suites, by their IANA numbers (SSL_CIPHER_get_protocol_id).
enum class Suite : uint16_t { kAes128Gcm = 0x1301, kAes256Gcm = 0x1302, kChaCha20Poly1305 = 0x1303 };
// False for any other number.
bool suite_of(uint16_t protocol_id, Suite* out);

inline constexpr size_t kMaxPlain = 16384;          // a record's most application data
inline constexpr size_t kMaxCipherText = kMaxPlain + 256;  // what a record's length may say
inline constexpr size_t kHeader = 5, kTag = 16;
// A record's bytes beyond its data: the header, the inner content type, the tag.
inline constexpr size_t kOverhead = kHeader + 1 + kTag;
// A KeyUpdate record's size.
inline constexpr size_t kKeyUpdateRecord = kOverhead + 5;
// Records sealed with one key before it is updated (AES-GCM allows 2^24.5: RFC 8446 §5.5).
inline constexpr uint64_t kRecordsPerKey = uint64_t{1} << 23;

// One direction's traffic key: the secret, the AEAD key and IV made from it, the next record's
// number. A fresh key (from init or update) has a serial number no other key in the process has,
// so that threads may keep its cipher set up between records.
class TrafficKey {
 public:
  TrafficKey() = default;
  ~TrafficKey();
  TrafficKey(const TrafficKey&) = default;
  TrafficKey& operator=(const TrafficKey&) = default;
  // From an application traffic secret (its hash's size: 32 or 48 bytes). False when the secret's
  // size is wrong for the suite or OpenSSL fails.
  bool init(Suite suite, const uint8_t* secret, size_t n);
  // The next generation (KeyUpdate): secret = HKDF-Expand-Label(secret, "traffic upd", "", Hash.length).
  bool update();
  // The nonce of record `seq`: the IV with the number XORed into its last 8 bytes.
  void nonce(uint64_t seq, uint8_t out[12]) const;

  Suite suite = Suite::kAes128Gcm;
  uint64_t seq = 0;      // the next record's number
  uint64_t serial = 0;   // 0: not set
  uint8_t key[32] = {};
  uint8_t iv[12] = {};
  uint8_t secret[48] = {};
  size_t key_len = 0, secret_len = 0;
};

// Runs fn(0..n-1) on a few threads of the process's own (RGPU_TLS_THREADS) and the caller's,
// returning when all are done. The records of one bulk write or read are its items.
void parallel_for(size_t n, const std::function<void(size_t)>& fn);
// The same, begun now and finished by the returned handle's wait() (the caller helps with what is
// left, then waits): a writer sends one slice of records while the next is sealed.
class ParallelRun {
 public:
  virtual ~ParallelRun() = default;
  virtual void wait() = 0;
};
std::unique_ptr<ParallelRun> parallel_start(size_t n, std::function<void(size_t)> fn);
// How many threads parallel_for uses beside the caller's.
int parallel_threads();

// Seals one record whose inner plaintext (data, content type, padding zeros) is given whole, n >= 1
// bytes, as record k.seq (which it advances), into out (n + kHeader + kTag bytes): the fuzz
// target's way to make records of every kind that authenticate.
bool seal_inner(TrafficKey& k, const uint8_t* inner, size_t n, uint8_t* out);

// The sending direction.
class Sealer {
 public:
  explicit Sealer(TrafficKey&& key) : key_(std::move(key)) {}
  // What sealing n bytes of application data takes on the wire.
  static size_t sealed_size(size_t n) { return n + (n + kMaxPlain - 1) / kMaxPlain * kOverhead; }
  // Seals bytes [from, from + n) of the concatenation of iov as application-data records of at
  // most 16 KiB, into out (sealed_size(n) bytes), records numbered from the key's next; many
  // records at once use parallel_for when `parallel`. A KeyUpdate record goes first when the key
  // is due one (kRecordsPerKey) or the peer asked for one: call key_update_size() first to size out.
  // False when OpenSSL fails (no bytes may be sent then).
  bool seal(const iovec* iov, int count, size_t from, size_t n, uint8_t* out, bool parallel);
  // The bytes of the KeyUpdate the next seal() puts first (0 or kKeyUpdateRecord).
  size_t key_update_size(size_t records) const;
  // The peer asked for a KeyUpdate (Opener::Outcome::update_requested): the next seal sends one.
  void owe_key_update() { owed_ = true; }
  // For tests: the number of records after which the key is updated.
  void set_records_per_key(uint64_t n) { records_per_key_ = n; }
  const TrafficKey& key() const { return key_; }

 private:
  bool seal_key_update(uint8_t* out);
  TrafficKey key_;
  bool owed_ = false;
  uint64_t records_per_key_ = kRecordsPerKey;
};

// The receiving direction: bytes from the socket in, application data out.
class Opener {
 public:
  explicit Opener(TrafficKey&& key) : key_(std::move(key)) {}
  enum class Status : uint8_t {
    kOk,        // produced data, or consumed what it could: call again with more input
    kClosed,    // the peer ended the stream (close_notify)
    kFailed,    // why() says what: a record that does not authenticate, an alert, a malformed record
  };
  struct Outcome {
    size_t consumed = 0;   // input bytes used (whole records only)
    size_t produced = 0;   // bytes of application data written to dst
    Status status = Status::kOk;
    bool update_requested = false;  // the peer's KeyUpdate asked for ours (Sealer::owe_key_update)
  };
  // Opens whole records from in[0, n) into dst (cap bytes), stopping when dst is full, input runs
  // out or at a record that is not application data (a KeyUpdate is taken and the next call goes
  // on). Data of a record that does not fit in dst is kept and given first by the next call.
  // Records straight into dst; `parallel` lets many records be opened at once (parallel_for).
  // Only data of records that authenticated is counted in `produced`: a record that does not may
  // leave bytes past it in dst, and the stream has failed (the channel then reads the frame again
  // on a new connection, over them).
  Outcome open(const uint8_t* in, size_t n, uint8_t* dst, size_t cap, bool parallel);
  // Bytes kept from a record that did not fit (given by the next open(), before any input).
  size_t pending() const { return pend_ - pbeg_; }
  // Whether in[0, n) begins with a whole record.
  static bool whole_record(const uint8_t* in, size_t n);
  const std::string& why() const { return why_; }
  const TrafficKey& key() const { return key_; }

 private:
  // Opens one record (its header at in) into the kept buffer; false (with why_) when it fails.
  bool open_one(const uint8_t* in, Outcome* o);
  // open_one, then as much of its data as dst holds (the rest is kept for the next call).
  Outcome give_whole(const uint8_t* in, uint8_t* dst, size_t cap, Outcome o);
  Status fail(std::string why) {
    why_ = std::move(why);
    return Status::kFailed;
  }
  TrafficKey key_;
  struct Rec {
    size_t at, len, out;  // where in the input, its ciphertext's length, where its data goes in dst
  };
  std::vector<Rec> recs_;       // open()'s records, kept to save an allocation a call
  std::vector<uint8_t> good_;   // ... and whether each opened as plain data
  std::vector<uint8_t> plain_;  // a record opened whole: its data given in parts
  size_t pbeg_ = 0, pend_ = 0;
  std::string why_;
  bool failed_ = false;
};

}  // namespace rgpu::proto::tls13
