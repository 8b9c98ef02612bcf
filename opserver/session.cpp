// Implementation of opserver/session.h: decoding op calls from the wire (two phases: bytes into
// a plain value tree by tags alone, then the tree into IValues checked against the operator's
// schema), running them with the dispatcher, and binding results to client-minted storage ids.
#include "opserver/session.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/headeronly/version.h>

#include <complex>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "common/huge_pages.h"
#include "common/log.h"
#include "opserver/argument.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace rgpu::opserver {

using namespace rgpu::torchwire;

namespace {

// The connection broke while a frame's tail was read (Session::take_tail).
struct TailBroken {};

// Operators a client may not run, even with a valid token: they reach outside the device
// (files) or skip the bounds checks this server relies on.
bool denied(const std::string& name) {
  return name == "aten::from_file" || name == "aten::_unsafe_index_put" || name == "aten::set_";
}

// A decoded value before it meets a schema.
struct Value : ArgumentValue<Value> {
  TensorDesc desc;
  at::Tensor host;  // kHostTensor
};

bool valid_dtype(int8_t t) {
  using c10::ScalarType;
  switch (static_cast<ScalarType>(t)) {
    case ScalarType::Byte: case ScalarType::Char: case ScalarType::Short: case ScalarType::Int:
    case ScalarType::Long: case ScalarType::Half: case ScalarType::Float: case ScalarType::Double:
    case ScalarType::ComplexHalf: case ScalarType::ComplexFloat: case ScalarType::ComplexDouble:
    case ScalarType::Bool: case ScalarType::BFloat16: case ScalarType::UInt16: case ScalarType::UInt32:
    case ScalarType::UInt64: case ScalarType::Float8_e5m2: case ScalarType::Float8_e4m3fn:
    case ScalarType::Float8_e5m2fnuz: case ScalarType::Float8_e4m3fnuz:
      return t >= 0;
    default:
      return false;
  }
}

c10::ScalarType dtype_of(int8_t t) {
  if (!valid_dtype(t)) throw CallError(log::format("dtype %d is not one this server accepts", t));
  return static_cast<c10::ScalarType>(t);
}

// Elements and the highest element index a view touches, with overflow checks. Throws CallError.
void view_extent(const TensorDesc& d, uint64_t* numel, uint64_t* last) {
  if (d.offset < 0) throw CallError("negative storage offset");
  // span (the product of the sizes, empty ones counted as 1) bounds what contiguous strides of
  // these sizes multiply up to, so later stride arithmetic cannot overflow either.
  unsigned __int128 n = 1, span = 1, hi = static_cast<uint64_t>(d.offset);
  for (size_t k = 0; k < d.sizes.size(); ++k) {
    if (d.sizes[k] < 0 || d.strides[k] < 0) throw CallError("negative size or stride");
    n *= static_cast<uint64_t>(d.sizes[k]);
    span *= static_cast<uint64_t>(std::max<int64_t>(d.sizes[k], 1));
    if (span > (1ull << 62)) throw CallError("tensor too large");
    if (d.sizes[k] > 0) hi += static_cast<unsigned __int128>(d.sizes[k] - 1) * static_cast<uint64_t>(d.strides[k]);
    if (hi > (1ull << 62)) throw CallError("tensor view too large");
  }
  *numel = static_cast<uint64_t>(n);
  *last = static_cast<uint64_t>(hi);
}

// Bytes a view needs from the start of its storage (0 for an empty view).
uint64_t needed_bytes(const TensorDesc& d) {
  uint64_t numel, last;
  view_extent(d, &numel, &last);
  if (numel == 0) return 0;
  return (last + 1) * c10::elementSize(dtype_of(d.dtype));
}

Value decode_value(Reader& r, int depth) {
  return decode_argument<Malformed, Value>(r, depth, "truncated value", [](Reader& r, Value* v, int) {
    switch (v->tag) {
      case kRemoteTensor:
        if (!get_desc(r, &v->desc)) throw Malformed("truncated tensor");
        break;
      case kHostTensor: {
        TensorDesc d;
        d.dtype = r.get<int8_t>();
        uint8_t flags = r.u8();
        uint32_t nd = r.u8();
        if (!r.ok() || nd > kMaxDims) throw Malformed("bad host tensor");
        d.sizes.resize(nd);
        for (auto& s : d.sizes) s = r.get<int64_t>();
        size_t len = 0;
        const uint8_t* p = r.bytes(&len);
        if (!r.ok()) throw Malformed("truncated host tensor");
        // A malformed shape here is the client's mistake, but the bytes decoded: report it.
        // The element count is checked before the strides are computed (they multiply sizes).
        d.strides.assign(d.sizes.size(), 0);
        uint64_t numel, last;
        view_extent(d, &numel, &last);
        auto cs = c10::contiguous_strides(d.sizes);
        d.strides.assign(cs.begin(), cs.end());
        auto st = dtype_of(d.dtype);
        if (numel * c10::elementSize(st) != len) throw CallError("host tensor bytes do not match its shape");
        v->host = at::empty(d.sizes, at::TensorOptions().dtype(st));
        if (len) std::memcpy(v->host.data_ptr(), p, len);
        if ((flags & kHostWrappedNumber) && nd == 0) v->host.unsafeGetTensorImpl()->set_wrapped_number(true);
        break;
      }
      default:
        throw Malformed(log::format("unknown value tag %u", v->tag));
    }
  });
}

// An operator's name or overload as Reader::str(kMaxNameString) reads it, without a copy.
std::string_view read_name(Reader& r) {
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxNameString) {
    r.fail();
    return {};
  }
  const uint8_t* p = r.view(n);
  return p ? std::string_view(reinterpret_cast<const char*>(p), n) : std::string_view();
}

const char* tag_name(Tag t) {
  switch (t) {
    case kNone: return "None";
    case kBool: return "bool";
    case kInt: return "int";
    case kDouble: return "float";
    case kComplex: return "complex";
    case kString: return "str";
    case kDevice: return "device";
    case kList: return "list";
    case kRemoteTensor: case kHostTensor: return "Tensor";
    default: return "?";
  }
}

}  // namespace

bool op_refused(const std::string& name) { return name.rfind("aten::", 0) != 0 || denied(name); }
bool dtype_accepted(int8_t t) { return valid_dtype(t); }

std::string torch_version() {
  return log::format("%d.%d.%d", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

Session::Session(SessionOptions opt) : opt_(std::move(opt)), inductor_(opt_.python) {
  if (opt_.torch_version.empty()) opt_.torch_version = torch_version();
}

uint8_t error_kind(const c10::Error& e) {
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return kErrNotImplemented;
  if (dynamic_cast<const c10::ValueError*>(&e)) return kErrValue;
  if (dynamic_cast<const c10::IndexError*>(&e)) return kErrIndex;
  if (dynamic_cast<const c10::TypeError*>(&e)) return kErrType;
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return kErrOutOfMemory;
  if (dynamic_cast<const c10::LinAlgError*>(&e)) return kErrLinAlg;
  if (dynamic_cast<const c10::AcceleratorError*>(&e)) return kErrAccelerator;
  return kErrRuntime;
}

std::string sparse_refusal(const std::string& what) {
  return "rgpu: sparse tensors are not supported on the rgpu device yet; keep them on cpu (build them there, "
         "or .cpu() the dense tensor first) and move dense tensors to rgpu (" + what + " gave a sparse result)";
}

void Session::defer(const std::string& op, const std::string& message, uint8_t kind) {
  if (has_deferred_) return;  // the first failure explains the ones that follow
  has_deferred_ = true;
  deferred_op_ = op;
  deferred_message_ = message;
  deferred_kind_ = kind;
}

ReplyStatus Session::take_status() {
  ReplyStatus st;
  st.has_deferred = has_deferred_;
  st.deferred_op = std::move(deferred_op_);
  st.deferred_message = std::move(deferred_message_);
  st.deferred_kind = deferred_kind_;
  has_deferred_ = false;
  return st;
}

c10::Device Session::device(int index) const {
  if (index < 0 || index >= opt_.device_count)
    throw CallError(log::format("device %d does not exist: this server has %d device%s (0..%d)", index,
                                opt_.device_count, opt_.device_count == 1 ? "" : "s", opt_.device_count - 1));
  if (opt_.device.is_cpu()) return opt_.device;
  return c10::Device(opt_.device.type(), static_cast<c10::DeviceIndex>(index));
}

void Session::alloc(uint64_t id, uint64_t nbytes, int device_index) {
  if (id < kFirstStorageId) throw CallError(log::format("storage id %llu is reserved", (unsigned long long)id));
  device(device_index);  // checks the index
  if (nbytes > opt_.max_storage_bytes)
    throw CallError(log::format("a storage of %llu bytes is larger than this server allows (%llu)",
                                (unsigned long long)nbytes, (unsigned long long)opt_.max_storage_bytes));
  auto [it, fresh] = storages_.try_emplace(id);
  if (!fresh) throw CallError(log::format("storage id %llu is already in use", (unsigned long long)id));
  it->second.nbytes = nbytes;
  it->second.device = device_index;
  if (log::level() >= log::kDebug)
    log::debug("storage %llu: %llu bytes on device %d", (unsigned long long)id, (unsigned long long)nbytes, device_index);
}

void Session::free_storage(uint64_t id) {
  auto it = storages_.find(id);
  if (it == storages_.end()) return;  // its op failed (already reported) or it was never used
  if (log::level() >= log::kDebug) log::debug("storage %llu freed", (unsigned long long)id);
  if (it->second.storage) ids_by_impl_.erase(it->second.storage.unsafeGetStorageImpl());
  storages_.erase(it);
}

void Session::apply_storage_changes(Reader& r) {
  // Decoded whole before anything is applied, so a truncated frame changes nothing.
  uint32_t nalloc = r.u32();
  if (!r.ok() || nalloc > r.left() / 17) throw Malformed("truncated storage changes");
  std::vector<std::tuple<uint64_t, uint64_t, int>> allocs(nalloc);
  for (auto& [id, nbytes, device] : allocs) {
    id = r.u64();
    nbytes = r.u64();
    device = r.u8();
  }
  uint32_t nfree = r.u32();
  if (!r.ok() || nfree > r.left() / 8) throw Malformed("truncated storage changes");
  std::vector<uint64_t> frees(nfree);
  for (uint64_t& id : frees) id = r.u64();
  if (!r.ok()) throw Malformed("truncated storage changes");
  for (const auto& [id, nbytes, device] : allocs) {
    try {
      alloc(id, nbytes, device);
    } catch (const CallError& e) {
      defer("alloc", e.what());
    }
  }
  for (uint64_t id : frees) free_storage(id);
}

c10::Storage& Session::storage(uint64_t id) {
  auto it = storages_.find(id);
  if (it == storages_.end())
    throw CallError(log::format("storage %llu does not exist on the server (freed, or made by an op that failed)",
                                (unsigned long long)id));
  Slot& s = it->second;
  if (!s.storage) {
    auto bytes = at::empty({static_cast<int64_t>(s.nbytes)}, at::TensorOptions().dtype(at::kByte).device(device(s.device)));
    s.storage = bytes.storage();
    ids_by_impl_[s.storage.unsafeGetStorageImpl()] = id;
  }
  return s.storage;
}

void Session::resize(uint64_t id, uint64_t nbytes) {
  if (nbytes > opt_.max_storage_bytes) throw CallError("resize past the server's storage limit");
  if (log::level() >= log::kDebug) log::debug("storage %llu: resize to %llu bytes", (unsigned long long)id, (unsigned long long)nbytes);
  auto it = storages_.find(id);
  if (it == storages_.end()) throw CallError("resize of a storage that does not exist");
  Slot& s = it->second;
  // An op may have grown the storage already (an out= argument resized on the server).
  if (nbytes <= std::max<uint64_t>(s.nbytes, s.storage ? s.storage.nbytes() : 0)) return;
  if (!s.storage) {
    s.nbytes = nbytes;
    return;
  }
  // Grow in place, so every view the session builds from this id sees the new bytes.
  auto grown = at::empty({static_cast<int64_t>(nbytes)}, at::TensorOptions().dtype(at::kByte).device(s.storage.device()));
  int64_t old = static_cast<int64_t>(s.storage.nbytes());
  if (old > 0) {
    at::Tensor src = at::empty({0}, grown.options()).set_(s.storage, 0, {old}, {1});
    grown.narrow(0, 0, old).copy_(src);
  }
  c10::StorageImpl* impl = s.storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(grown.storage().unsafeGetStorageImpl()->set_data_ptr(at::DataPtr()));
  impl->set_nbytes(nbytes);
  s.nbytes = nbytes;
}

at::Tensor Session::tensor(const TensorDesc& d) {
  auto st = dtype_of(d.dtype);
  c10::Storage& s = storage(d.storage);
  uint64_t numel, last;
  view_extent(d, &numel, &last);
  if (numel > opt_.max_view_elements) throw CallError("a tensor view with more elements than this server allows");
  if (needed_bytes(d) > s.nbytes())
    throw CallError(log::format("a tensor view (%s, %llu bytes from the storage's start) reaches past the end of storage "
                                "%llu (%llu bytes)",
                                c10::str(c10::IntArrayRef(d.sizes), " strides ", c10::IntArrayRef(d.strides), " offset ",
                                         d.offset, " ", static_cast<c10::ScalarType>(d.dtype)).c_str(),
                                (unsigned long long)needed_bytes(d), (unsigned long long)d.storage,
                                (unsigned long long)s.nbytes()));
  if (log::level() >= log::kDebug)
    log::debug("  tensor of storage %llu (%zu bytes, impl %p)", (unsigned long long)d.storage, s.nbytes(),
               (void*)s.unsafeGetStorageImpl());
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(s), c10::DispatchKeySet(c10::computeDispatchKey(st, at::kStrided, opt_.device)),
                                                   caffe2::TypeMeta::fromScalarType(st));
  impl->set_sizes_and_strides(d.sizes, d.strides, d.offset);
  return at::Tensor(std::move(impl));
}

namespace {

// Checks a decoded value against a schema type and builds the IValue the kernel expects.
struct Converter {
  Session* session;
  std::function<at::Tensor(const TensorDesc&)> remote;
  std::function<c10::Device(int)> device;  // a client's device index -> this server's device

  c10::IValue operator()(const Value& v, const c10::TypePtr& type, const std::string& where) {
    return schema_value<CallError>(
        v, type, where, tag_name, device,
        [&](const Value& x) -> c10::IValue {
          if (x.tag == kRemoteTensor) return remote(x.desc);
          if (x.tag == kHostTensor) return x.host;
          throw CallError(where + ": expected Tensor, got " + tag_name(x.tag));
        },
        [&](const Value& e, const c10::TypePtr& t) { return (*this)(e, t, where); });
  }
};

bool same_layout(const at::Tensor& t, const TensorDesc& d) {
  return t.scalar_type() == static_cast<c10::ScalarType>(d.dtype) && t.sizes().equals(d.sizes) &&
         t.strides().equals(d.strides) && t.storage_offset() == d.offset;
}

}  // namespace

int Session::index_of(c10::Device d, int op_device) const { return opt_.device.is_cpu() ? op_device : d.index(); }

namespace {

// The device (client index) an op runs on: the one it names, else its first tensor's; 0 if
// neither. device_of gives a storage's device, or -1 for an unknown storage.
int op_device_of(const std::vector<Value>& args, const std::function<int(uint64_t)>& device_of) {
  std::function<int(const Value&)> find = [&](const Value& v) -> int {
    if (v.tag == kDevice && v.device_kind == kDeviceRemote) return v.device_index;
    if (v.tag == kRemoteTensor) return device_of(v.desc.storage);
    for (const Value& e : v.list)
      if (int d = find(e); d >= 0) return d;
    return -1;
  };
  for (const Value& v : args)
    if (v.tag == kDevice)
      if (int d = find(v); d >= 0) return d;
  for (const Value& v : args)
    if (int d = find(v); d >= 0) return d;
  return 0;
}

}  // namespace

bool Session::bind(const TensorDesc& spec, uint64_t nbytes, const at::Tensor& result, int op_device) {
  if (!result.defined()) throw CallError("the op returned no tensor where one was expected");
  if (result.layout() != at::kStrided) throw KindError(kErrNotImplemented, sparse_refusal("the op"));
  if (needed_bytes(spec) > nbytes) throw CallError("an output's layout does not fit its storage");
  const c10::StorageImpl* impl = result.has_storage() ? result.storage().unsafeGetStorageImpl() : nullptr;
  bool fresh = impl && !ids_by_impl_.count(impl);
  if (fresh && result.device().type() == opt_.device.type() && same_layout(result, spec) &&
      result.storage().nbytes() >= nbytes) {
    alloc(spec.storage, result.storage().nbytes(), index_of(result.device(), op_device));
    Slot& s = storages_[spec.storage];
    s.storage = result.storage();
    ids_by_impl_[impl] = spec.storage;
    return true;
  }
  // The op made another layout (or returned an existing tensor): copy into the promised one.
  alloc(spec.storage, nbytes, result.device().type() == opt_.device.type() ? index_of(result.device(), op_device) : op_device);
  // Scratch outputs the kernel and the meta device disagree about, one of them empty
  // (batch_norm's saved statistics in eval mode, embedding_bag's unused outputs): nothing to copy.
  uint64_t spec_numel, spec_last;
  view_extent(spec, &spec_numel, &spec_last);
  if (!result.sizes().equals(spec.sizes) && (result.numel() == 0 || spec_numel == 0)) return false;
  tensor(spec).copy_(result);
  return false;
}

void Session::call(Reader& r, bool want_reply, Writer* w) {
  const std::string_view name = read_name(r), overload = read_name(r);
  uint32_t nargs = r.u32();
  if (!r.ok() || nargs > r.left()) throw Malformed("truncated op call");
  std::vector<Value> args;
  args.reserve(nargs);
  for (uint32_t k = 0; k < nargs; ++k) args.push_back(decode_value(r, 0));
  // The outputs, decoded before anything runs, so a truncated message runs nothing.
  struct Out {
    uint8_t kind = kOutIgnore;
    std::vector<std::pair<TensorDesc, uint64_t>> specs;
  };
  std::vector<Out> outs;
  uint64_t first_id = 0;
  uint32_t max_ids = 0;
  if (want_reply) {
    first_id = r.u64();
    max_ids = r.u32();
    if (max_ids > kMaxSyncResults) throw Malformed("too many result ids");
  } else {
    uint32_t nret = r.u32();
    if (!r.ok() || nret > r.left()) throw Malformed("truncated op outputs");
    outs.resize(nret);
    for (Out& o : outs) {
      o.kind = r.u8();
      uint32_t n = 0;
      if (o.kind == kOutTensor) {
        n = 1;
      } else if (o.kind == kOutTensorList) {
        n = r.u32();
        if (!r.ok() || n > r.left()) throw Malformed("truncated op outputs");
      } else if (o.kind != kOutIgnore) {
        throw Malformed("unknown output kind");
      }
      for (uint32_t k = 0; k < n; ++k) {
        TensorDesc d;
        d.storage = r.u64();
        uint64_t nbytes = r.u64();
        if (!get_shape(r, &d)) throw Malformed("truncated output spec");
        o.specs.emplace_back(std::move(d), nbytes);
      }
    }
  }
  if (!r.ok() || r.left() != 0) throw Malformed("op call with trailing or missing bytes");

  op_key_.assign(name);
  if (!overload.empty()) op_key_.append(1, '.').append(overload);
  auto it = ops_.find(op_key_);
  if (it == ops_.end()) {
    const std::string& full = op_key_;
    if (op_refused(std::string(name))) throw CallError("operator " + full + " is not one rgpu-opserver runs for clients");
    auto handle = c10::Dispatcher::singleton().findSchema({std::string(name), std::string(overload)});
    if (!handle) throw CallError("operator " + full + " does not exist in this server's torch " + torch_version());
    OpEntry e{*handle, full, {}, name == "aten::_index_put_impl_"};
    for (const c10::Argument& a : handle->schema().arguments()) e.where.push_back(full + " argument '" + a.name() + "'");
    it = ops_.emplace(full, std::move(e)).first;
  }
  const OpEntry& entry = it->second;
  const std::string& full = entry.full;
  if (log::level() >= log::kDebug) log::debug("%s%s", full.c_str(), want_reply ? " (waits)" : "");
  const c10::OperatorHandle& op = entry.op;
  const c10::FunctionSchema& schema = op.schema();
  if (schema.arguments().size() != args.size())
    throw CallError(log::format("%s takes %zu arguments, the client sent %zu", full.c_str(), schema.arguments().size(),
                                args.size()));
  Converter conv{this, [this](const TensorDesc& d) { return tensor(d); }, [this](int index) { return device(index); }};
  // The device the op runs on, in the client's numbering: the one it names, else its first
  // tensor's (what the client assumed for its fresh outputs).
  const int op_device = op_device_of(args, [this](uint64_t id) {
    auto it = storages_.find(id);
    return it == storages_.end() ? -1 : it->second.device;
  });
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (size_t k = 0; k < args.size(); ++k)
    stack.push_back(conv(args[k], schema.arguments()[k].type(), entry.where[k]));
  // index_put_ reaches the server as _index_put_impl_, whose unsafe=True skips the index bounds
  // checks: a client never gets that.
  if (entry.index_put_impl && stack.size() == 5) stack[4] = false;
  // The boxed wrappers of out= ops that return several tensors (std::tuple<Tensor&, ...>) hand
  // back references into the argument stack after dropping it: somebody else must hold the
  // argument tensors meanwhile, as a caller always does in a client process. Found by ASan
  // (_linalg_slogdet.sign, tests/python/test_device_ops.py::test_op_db_parity[logdet]).
  torch::jit::Stack keep_alive = stack;
  op.callBoxed(&stack);

  if (!want_reply) {
    if (outs.size() > stack.size()) throw CallError("the client expects more results than " + full + " returns");
    for (size_t k = 0; k < outs.size(); ++k) {
      const Out& o = outs[k];
      if (o.kind == kOutTensor) {
        if (!stack[k].isTensor()) throw CallError(full + " did not return a tensor");
        bind(o.specs[0].first, o.specs[0].second, stack[k].toTensor(), op_device);
      } else if (o.kind == kOutTensorList) {
        if (!stack[k].isTensorList()) throw CallError(full + " did not return a list of tensors");
        auto list = stack[k].toTensorList();
        if (list.size() != o.specs.size()) throw CallError(full + " returned another number of tensors than expected");
        for (size_t j = 0; j < o.specs.size(); ++j) bind(o.specs[j].first, o.specs[j].second, list.get(j), op_device);
      }
    }
    return;
  }

  // With a reply: describe every result; fresh storages take ids from first_id.
  uint32_t used = 0;
  Writer body;
  std::function<void(const c10::IValue&)> put = [&](const c10::IValue& v) {
    if (v.isNone()) {
      body.put_u8(kNone);
    } else if (v.isTensor()) {
      at::Tensor t = v.toTensor();
      if (!t.defined()) {
        body.put_u8(kNone);
        return;
      }
      if (t.layout() != at::kStrided) throw KindError(kErrNotImplemented, sparse_refusal(full));
      if (t.device().type() != opt_.device.type()) t = t.to(device(op_device));
      const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
      auto found = ids_by_impl_.find(impl);
      body.put_u8(kResultTensor);
      if (found != ids_by_impl_.end()) {
        body.put_u64(found->second);
        body.put_u8(0);
      } else {
        if (used >= max_ids) throw CallError(full + " returned more tensors than the client reserved ids for");
        uint64_t id = first_id + used++;
        alloc(id, t.storage().nbytes(), index_of(t.device(), op_device));
        storages_[id].storage = t.storage();
        ids_by_impl_[impl] = id;
        body.put_u64(id);
        body.put_u8(1);
        body.put_u64(t.storage().nbytes());
      }
      put_shape(body, static_cast<int8_t>(t.scalar_type()), t.sizes().data(), t.strides().data(), t.dim(),
                t.storage_offset());
    } else if (v.isBool()) {
      body.put_u8(kBool);
      body.put_u8(v.toBool());
    } else if (v.isInt()) {
      body.put_u8(kInt);
      body.put<int64_t>(v.toInt());
    } else if (v.isDouble()) {
      body.put_u8(kDouble);
      body.put<double>(v.toDouble());
    } else if (v.isComplexDouble()) {
      auto c = v.toComplexDouble();
      body.put_u8(kComplex);
      body.put<double>(c.real());
      body.put<double>(c.imag());
    } else if (v.isList()) {
      auto l = v.toListRef();
      body.put_u8(kList);
      body.put_u32(static_cast<uint32_t>(l.size()));
      for (const auto& e : l) put(e);
    } else {
      throw CallError(full + " returned a " + v.tagKind() + ", which rgpu cannot send back");
    }
  };
  body.put_u32(static_cast<uint32_t>(stack.size()));
  for (const auto& v : stack) put(v);
  w->append(body.buf().data(), body.size());
}

bool Session::hello(Reader& r, ReplyStatus* st, Writer* w, std::string* why) {
  std::string client = r.str(64);
  if (!r.ok()) throw Malformed("truncated hello");
  auto major_minor = [](const std::string& v) { return v.substr(0, v.find('.', v.find('.') + 1)); };
  w->put_str(opt_.torch_version);
  w->put_str(opt_.device.is_cuda() ? "cuda" : "cpu");
  w->put_i32(opt_.device_count);
  if (major_minor(client) != major_minor(opt_.torch_version)) {
    st->failed = true;
    st->message = "rgpu-opserver runs torch " + opt_.torch_version + " but this client has torch " + client +
                  "; both sides need the same torch major.minor: install torch " + major_minor(opt_.torch_version) +
                  " on the client (the CPU build is enough: pip install 'torch==" + major_minor(opt_.torch_version) +
                  ".*' --index-url https://download.pytorch.org/whl/cpu), or run an rgpu-opserver built against torch " +
                  major_minor(client);
    *why = "refused a client with torch " + client + " (this server has " + opt_.torch_version + ")";
    return false;
  }
  hello_done_ = true;
  return true;
}

void Session::write_chunk(const TensorDesc& d, uint64_t total, uint64_t at, const uint8_t* p, size_t n) {
  if (at != staging_at_ || at + n > total) throw Malformed("write chunks out of order");
  if (at == 0) {
    staging_total_ = total;
    staging_.clear();
    // Straight into the tensor when it takes the bytes as they come (contiguous, the same
    // size); else gathered here and copied at the end.
    write_in_place_ = false;
    try {
      at::Tensor dst = tensor(d);
      write_in_place_ = dst.is_contiguous() && static_cast<uint64_t>(dst.nbytes()) == total;
    } catch (const std::exception&) {
      // Reported when the last chunk arrives, as for any write.
    }
    if (!write_in_place_) {
      if (total > opt_.max_storage_bytes) throw CallError("write larger than the server's storage limit");
      staging_.reserve(total);
    }
  } else if (total != staging_total_) {
    throw Malformed("write chunks of different lengths");
  }
  staging_at_ = at + n == total ? 0 : at + n;  // the next write starts over after the last chunk
  if (write_in_place_) {
    at::Tensor dst = tensor(d);
    if (static_cast<uint64_t>(dst.nbytes()) != total || !dst.is_contiguous())
      throw CallError("copy to the device: the tensor changed between the chunks of one write");
    if (dst.is_cpu()) {
      if (at == 0) advise_huge_pages(dst.data_ptr(), total);  // a fresh storage: cheaper first touch
      uint8_t* into = static_cast<uint8_t*>(dst.data_ptr()) + at;
      const size_t here = n - tail_.missing;
      std::memcpy(into, p, here);
      take_tail(into + here, tail_.missing);
    } else {
      p = whole_chunk(p, n);
      at::Tensor bytes = at::empty({0}, dst.options().dtype(at::kByte));
      bytes.set_(dst.storage(), dst.storage_offset() * static_cast<int64_t>(dst.element_size()) + static_cast<int64_t>(at),
                 {static_cast<int64_t>(n)}, {1});
      bytes.copy_(at::from_blob(const_cast<uint8_t*>(p), {static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte)));
      if (at + n == total) c10::impl::getDeviceGuardImpl(dst.device().type())->synchronizeDevice(dst.device().index());
    }
    return;
  }
  p = whole_chunk(p, n);
  staging_.insert(staging_.end(), p, p + n);
  if (staging_.size() < total) return;
  Bytes data;
  data.swap(staging_);
  at::Tensor dst = tensor(d);
  auto st = dst.scalar_type();
  if (static_cast<uint64_t>(dst.numel()) * c10::elementSize(st) != data.size())
    throw CallError("copy to the device: the bytes do not match the tensor's size");
  at::Tensor host = at::from_blob(data.data(), dst.sizes(), at::TensorOptions().dtype(st));
  dst.copy_(host);
  if (!dst.is_cpu()) c10::impl::getDeviceGuardImpl(dst.device().type())->synchronizeDevice(dst.device().index());
}

void Session::take_tail(void* dst, size_t n) {
  if (n == 0) return;
  if (!dst) {
    scratch_.resize(std::min<size_t>(n, kReadChunk));
    for (size_t left = n; left;) {
      size_t k = std::min(left, scratch_.size());
      take_tail(scratch_.data(), k);
      left -= k;
    }
    return;
  }
  if (n > tail_.missing || !tail_.read) throw Malformed("a write longer than its frame");
  if (!tail_.read(dst, n, &tail_why_)) throw TailBroken{};
  tail_.missing -= n;
}

const uint8_t* Session::whole_chunk(const uint8_t* p, size_t n) {
  if (!tail_.missing) return p;
  const size_t here = n - tail_.missing;
  scratch_.resize(n);
  std::memcpy(scratch_.data(), p, here);
  take_tail(scratch_.data() + here, tail_.missing);
  return scratch_.data();
}

void Session::read_many(const std::vector<TensorDesc>& descs, std::vector<Bytes>* reply_frames) {
  // Every view is checked (and copied off the device) before the reply starts: a failure is the
  // reply's own status, with no data.
  std::vector<at::Tensor> hosts;
  hosts.reserve(descs.size());
  uint64_t total = 0;
  for (const TensorDesc& d : descs) {
    hosts.push_back(tensor(d).contiguous().to(at::kCPU));
    total += static_cast<uint64_t>(hosts.back().nbytes());
  }
  Writer w;
  put_status(w, take_status());
  w.put_u64(total);
  reply_frames->emplace_back(w.buf().begin(), w.buf().end());
  // The data goes from the tensors' memory to the socket (serve), in frames of their own.
  for (at::Tensor& h : hosts)
    if (h.nbytes()) bulk_.push_back({static_cast<const uint8_t*>(h.const_data_ptr()), h.nbytes()});
  bulk_hold_ = std::move(hosts);
}

bool Session::handle(uint16_t op, uint16_t flags, const uint8_t* data, size_t len, std::vector<Bytes>* reply_frames,
                     std::string* why, PayloadTail tail) {
  Reader r(data, len);
  const bool want_reply = !(flags & proto::kNoReply);
  tail_ = tail;
  bulk_.clear();
  bulk_hold_.clear();
  Writer w;
  ReplyStatus own;
  bool keep = true;
  const char* what = "";
  try {
    if (op != kTorchHello && !hello_done_) throw Malformed("a call before the torch hello");
    if (flags & kWithStorage) {
      if (op == kTorchHello) throw Malformed("storage changes on the hello");
      apply_storage_changes(r);
      size_t used = len - r.left();
      data += used;
      len -= used;
      r = Reader(data, len);
    }
    switch (op) {
      case kTorchHello:
        what = "hello";
        if (!want_reply) throw Malformed("a one-way hello");
        keep = hello(r, &own, &w, why);
        break;
      case kTorchAlloc: {
        what = "alloc";
        uint64_t id = r.u64(), n = r.u64();
        int device = r.u8();
        if (!r.ok()) throw Malformed("truncated alloc");
        alloc(id, n, device);
        break;
      }
      case kTorchFree: {
        what = "free";
        uint64_t id = r.u64();
        if (!r.ok()) throw Malformed("truncated free");
        free_storage(id);
        break;
      }
      case kTorchResize: {
        what = "resize_";
        uint64_t id = r.u64(), n = r.u64();
        if (!r.ok()) throw Malformed("truncated resize");
        resize(id, n);
        break;
      }
      case kTorchWrite: {
        what = "copy to the device";
        TensorDesc d;
        if (!get_desc(r, &d)) throw Malformed("truncated write");
        uint64_t total = r.u64(), at = r.u64(), n = r.u64();
        if (!r.ok() || n != r.left() + tail_.missing) throw Malformed("truncated write");
        write_chunk(d, total, at, r.view(r.left()), n);
        break;
      }
      case kTorchRead: {
        what = "copy from the device";
        TensorDesc d;
        // A read's payload is its description, all in hand (serve splits writes only): bytes
        // past it, in the frame or on the socket, are malformed like any others.
        if (!get_desc(r, &d) || r.left() || tail_.missing) throw Malformed("truncated read");
        std::vector<TensorDesc> one{std::move(d)};
        read_many(one, reply_frames);
        return true;
      }
      case kTorchReadMany: {
        what = "copy from the device";
        uint32_t count = r.u32();
        if (!r.ok() || count > kMaxReadMany) throw Malformed("a read of too many tensors");
        std::vector<TensorDesc> descs(count);
        for (TensorDesc& d : descs)
          if (!get_desc(r, &d)) throw Malformed("truncated read");
        // As kTorchRead: no bytes past the descriptions (found by torch_wire_fuzz: the tail of a
        // split frame was left unread, to be taken for the next frame).
        if (r.left() || tail_.missing) throw Malformed("truncated read");
        read_many(descs, reply_frames);
        return true;
      }
      case kTorchCall:
        what = "op";
        call(r, want_reply, &w);
        break;
      case kTorchGraph:
      case kTorchGraphRun:
        what = "compiled graph";
        try {
          if (op == kTorchGraph)
            graph_define(r);
          else
            graph_run(r);
        } catch (const GraphMalformed& e) {
          throw Malformed(e.what());
        }
        break;
      case kTorchSeed: {
        what = "manual_seed";
        uint64_t seed = r.u64();
        if (!r.ok()) throw Malformed("truncated seed");
        at::manual_seed(seed);
        break;
      }
      case kTorchStorage:
        what = "storage";
        if (r.left()) throw Malformed("a storage frame with a payload");
        break;
      case kTorchDeviceProps:
        what = "get_device_properties";
        if (!want_reply) throw Malformed("a one-way device query");
        device_props(r, &w);
        break;
      case kTorchMemory:
        // The one-way actions, named as the user called them (a deferred error names them).
        what = len >= 2 && data[1] == kMemEmptyCache ? "empty_cache"
               : len >= 2 && data[1] == kMemResetPeak ? "reset_peak_memory_stats" : "memory";
        memory(r, want_reply, &w);
        break;
      case kTorchRng:
        what = len >= 2 && data[1] == kRngSetState ? "set_rng_state"
               : len >= 2 && data[1] == kRngManualSeed ? "manual_seed" : "rng";
        rng(r, want_reply, &w);
        break;
      case kTorchEvent:
        what = len >= 1 && data[0] == kEventRecord ? "Event.record" : "Event";
        event(r, want_reply, &w);
        break;
      case kTorchSync:
        what = "synchronize";
        if (!opt_.device.is_cpu()) {
          auto* guard = c10::impl::getDeviceGuardImpl(opt_.device.type());
          for (int d = 0; d < opt_.device_count; ++d) guard->synchronizeDevice(static_cast<c10::DeviceIndex>(d));
        }
        break;
      default:
        throw Malformed(log::format("unknown op %u", op));
    }
  } catch (const Malformed& e) {
    *why = std::string("malformed message: ") + e.what();
    return false;
  } catch (const TailBroken&) {
    *why = tail_why_;
    return false;
  } catch (const c10::Error& e) {
    own.failed = true;
    own.message = e.what_without_backtrace();
    own.kind = error_kind(e);
  } catch (const KindError& e) {
    own.failed = true;
    own.message = e.what();
    own.kind = e.kind;
  } catch (const std::bad_alloc&) {
    own.failed = true;
    own.message = log::format("rgpu-opserver ran out of host memory running %s", what);
    own.kind = kErrOutOfMemory;
  } catch (const std::exception& e) {
    own.failed = true;
    own.message = e.what();
  }
  if (tail_.missing) {
    // The call failed before it took its bytes: skip them, to the next frame.
    try {
      take_tail(nullptr, tail_.missing);
    } catch (const TailBroken&) {
      *why = tail_why_;
      return false;
    }
  }
  if (own.failed && !want_reply) {
    // Name the op the client called; for ATen calls that is in the message's first bytes.
    std::string name = what;
    if (op == kTorchGraph || op == kTorchGraphRun) {
      Reader again(data, len);
      name = log::format("compiled graph %llu", (unsigned long long)again.u64());
    } else if (op == kTorchCall) {
      Reader again(data, len);
      name = again.str(kMaxNameString);
      std::string ov = again.str(kMaxNameString);
      if (!ov.empty()) name += "." + ov;
    }
    defer(name, own.message, own.kind);
    return keep;
  }
  if (!want_reply) return keep;
  ReplyStatus st = take_status();
  st.failed = own.failed;
  st.message = own.message;
  st.kind = own.kind;
  Writer out;
  put_status(out, st);
  if (!own.failed || op == kTorchHello) out.append(w.buf().data(), w.size());
  reply_frames->emplace_back(out.buf().begin(), out.buf().end());
  return keep;
}

}  // namespace rgpu::opserver
