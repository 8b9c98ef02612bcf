// Fatbin, cubin and PTX readers for rgpu::image (see cuda_image.h for the contracts).
//
// Formats, as nvcc 13.0 writes them (checked against tests/kernels built with nvcc, see
// cuda_image_test.cpp):
// - Fatbin: header {u32 magic 0xBA55ED50, u16 version, u16 header_size, u64 payload_size}, then
//   entries, each {u16 kind (1 PTX, 2 ELF), u16 version, u32 header_size, u64 payload_size,
//   u32 compressed_size @16, u32 arch @28, u64 flags @40, u64 uncompressed_size @56}, payload
//   right after the entry header. flags 0x2000: LZ4 block, 0x8000: zstd frame; nvcc 13 compresses
//   entries by default.
// - Cubin: ELF64. Kernels are global STT_FUNC symbols marked STO_CUDA_ENTRY (st_other 0x10).
//   Section ".nv.info.<kernel>" holds attribute records {u8 format, u8 attribute, ...}, format 4
//   (sized value) followed by u16 size and the payload, formats 1-3 (none, byte, half) by a u16:
//   every record stays 4-byte aligned. Attribute 0x17 (KPARAM_INFO), payload of 12 bytes:
//   {u32 index, u16 ordinal, u16 offset, u32 bits, the size in bits 18..31}: 14 bits, so at
//   most 16383 bytes. A kernel whose parameters exceed 4 KiB (CUDA 12.1+ allows 32764 bytes)
//   gets attribute 0x45 records instead, for every parameter: {u32 index, u16 ordinal, u16
//   offset, u32 size in bytes} (nvcc 13.0, for an 8 KiB and a 32000-byte struct parameter; pinned
//   by rgpu_big_params in cuda_image_test.cpp). Attribute 0x19 (CBANK_PARAM_SIZE) gives the whole
//   buffer's size; a buffer with no parameter records this reader knows leaves the kernel's
//   layout_known false, so callers ask the driver instead.
// - PTX: ".entry name ( .param <type> [.ptr <space> .align N] name[N], ... )"; a parameter's
//   alignment is its ".align" (before any .ptr) or its type's size; offsets follow in order.
#include "common/cuda_image.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace rgpu::image {
namespace {

constexpr uint64_t kFlagLz4 = 0x2000;
constexpr uint64_t kFlagZstd = 0x8000;
constexpr uint16_t kEntryPtx = 1;
constexpr uint16_t kEntryElf = 2;
constexpr uint8_t kStoCudaEntry = 0x10;
constexpr uint8_t kEiattrKparamInfo = 0x17;
constexpr uint8_t kEiattrCbankParamSize = 0x19;
constexpr uint8_t kEiattrKparamInfoWide = 0x45;  // the large-parameter form (see the top)
// The most parameter bytes a kernel may take (CUDA 12.1+, Volta and later).
constexpr uint32_t kMaxParamBytes = 32764;
constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtNobits = 8;
// The most a compressed entry may inflate to: generous for code, small enough that a hostile
// header cannot make us allocate gigabytes.
constexpr uint64_t kMaxInflated = 1ull << 30;

// Bounds-checked little-endian reads from [p, p + n).
struct Bytes {
  const uint8_t* p;
  size_t n;
  bool has(uint64_t off, uint64_t len) const { return off <= n && len <= n - off; }
  template <class T>
  T at(uint64_t off) const {  // caller checked has(off, sizeof(T))
    T v;
    std::memcpy(&v, p + off, sizeof(T));
    return v;
  }
  // A NUL-terminated string starting at off within [0, limit); empty view when unterminated.
  std::string_view cstr(uint64_t off, uint64_t limit) const {
    limit = std::min<uint64_t>(limit, n);
    if (off >= limit) return {};
    const void* z = std::memchr(p + off, 0, limit - off);
    if (!z) return {};
    return {reinterpret_cast<const char*>(p + off), size_t(static_cast<const uint8_t*>(z) - (p + off))};
  }
};

bool fail(std::string* err, std::string msg) {
  if (err) *err = std::move(msg);
  return false;
}

bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

// ---------- ELF ----------

struct Section {
  uint32_t name, type, link, info;
  uint64_t offset, size, entsize;
};

struct Elf {
  Bytes b;
  std::vector<Section> sections;
  uint16_t shstrndx = 0;
  std::string_view section_name(const Section& s) const {
    if (shstrndx >= sections.size()) return {};
    const Section& st = sections[shstrndx];
    if (!b.has(st.offset, st.size)) return {};
    return b.cstr(st.offset + s.name, st.offset + st.size);
  }
};

bool read_elf(Bytes b, Elf* elf, std::string* err) {
  if (!b.has(0, 64) || std::memcmp(b.p, "\x7f" "ELF", 4) != 0) return fail(err, "not an ELF image");
  if (b.p[4] != 2 || b.p[5] != 1) return fail(err, "ELF image is not 64-bit little-endian");
  uint64_t shoff = b.at<uint64_t>(0x28);
  uint16_t shentsize = b.at<uint16_t>(0x3a), shnum = b.at<uint16_t>(0x3c);
  elf->b = b;
  elf->shstrndx = b.at<uint16_t>(0x3e);
  if (shnum == 0) return true;
  if (shentsize < 64) return fail(err, "ELF section header size is too small");
  if (!b.has(shoff, uint64_t(shentsize) * shnum)) return fail(err, "ELF section headers lie past the end of the image");
  elf->sections.reserve(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    uint64_t h = shoff + uint64_t(i) * shentsize;
    Section s{b.at<uint32_t>(h), b.at<uint32_t>(h + 4), b.at<uint32_t>(h + 40), b.at<uint32_t>(h + 44),
              b.at<uint64_t>(h + 24), b.at<uint64_t>(h + 32), b.at<uint64_t>(h + 56)};
    if (s.type != kShtNobits && s.type != 0 && !b.has(s.offset, s.size))
      return fail(err, "ELF section " + std::to_string(i) + " lies past the end of the image");
    elf->sections.push_back(s);
  }
  return true;
}

size_t elf_size(Bytes b) {
  if (!b.has(0, 64)) return 0;
  uint64_t end = 64, e;
  uint64_t phoff = b.at<uint64_t>(0x20), shoff = b.at<uint64_t>(0x28);
  uint16_t phentsize = b.at<uint16_t>(0x36), phnum = b.at<uint16_t>(0x38);
  uint16_t shentsize = b.at<uint16_t>(0x3a), shnum = b.at<uint16_t>(0x3c);
  if (phnum) {
    if (phentsize < 56 || add_overflows(phoff, uint64_t(phentsize) * phnum, &e) || !b.has(phoff, e - phoff)) return 0;
    end = std::max(end, e);
    for (uint16_t i = 0; i < phnum; ++i) {
      uint64_t h = phoff + uint64_t(i) * phentsize;
      if (add_overflows(b.at<uint64_t>(h + 8), b.at<uint64_t>(h + 32), &e)) return 0;  // p_offset + p_filesz
      end = std::max(end, e);
    }
  }
  if (shnum) {
    if (shentsize < 64 || add_overflows(shoff, uint64_t(shentsize) * shnum, &e) || !b.has(shoff, e - shoff)) return 0;
    end = std::max(end, e);
    for (uint16_t i = 0; i < shnum; ++i) {
      uint64_t h = shoff + uint64_t(i) * shentsize;
      uint32_t type = b.at<uint32_t>(h + 4);
      if (type == kShtNobits || type == 0) continue;
      if (add_overflows(b.at<uint64_t>(h + 24), b.at<uint64_t>(h + 32), &e)) return 0;
      end = std::max(end, e);
    }
  }
  return end <= b.n ? size_t(end) : 0;
}

// Walks one .nv.info.<kernel> section into k->params / k->param_bytes.
bool read_nv_info(const Elf& elf, const Section& s, Kernel* k, std::string* err) {
  // read_elf checks only sections that hold file bytes; a .nv.info section marked NOBITS (or
  // NULL) may name any offset (a fuzzed image read far outside the buffer here).
  if (!elf.b.has(s.offset, s.size)) return fail(err, ".nv.info." + k->name + " lies past the end of the image");
  Bytes b{elf.b.p + s.offset, size_t(s.size)};
  uint64_t pos = 0;
  uint32_t cbank_size = 0;
  while (b.has(pos, 4)) {
    uint8_t fmt = b.p[pos], attr = b.p[pos + 1];
    if (fmt >= 1 && fmt <= 3) {
      if (attr == kEiattrCbankParamSize && fmt == 3) cbank_size = b.at<uint16_t>(pos + 2);
      pos += 4;
      continue;
    }
    if (fmt != 4) return fail(err, "unknown record format " + std::to_string(fmt) + " in .nv.info." + k->name);
    uint16_t size = b.at<uint16_t>(pos + 2);
    if (!b.has(pos + 4, size)) return fail(err, "truncated record in .nv.info." + k->name);
    if (attr == kEiattrKparamInfo || attr == kEiattrKparamInfoWide) {
      if (size < 12) return fail(err, "short KPARAM_INFO record in .nv.info." + k->name);
      uint32_t word = b.at<uint32_t>(pos + 12);
      uint32_t bytes = attr == kEiattrKparamInfo ? word >> 18 : word;
      Param p{b.at<uint16_t>(pos + 8), b.at<uint16_t>(pos + 10), bytes};
      if (uint64_t(p.offset) + p.size > kMaxParamBytes)
        return fail(err, "a parameter of " + k->name + " lies past the 32764-byte limit");
      k->params.push_back(p);
    }
    pos += 4 + uint64_t(size);
  }
  std::sort(k->params.begin(), k->params.end(), [](const Param& a, const Param& c) { return a.ordinal < c.ordinal; });
  uint32_t end = 0;
  for (size_t i = 0; i < k->params.size(); ++i) {
    if (k->params[i].ordinal != i) return fail(err, "parameter ordinals of " + k->name + " are not 0..n-1");
    end = std::max(end, k->params[i].offset + k->params[i].size);
  }
  k->param_bytes = std::max(end, cbank_size);
  // A parameter buffer described by records this reader does not know: packing it from nothing
  // would hand the kernel zeros for pointers (an illegal address at best). Only this kernel's
  // layout is then unknown; the rest of the image stays usable.
  k->layout_known = !(k->params.empty() && k->param_bytes > 0);
  return true;
}

bool parse_cubin(Bytes b, Image* out, std::string* err) {
  Elf elf;
  if (!read_elf(b, &elf, err)) return false;
  if (elf_size(b) == 0) return fail(err, "ELF headers, sections or segments lie past the end of the image");
  // Kernel names from the symbol tables: global functions marked as entries.
  struct Entry {
    std::string name;
    uint16_t shndx;
  };
  std::vector<Entry> entries;
  std::vector<Global> globals;
  for (const Section& s : elf.sections) {
    if (s.type != kShtSymtab) continue;
    if (s.entsize != 24 || s.link >= elf.sections.size()) return fail(err, "malformed ELF symbol table");
    const Section& strtab = elf.sections[s.link];
    if (!b.has(strtab.offset, strtab.size)) return fail(err, "malformed ELF string table");
    for (uint64_t off = 0; off + 24 <= s.size; off += 24) {
      uint64_t sym = s.offset + off;
      uint8_t info = b.at<uint8_t>(sym + 4), other = b.at<uint8_t>(sym + 5);
      // Kernels are functions marked as entries: global symbols, weak ones (template
      // instantiations, inline functions) and local ones (kernels of internal linkage, in
      // anonymous namespaces: PyTorch has thousands, and missing them cost it a round trip to
      // look each up and another for its layout).
      const uint8_t bind = info >> 4;
      if ((info & 0xf) == 1 /*STT_OBJECT*/ && bind <= 2) {
        const uint16_t shndx = b.at<uint16_t>(sym + 6);
        std::string_view name = b.cstr(strtab.offset + b.at<uint32_t>(sym), strtab.offset + strtab.size);
        if (shndx < elf.sections.size() && !name.empty()) {
          std::string_view section = elf.section_name(elf.sections[shndx]);
          if (section.starts_with(".nv.global") || (section.starts_with(".nv.constant") && !section.starts_with(".nv.constant0")))
            globals.push_back({std::string(name), b.at<uint64_t>(sym + 16), section.starts_with(".nv.constant"),
                               b.at<uint64_t>(sym + 8)});
        }
        continue;
      }
      if ((info & 0xf) != 2 /*STT_FUNC*/ || bind > 2 /*LOCAL, GLOBAL, WEAK*/ || !(other & kStoCudaEntry))
        continue;
      std::string_view name = b.cstr(strtab.offset + b.at<uint32_t>(sym), strtab.offset + strtab.size);
      if (name.empty()) return fail(err, "ELF entry symbol without a name");
      entries.push_back({std::string(name), b.at<uint16_t>(sym + 6)});
    }
  }
  Image img;
  for (const Entry& e : entries) {
    Kernel k;
    k.name = e.name;
    const std::string info_name = ".nv.info." + e.name;
    for (const Section& s : elf.sections) {
      if (elf.section_name(s) != info_name) continue;
      if (!read_nv_info(elf, s, &k, err)) return false;
      break;
    }
    img.kernels.push_back(std::move(k));
  }
  img.globals = std::move(globals);
  *out = std::move(img);
  return true;
}

// ---------- PTX ----------

struct PtxLexer {
  std::string_view s;
  size_t i = 0;
  void skip_space() {
    for (;;) {
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
      if (s.substr(i, 2) == "//") {
        size_t e = s.find('\n', i);
        i = e == std::string_view::npos ? s.size() : e;
      } else if (s.substr(i, 2) == "/*") {
        size_t e = s.find("*/", i + 2);
        i = e == std::string_view::npos ? s.size() : e + 2;
      } else {
        return;
      }
    }
  }
  // The next token: an identifier-like run (letters, digits, _ $ . %), or one punctuation char.
  std::string_view next() {
    skip_space();
    if (i >= s.size()) return {};
    size_t b = i;
    auto word = [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
             c == '.' || c == '%';
    };
    if (word(s[i])) {
      while (i < s.size() && word(s[i])) ++i;
    } else {
      ++i;
    }
    return s.substr(b, i - b);
  }
};

uint32_t ptx_type_size(std::string_view t) {
  if (t == ".b8" || t == ".u8" || t == ".s8") return 1;
  if (t == ".b16" || t == ".u16" || t == ".s16" || t == ".f16" || t == ".bf16") return 2;
  if (t == ".b32" || t == ".u32" || t == ".s32" || t == ".f32" || t == ".f16x2" || t == ".bf16x2") return 4;
  if (t == ".b64" || t == ".u64" || t == ".s64" || t == ".f64" || t == ".texref" || t == ".samplerref" ||
      t == ".surfref")
    return 8;
  return 0;
}

bool parse_u32(std::string_view t, uint32_t* v) {
  if (t.empty() || t.size() > 9) return false;
  uint32_t x = 0;
  for (char c : t) {
    if (c < '0' || c > '9') return false;
    x = x * 10 + uint32_t(c - '0');
  }
  *v = x;
  return true;
}

// Parses the parameter list after ".entry name (". On success the lexer is past the ')'.
bool parse_ptx_params(PtxLexer* lx, Kernel* k, std::string* err) {
  auto bad = [&](const char* what) { return fail(err, std::string("PTX .entry ") + k->name + ": " + what); };
  uint64_t offset = 0;
  std::string_view t = lx->next();
  if (t == ")") return true;
  for (;;) {
    if (t != ".param") return bad("expected .param");
    uint32_t align = 0, type_size = 0, vec = 1, count = 1;
    bool after_ptr = false;
    for (;;) {
      t = lx->next();
      if (t.empty()) return bad("unterminated parameter list");
      if (t == ".align") {
        uint32_t a;
        if (!parse_u32(lx->next(), &a) || a == 0 || (a & (a - 1)) || a > 4096) return bad("bad .align");
        if (!after_ptr) align = a;  // after .ptr it is the pointee's alignment
      } else if (t == ".ptr") {
        after_ptr = true;
      } else if (t == ".v2" || t == ".v4" || t == ".v8") {
        vec = uint32_t(t[2] - '0');
      } else if (uint32_t sz = ptx_type_size(t)) {
        type_size = sz;
      } else if (t[0] == '.') {
        continue;  // state spaces after .ptr (.global, .const, .local, .shared) and the like
      } else {
        break;  // the parameter's name
      }
    }
    if (type_size == 0) return bad("parameter without a type");
    t = lx->next();
    if (t == "[") {
      if (!parse_u32(lx->next(), &count) || count == 0 || lx->next() != "]") return bad("bad array size");
      t = lx->next();
    }
    uint64_t size = uint64_t(type_size) * vec * count;
    if (align == 0) align = type_size * vec;
    offset = (offset + align - 1) / align * align;
    if (offset + size > 0xffffffffull) return bad("parameters too large");
    k->params.push_back(Param{uint32_t(k->params.size()), uint32_t(offset), uint32_t(size)});
    offset += size;
    if (t == ")") break;
    if (t != ",") return bad("expected ',' or ')'");
    t = lx->next();
  }
  k->param_bytes = uint32_t(offset);
  return true;
}

bool parse_ptx(std::string_view text, Image* out, std::string* err) {
  Image img;
  PtxLexer lx{text};
  std::string_view prev;
  for (std::string_view t = lx.next(); !t.empty(); prev = t, t = lx.next()) {
    if (t != ".entry") continue;
    bool declaration_only = prev == ".extern";
    std::string_view name = lx.next();
    if (name.empty() || name[0] == '.' || name == "(") return fail(err, "PTX .entry without a name");
    Kernel k;
    k.name = std::string(name);
    std::string_view open = lx.next();
    if (open == "(") {
      if (!parse_ptx_params(&lx, &k, err)) return false;
    } else if (open == "{" || open == ";" || open.empty() || open[0] == '.') {
      lx.i -= open.size();  // no parameter list: push the token back
    } else {
      return fail(err, "PTX .entry " + k.name + ": expected '('");
    }
    if (!declaration_only) img.kernels.push_back(std::move(k));
    t = ")";
  }
  *out = std::move(img);
  return true;
}

std::string_view ptx_text(Bytes b) {
  size_t n = strnlen(reinterpret_cast<const char*>(b.p), b.n);
  return {reinterpret_cast<const char*>(b.p), n};
}

// ---------- fatbin ----------

bool inflate(Bytes src, uint64_t flags, uint64_t want, std::vector<uint8_t>* out, std::string* err) {
  if (want == 0 || want > kMaxInflated || want / 1024 > src.n + 64) return fail(err, "implausible uncompressed size in fatbin entry");
  // The size is checked against what the bytes can hold before it is allocated (and zeroed): an
  // LZ4 block expands a byte 255 times at most (a match's length-extension bytes), and a zstd
  // frame that says its size must say this one. A 30 KB entry claiming 1024 times that had
  // cuda_image_fuzz zero 30 MB to find the entry corrupt (cuda_image_test
  // RefusesACompressedEntryClaimingMoreThanItsBytesHold).
  if ((flags & kFlagLz4) && want > uint64_t(src.n) * 255 + 64)
    return fail(err, "implausible uncompressed size in fatbin entry: more than its LZ4 bytes can expand to");
  if (!(flags & kFlagLz4) && ZSTD_findFrameCompressedSize(src.p, src.n) == src.n) {
    const unsigned long long said = ZSTD_getFrameContentSize(src.p, src.n);
    if (said == ZSTD_CONTENTSIZE_ERROR) return fail(err, "corrupt zstd fatbin entry");
    if (said != ZSTD_CONTENTSIZE_UNKNOWN && said != want)
      return fail(err, "implausible uncompressed size in fatbin entry: its zstd frame says another");
  }
  out->resize(want);
  if (flags & kFlagLz4) {
    if (src.n > uint64_t(LZ4_MAX_INPUT_SIZE) || want > uint64_t(INT32_MAX)) return fail(err, "LZ4 entry too large");
    int n = LZ4_decompress_safe(reinterpret_cast<const char*>(src.p), reinterpret_cast<char*>(out->data()), int(src.n),
                                int(want));
    if (n < 0 || uint64_t(n) != want) return fail(err, "corrupt LZ4 fatbin entry");
    return true;
  }
  size_t n = ZSTD_decompress(out->data(), want, src.p, src.n);
  if (ZSTD_isError(n) || n != want) return fail(err, "corrupt zstd fatbin entry");
  return true;
}

// Appends the kernels of `from` that `to` lacks (kernels with one name have one layout).
void merge_kernels(Image& to, Image&& from) {
  for (Kernel& k : from.kernels)
    if (!to.find(k.name)) to.kernels.push_back(std::move(k));
  for (Global& g : from.globals) to.globals.push_back(std::move(g));
}

// With sm != 0, the kernels of every ELF entry built for that architecture (a library's fatbin
// spreads its kernels over several), else PTX (what the driver would JIT), else the first ELF
// entry of any architecture. With sm == 0, the first ELF entry, else PTX.
bool parse_fatbin(Bytes b, Image* out, std::string* err, uint32_t sm) {
  if (!b.has(0, 16)) return fail(err, "truncated fatbin header");
  uint16_t hsize = b.at<uint16_t>(6);
  uint64_t psize = b.at<uint64_t>(8), end;
  if (hsize < 16 || add_overflows(hsize, psize, &end) || end > b.n) return fail(err, "fatbin payload lies past the end of the image");
  std::string first_err;
  bool have_ptx = false, have_elf = false;
  Image ptx_img, matched;
  for (uint64_t pos = hsize; pos < end;) {
    if (end - pos < 16) return fail(err, "truncated fatbin entry header");
    uint16_t kind = b.at<uint16_t>(pos);
    uint32_t ehsize = b.at<uint32_t>(pos + 4);
    uint64_t esize = b.at<uint64_t>(pos + 8), data, next;
    if (ehsize < 16 || add_overflows(pos, ehsize, &data) || add_overflows(data, esize, &next) || next > end)
      return fail(err, "fatbin entry lies past the end of the fatbin");
    uint64_t flags = ehsize >= 48 ? b.at<uint64_t>(pos + 40) : 0;
    Bytes payload{b.p + data, size_t(esize)};
    std::vector<uint8_t> inflated;
    std::string e;
    bool ok = true;
    uint32_t arch = ehsize >= 32 ? b.at<uint32_t>(pos + 28) : 0;
    bool wanted = kind == kEntryElf && (sm == 0 ? !have_elf : arch == sm);
    if ((wanted || (kind == kEntryPtx && !have_ptx && !have_elf)) && (flags & (kFlagLz4 | kFlagZstd))) {
      if (ehsize < 64) {
        ok = fail(&e, "compressed fatbin entry with a short header");
      } else {
        uint32_t csize = b.at<uint32_t>(pos + 16);
        if (csize && csize <= payload.n) payload.n = csize;
        ok = inflate(payload, flags, b.at<uint64_t>(pos + 56), &inflated, &e);
        payload = Bytes{inflated.data(), inflated.size()};
      }
    }
    if (ok && wanted) {
      Image img;
      if (parse_cubin(payload, &img, &e)) {
        merge_kernels(matched, std::move(img));
        have_elf = true;
        if (sm == 0) break;
      }
    } else if (ok && kind == kEntryPtx && !have_ptx && !have_elf) {
      have_ptx = parse_ptx(ptx_text(payload), &ptx_img, &e);
    }
    if (!e.empty() && first_err.empty()) first_err = e;
    pos = next;
  }
  if (have_elf) {
    *out = std::move(matched);
    out->native = sm != 0;
    return true;
  }
  if (have_ptx) {
    *out = std::move(ptx_img);
    return true;
  }
  if (sm != 0) return parse_fatbin(b, out, err, 0);  // no entry for this GPU: any layout will do
  return fail(err, first_err.empty() ? "fatbin holds no cubin or PTX entry" : "no usable fatbin entry: " + first_err);
}

}  // namespace

const Kernel* Image::find(const std::string& name) const {
  for (const Kernel& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kFatbinWrapper: return "fatbin wrapper";
    case Kind::kFatbin: return "fatbin";
    case Kind::kCubin: return "cubin";
    case Kind::kPtx: return "PTX";
    case Kind::kUnknown: break;
  }
  return "unknown";
}

Kind detect(const void* data, size_t max_len) {
  if (!data) return Kind::kUnknown;
  Bytes b{static_cast<const uint8_t*>(data), max_len};
  if (b.has(0, 16)) {
    uint32_t magic = b.at<uint32_t>(0);
    if (magic == kFatbinWrapperMagic) return Kind::kFatbinWrapper;
    if (magic == kFatbinMagic) return Kind::kFatbin;
  }
  if (b.has(0, 4) && std::memcmp(b.p, "\x7f" "ELF", 4) == 0) return Kind::kCubin;
  // PTX: the first token after whitespace and comments is a directive. Read byte by byte and
  // stop at that token or a NUL, so a bare pointer (max_len SIZE_MAX) is read no further.
  const char* c = reinterpret_cast<const char*>(b.p);
  size_t i = 0;
  auto at = [&](size_t k) { return k < max_len ? c[k] : '\0'; };
  while (at(i) != '\0') {
    char ch = at(i);
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
      ++i;
    } else if (ch == '/' && at(i + 1) == '/') {
      while (at(i) != '\0' && at(i) != '\n') ++i;
    } else if (ch == '/' && at(i + 1) == '*') {
      i += 2;
      while (at(i) != '\0' && !(at(i) == '*' && at(i + 1) == '/')) ++i;
      if (at(i) != '\0') i += 2;
    } else {
      return ch == '.' ? Kind::kPtx : Kind::kUnknown;
    }
  }
  return Kind::kUnknown;
}

size_t image_size(const void* data, size_t max_len) {
  Bytes b{static_cast<const uint8_t*>(data), max_len};
  switch (detect(data, max_len)) {
    case Kind::kFatbin: {
      uint64_t end;
      uint16_t hsize = b.at<uint16_t>(6);
      if (hsize < 16 || add_overflows(hsize, b.at<uint64_t>(8), &end) || end > max_len) return 0;
      return size_t(end);
    }
    case Kind::kCubin:
      return elf_size(b);
    case Kind::kPtx: {
      size_t n = strnlen(reinterpret_cast<const char*>(b.p), max_len);
      return n < max_len ? n + 1 : 0;
    }
    default:
      return 0;
  }
}

const void* fatbin_wrapper_data(const void* data, size_t max_len) {
  if (detect(data, max_len) != Kind::kFatbinWrapper) return nullptr;
  const void* p;
  std::memcpy(&p, static_cast<const uint8_t*>(data) + 8, sizeof(p));
  return p;
}

bool parse(const void* data, size_t len, Image* out, std::string* err) { return parse(data, len, 0, out, err); }

bool parse(const void* data, size_t len, uint32_t sm, Image* out, std::string* err) {
  Bytes b{static_cast<const uint8_t*>(data), data ? len : 0};
  switch (detect(data, b.n)) {
    case Kind::kFatbin: return parse_fatbin(b, out, err, sm);
    case Kind::kCubin:
      if (!parse_cubin(b, out, err)) return false;
      out->native = true;  // built for this GPU by the program (Triton, NVRTC) or it would not load
      return true;
    case Kind::kPtx: return parse_ptx(ptx_text(b), out, err);
    case Kind::kFatbinWrapper: return fail(err, "a fatbin wrapper holds a pointer: parse the fatbin it points to");
    case Kind::kUnknown: break;
  }
  return fail(err, "not a fatbin, cubin or PTX image");
}

}  // namespace rgpu::image
