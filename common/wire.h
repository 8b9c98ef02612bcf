// Little-endian encoding of call arguments and replies, used by both ends of the wire.
//
// Writer appends; Reader consumes and never reads past its end: every getter checks what is
// left, and the first failure latches ok() to false (later getters return zero values). The
// caller checks ok() once after decoding a message and drops the connection when it is false,
// because every byte from the network is hostile. The host is little-endian (x86-64, aarch64),
// so values are copied as they lie in memory; the static_assert below keeps that honest.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace rgpu {

// An allocator whose vectors leave new bytes uninitialised on resize: bulk buffers (8 MiB copy
// chunks) are about to be overwritten, and zeroing them first costs as much as a copy.
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) {}
  template <class U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Bytes = std::vector<uint8_t, NoInitAllocator<uint8_t>>;

static_assert(std::endian::native == std::endian::little, "rgpu's wire format assumes a little-endian host");

class Writer {
 public:
  Writer() = default;
  explicit Writer(std::vector<uint8_t>* out) : buf_(out) {}

  // Any trivially copyable value (integers, enums, plain structs without pointers).
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof(T));
  }
  void put_u8(uint8_t v) { put(v); }
  void put_u16(uint16_t v) { put(v); }
  void put_u32(uint32_t v) { put(v); }
  void put_u64(uint64_t v) { put(v); }
  void put_i32(int32_t v) { put(v); }
  // A length-prefixed (u64) byte string.
  void put_bytes(const void* p, size_t n) {
    put_u64(n);
    append(p, n);
  }
  // A length-prefixed (u32) string, without its NUL.
  void put_str(std::string_view s) {
    put_u32(static_cast<uint32_t>(s.size()));
    append(s.data(), s.size());
  }
  void append(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    buf().insert(buf().end(), b, b + n);
  }
  std::vector<uint8_t>& buf() { return buf_ ? *buf_ : own_; }
  size_t size() { return buf().size(); }

 private:
  std::vector<uint8_t>* buf_ = nullptr;
  std::vector<uint8_t> own_;
};

class Reader {
 public:
  Reader() = default;
  Reader(const void* p, size_t n) : p_(static_cast<const uint8_t*>(p)), n_(n) {}

  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v{};
    if (!take(&v, sizeof(T))) return T{};
    return v;
  }
  uint8_t u8() { return get<uint8_t>(); }
  uint16_t u16() { return get<uint16_t>(); }
  uint32_t u32() { return get<uint32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }
  int32_t i32() { return get<int32_t>(); }
  bool take(void* dst, size_t n) {
    if (!ok_ || n > n_ - pos_) return fail();
    if (n) std::memcpy(dst, p_ + pos_, n);
    pos_ += n;
    return true;
  }
  // A view of the next n bytes, or nullptr (and !ok()) when fewer are left.
  const uint8_t* view(size_t n) {
    if (!ok_ || n > n_ - pos_) {
      fail();
      return nullptr;
    }
    const uint8_t* r = p_ + pos_;
    pos_ += n;
    return r;
  }
  // Length-prefixed (u64) bytes written by Writer::put_bytes; max bounds the length.
  const uint8_t* bytes(size_t* len, size_t max = SIZE_MAX) {
    uint64_t n = u64();
    if (!ok_ || n > max) {
      fail();
      *len = 0;
      return nullptr;
    }
    const uint8_t* p = view(static_cast<size_t>(n));
    *len = p ? static_cast<size_t>(n) : 0;
    return p;
  }
  std::string str(size_t max = 1 << 20) {
    uint32_t n = u32();
    if (!ok_ || n > max) {
      fail();
      return {};
    }
    const uint8_t* p = view(n);
    return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
  }
  bool ok() const { return ok_; }
  size_t left() const { return n_ - pos_; }
  bool fail() {
    ok_ = false;
    return false;
  }

 private:
  const uint8_t* p_ = nullptr;
  size_t n_ = 0;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace rgpu
