// The boxed fallback of rgpu (aten/remote.h): every ATen op without a local kernel comes here.
//
// The common path costs no round trip:
//   1. the arguments are mirrored on the meta device (same sizes, strides, offsets, dtypes; rgpu
//      tensors that share a storage share a meta storage) and the op runs there, which says what
//      the outputs look like, raises nothing the real op would not, and shows which outputs are
//      views of inputs (their meta storage is an input's);
//   2. views become local views of the input's storage, nothing is sent; out= arguments the op
//      resized are resized locally (their storage grows on the server first); every other output
//      gets a fresh storage id, and the op is posted with those ids (kTorchCall, one-way).
// What step 1 finds is kept per call signature (aten/meta_cache.h): a training step repeats the
// same calls, and only the first of each runs on the meta device.
// The op waits for the server instead (kTorchCall with a reply) when it returns something that
// is not a tensor, when the meta device cannot run it (data-dependent shapes: nonzero, unique,
// masked_select, boolean indexing), or when its outputs mix views and fresh tensors in one list.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/StorageImpl.h>

#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "aten/meta_cache.h"
#include "aten/remote.h"
#include "protocol/torch_wire.h"
#include "runtime/connection.h"
#include "runtime/device.h"

namespace rgpu::torchdev {

using namespace rgpu::torchwire;

namespace {

bool is_rgpu(const at::Tensor& t) { return t.defined() && t.device().type() == kDeviceType; }

void put_host_tensor(Writer& w, const at::Tensor& t0) {
  at::Tensor t = t0.resolve_conj().resolve_neg().contiguous();
  w.put_u8(kHostTensor);
  w.put<int8_t>(static_cast<int8_t>(t.scalar_type()));
  w.put_u8(t0.unsafeGetTensorImpl()->is_wrapped_number() ? kHostWrappedNumber : 0);
  w.put_u8(static_cast<uint8_t>(t.dim()));
  for (int64_t s : t.sizes()) w.put<int64_t>(s);
  w.put_bytes(t.const_data_ptr(), t.nbytes());
}

void put_value(Writer& w, const c10::IValue& v, bool mutable_arg) {
  if (v.isNone()) {
    w.put_u8(kNone);
  } else if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      w.put_u8(kNone);
    } else if (is_rgpu(t)) {
      w.put_u8(kRemoteTensor);
      put_tensor_desc(w, t);
    } else if (t.layout() != at::kStrided) {
      refuse_sparse("an op on rgpu tensors given a " + c10::str(t.layout()) + " tensor");
    } else if (t.is_cpu()) {
      TORCH_CHECK(!mutable_arg, "rgpu: an op on rgpu tensors cannot write into a cpu tensor; "
                  "Expected all tensors to be on the same device, but found at least two devices, rgpu:",
                  static_cast<int>(current_device()), " and cpu!");
      put_host_tensor(w, t);
    } else {
      TORCH_CHECK(false, "rgpu: a tensor on ", t.device(), " cannot be used with rgpu tensors; move it with .to(\"rgpu\")");
    }
  } else if (v.isBool()) {
    w.put_u8(kBool);
    w.put_u8(v.toBool());
  } else if (v.isInt()) {
    w.put_u8(kInt);
    w.put<int64_t>(v.toInt());
  } else if (v.isSymInt()) {
    w.put_u8(kInt);
    w.put<int64_t>(v.toSymInt().guard_int(__FILE__, __LINE__));
  } else if (v.isDouble()) {
    w.put_u8(kDouble);
    w.put<double>(v.toDouble());
  } else if (v.isSymFloat()) {
    w.put_u8(kDouble);
    w.put<double>(v.toSymFloat().guard_float(__FILE__, __LINE__));
  } else if (v.isSymBool()) {
    w.put_u8(kBool);
    w.put_u8(v.toSymBool().guard_bool(__FILE__, __LINE__));
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    w.put_u8(kComplex);
    w.put<double>(c.real());
    w.put<double>(c.imag());
  } else if (v.isString()) {
    w.put_u8(kString);
    w.put_str(v.toStringRef());
  } else if (v.isDevice()) {
    c10::Device d = v.toDevice();
    w.put_u8(kDevice);
    if (d.type() == kDeviceType) {
      w.put_u8(kDeviceRemote);
    } else if (d.is_cpu()) {
      w.put_u8(kDeviceHost);
    } else if (d.is_meta()) {
      w.put_u8(kDeviceMeta);
    } else {
      TORCH_CHECK(false, "rgpu: device ", d, " cannot be named in an op on rgpu tensors");
    }
    // "rgpu" without an index is the current device, resolved here: the server never guesses.
    w.put<int8_t>(d.type() == kDeviceType && !d.has_index() ? current_device() : d.has_index() ? d.index() : -1);
  } else if (v.isList()) {
    auto l = v.toListRef();
    w.put_u8(kList);
    w.put_u32(static_cast<uint32_t>(l.size()));
    for (const auto& e : l) put_value(w, e, mutable_arg);
  } else if (v.isGenerator()) {
    TORCH_CHECK(false, "rgpu: random ops on rgpu tensors draw from the server's generator and cannot take a "
                "torch.Generator; seed with torch.manual_seed() instead");
  } else {
    TORCH_CHECK(false, "rgpu: cannot send an argument of type ", v.tagKind(), " to rgpu-opserver");
  }
}

// The meta mirror of a call's arguments (step 1 in the file comment).
struct MetaMirror {
  std::unordered_map<const c10::StorageImpl*, c10::Storage> meta_of;    // rgpu storage -> meta
  std::unordered_map<const c10::StorageImpl*, c10::Storage> rgpu_of;    // meta storage -> rgpu

  at::Tensor tensor(const at::Tensor& t) {
    const c10::Storage& s = t.storage();
    auto it = meta_of.find(s.unsafeGetStorageImpl());
    if (it == meta_of.end()) {
      c10::Storage m(c10::Storage::use_byte_size_t(), s.nbytes(), c10::GetAllocator(c10::kMeta), /*resizable=*/true);
      rgpu_of[m.unsafeGetStorageImpl()] = s;
      it = meta_of.emplace(s.unsafeGetStorageImpl(), std::move(m)).first;
    }
    auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(it->second), c10::DispatchKeySet(c10::DispatchKey::Meta),
                                                     t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    at::Tensor m(std::move(impl));
    if (t.is_conj()) m._set_conj(true);
    if (t.is_neg()) m._set_neg(true);
    return m;
  }

  c10::IValue value(const c10::IValue& v) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      return is_rgpu(t) ? c10::IValue(tensor(t)) : v;
    }
    if (v.isDevice() && v.toDevice().type() == kDeviceType) return c10::Device(c10::kMeta);
    if (v.isList()) {
      c10::TypePtr elem = v.toList().elementType();
      if (elem->kind() != c10::TypeKind::TensorType && elem->kind() != c10::TypeKind::OptionalType) return v;
      c10::impl::GenericList out(elem);
      for (const auto& e : v.toListRef()) out.push_back(value(e));
      return out;
    }
    return v;
  }
};

// The device an op runs on, as the server decides it (opserver/session.cpp, op_device_of): the
// rgpu device it names, else its rgpu tensors' device, else the current device. Raises torch's
// error when its rgpu tensors are on different devices (cross-device copies are not ops that
// come here: aten/kernels.cpp sends them).
c10::DeviceIndex op_device(const std::vector<c10::IValue>& args) {
  std::optional<c10::DeviceIndex> named, seen;
  std::function<void(const c10::IValue&)> visit = [&](const c10::IValue& v) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!is_rgpu(t)) return;
      if (seen && *seen != t.device().index())
        TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, rgpu:",
                    static_cast<int>(*seen), " and rgpu:", static_cast<int>(t.device().index()), "!");
      seen = t.device().index();
    } else if (v.isDevice()) {
      c10::Device d = v.toDevice();
      if (d.type() == kDeviceType && !named) {
        named = d.has_index() ? d.index() : current_device();
        check_device_index(*named);
      }
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) visit(e);
    }
  };
  for (const auto& a : args) visit(a);
  return named ? *named : seen ? *seen : current_device();
}

at::Tensor make_tensor(c10::Storage storage, caffe2::TypeMeta dtype, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       int64_t offset) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
  impl->set_sizes_and_strides(sizes, strides, offset);
  return at::Tensor(std::move(impl));
}

bool is_mutable(const c10::Argument& a) { return a.alias_info() && a.alias_info()->isWrite(); }

void put_call_head(Writer& w, const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  w.put_str(schema.name());
  w.put_str(schema.overload_name());
  w.put_u32(static_cast<uint32_t>(args.size()));
  for (size_t k = 0; k < args.size(); ++k) put_value(w, args[k], is_mutable(schema.arguments()[k]));
}

void collect_storages(const c10::IValue& v, std::unordered_map<uint64_t, c10::Storage>* out) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (is_rgpu(t)) out->emplace(storage_id(t.storage()), t.storage());
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) collect_storages(e, out);
  }
}

c10::IValue read_result(Reader& r, const c10::TypePtr& type, const std::unordered_map<uint64_t, c10::Storage>& known,
                        c10::DeviceIndex device, int depth = 0) {
  TORCH_CHECK(depth <= static_cast<int>(kMaxListDepth), "rgpu: malformed result from rgpu-opserver (lists nested too deep)");
  uint8_t tag = r.u8();
  switch (tag) {
    case kNone:
      if (type->kind() == c10::TypeKind::TensorType) return at::Tensor();
      return c10::IValue();
    case kBool:
      return r.u8() != 0;
    case kInt:
      return r.get<int64_t>();
    case kDouble:
      return r.get<double>();
    case kComplex: {
      double re = r.get<double>(), im = r.get<double>();
      return c10::complex<double>(re, im);
    }
    case kResultTensor: {
      uint64_t id = r.u64();
      bool fresh = r.u8() != 0;
      uint64_t nbytes = fresh ? r.u64() : 0;
      TensorDesc d;
      TORCH_CHECK(get_shape(r, &d) && d.dtype >= 0 && d.dtype < static_cast<int8_t>(c10::ScalarType::NumOptions),
                  "rgpu: malformed result from rgpu-opserver");
      c10::Storage s;
      if (fresh) {
        s = storage_for_id(id, nbytes, device);
      } else {
        auto it = known.find(id);
        TORCH_CHECK(it != known.end(), "rgpu: rgpu-opserver returned a view of a storage this op was not given");
        s = it->second;
      }
      return make_tensor(std::move(s), caffe2::TypeMeta::fromScalarType(static_cast<c10::ScalarType>(d.dtype)), d.sizes,
                         d.strides, d.offset);
    }
    case kList: {
      uint32_t n = r.u32();
      TORCH_CHECK(r.ok() && n <= r.left(), "rgpu: malformed result from rgpu-opserver");
      c10::TypePtr elem = type->kind() == c10::TypeKind::ListType ? type->castRaw<c10::ListType>()->getElementType()
                                                                   : c10::AnyType::get();
      if (elem->kind() == c10::TypeKind::TensorType) {
        c10::List<at::Tensor> out;
        for (uint32_t k = 0; k < n; ++k) {
          c10::IValue e = read_result(r, elem, known, device, depth + 1);
          TORCH_CHECK(e.isTensor(), "rgpu: malformed result from rgpu-opserver (a list of tensors holds ", e.tagKind(), ")");
          out.push_back(e.toTensor());
        }
        return out;
      }
      c10::impl::GenericList out(elem);
      for (uint32_t k = 0; k < n; ++k) out.push_back(read_result(r, elem, known, device, depth + 1));
      return out;
    }
    default:
      TORCH_CHECK(false, "rgpu: malformed result from rgpu-opserver (tag ", static_cast<int>(tag), ")");
  }
}

// The waiting path: the server runs the op and describes what it returned.
void call_and_wait(const c10::OperatorHandle& op, std::vector<c10::IValue>& args, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const c10::DeviceIndex device = op_device(args);
  Connection& c = Connection::get();
  Writer w;
  put_call_head(w, schema, args);
  w.put_u64(c.mint(kSyncResultIds));
  w.put_u32(kSyncResultIds);
  Bytes body = c.call(kTorchCall, w, schema.operator_name().name + (schema.overload_name().empty() ? "" : "." + schema.overload_name()));
  Reader r(body.data(), body.size());
  uint32_t n = r.u32();
  TORCH_CHECK(r.ok() && n == schema.returns().size(), "rgpu: rgpu-opserver returned ", n, " results for ",
              schema.operator_name(), ", which has ", schema.returns().size());
  std::unordered_map<uint64_t, c10::Storage> known;
  for (const auto& a : args) collect_storages(a, &known);
  const OpInfo& info = op_info(op);
  std::vector<c10::IValue> results;
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    c10::IValue v = read_result(r, schema.returns()[i].type(), known, device);
    int j = info.aliased[i];
    if (j >= 0) {
      // An out= or in-place result is the argument itself, resized as the server resized it.
      if (v.isTensor() && args[j].isTensor() && is_rgpu(args[j].toTensor()) && v.toTensor().defined())
        restride(args[j].toTensor(), v.toTensor().sizes(), v.toTensor().strides());
      results.push_back(args[j]);
    } else {
      results.push_back(std::move(v));
    }
  }
  TORCH_CHECK(r.ok(), "rgpu: malformed result from rgpu-opserver");
  torch::jit::drop(*stack, args.size());
  for (auto& v : results) stack->push_back(std::move(v));
}

}  // namespace

void refuse_sparse(const std::string& op) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "rgpu: sparse tensors are not supported on the rgpu device yet; keep them on cpu "
                              "(build them there, or .cpu() the dense tensor first) and move dense tensors to rgpu (",
                              op, ")");
}

void put_tensor_desc(Writer& w, const at::Tensor& t) {
  w.put_u64(storage_id(t.storage()));
  put_shape(w, static_cast<int8_t>(t.scalar_type()), t.sizes().data(), t.strides().data(), t.dim(), t.storage_offset());
}

void post_op(const char* name, const char* overload, std::vector<c10::IValue> args) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  Writer w;
  put_call_head(w, op.schema(), args);
  w.put_u32(static_cast<uint32_t>(op.schema().returns().size()));
  for (size_t k = 0; k < op.schema().returns().size(); ++k) w.put_u8(kOutIgnore);
  Connection::get().post(kTorchCall, w);
}

namespace {

OutPlan tensor_plan(const at::Tensor& m, MetaMirror& mirror, CallKey& key, const c10::OperatorHandle& op) {
  if (m.layout() != at::kStrided) refuse_sparse(c10::toString(op.operator_name()));
  OutPlan o;
  auto it = mirror.rgpu_of.find(m.storage().unsafeGetStorageImpl());
  if (it != mirror.rgpu_of.end()) {
    o.kind = OutPlan::kView;
    o.storage = key.storage_index(it->second);
  } else {
    o.kind = OutPlan::kFresh;
    o.nbytes = m.storage().nbytes();
  }
  o.dtype = m.scalar_type();
  o.sizes = m.sizes().vec();
  o.strides = m.strides().vec();
  o.offset = m.storage_offset();
  return o;
}

// Step 1 of the file comment: what the outputs look like, from the meta device.
std::shared_ptr<const Plan> plan_on_meta(const c10::OperatorHandle& op, const OpInfo& info,
                                         const std::vector<c10::IValue>& args, CallKey& key) {
  auto plan = std::make_shared<Plan>();
  MetaMirror mirror;
  torch::jit::Stack meta;
  for (const auto& a : args) meta.push_back(mirror.value(a));
  // Boxed out= ops that return several tensors hand back references into the stack after
  // dropping it; the mirrors must outlive the call (opserver/session.cpp says more).
  torch::jit::Stack keep_alive = meta;
  try {
    op.callBoxed(&meta);
  } catch (const std::exception&) {
    // No meta kernel, or a data-dependent one: the server decides (and raises real errors).
    plan->wait = true;
    return plan;
  }
  for (size_t i = 0; i < info.aliased.size(); ++i) {
    const c10::IValue& mv = meta[i];
    OutPlan o;
    if (int j = info.aliased[i]; j >= 0) {
      o.kind = OutPlan::kAliased;
      o.arg = j;
      if (mv.isTensor() && mv.toTensor().defined()) {
        o.restride = true;
        o.sizes = mv.toTensor().sizes().vec();
        o.strides = mv.toTensor().strides().vec();
      }
    } else if (mv.isNone()) {
      o.kind = OutPlan::kNone;
    } else if (mv.isTensor()) {
      o = mv.toTensor().defined() ? tensor_plan(mv.toTensor(), mirror, key, op) : OutPlan{OutPlan::kUndefined};
    } else {
      // A list of tensors: all views (unbind-like) or all fresh; a mix waits.
      o.kind = OutPlan::kList;
      size_t views = 0;
      for (const at::Tensor& m : mv.toTensorList()) {
        o.list.push_back(tensor_plan(m, mirror, key, op));
        views += o.list.back().kind == OutPlan::kView;
      }
      if (views != 0 && views != o.list.size()) {
        plan->wait = true;
        plan->rets.clear();
        return plan;
      }
    }
    plan->rets.push_back(std::move(o));
  }
  return plan;
}

// Step 1 by a shape rule (aten/shape_rules.h), or nullptr where none covers the call. The first
// call of each shape class (every call under verify_all) also runs on the meta device, and the
// meta device's plan is the one used, kept and compared.
std::shared_ptr<const Plan> plan_by_rule(const c10::OperatorHandle& op, const OpInfo& info,
                                         const std::vector<c10::IValue>& args, CallKey& key) {
  auto plan = std::make_shared<Plan>();
  if (!info.rule(args, plan.get())) return nullptr;
  CallKey shape_class(op, info, args, /*symbolic=*/true);
  RuleVerdict v = rule_verdict(shape_class);
  if (v == RuleVerdict::kDisagreed) return nullptr;
  if (v == RuleVerdict::kAgreed && !verify_all()) {
    count_shape_rule(/*checked=*/false, false);
    keep_plan(key, plan);
    return plan;
  }
  std::shared_ptr<const Plan> meta = plan_on_meta(op, info, args, key);
  bool same = same_plan(*plan, *meta);
  count_shape_rule(/*checked=*/true, !same);
  if (v == RuleVerdict::kUnknown || !same) set_rule_verdict(shape_class, same ? RuleVerdict::kAgreed : RuleVerdict::kDisagreed);
  if (key.cacheable()) count_meta_run(op);
  keep_plan(key, meta);
  return meta;
}

at::Tensor planned_tensor(const OutPlan& o, Connection& c, const std::vector<c10::Storage>& storages, Writer& outs,
                          c10::DeviceIndex device) {
  c10::Storage s;
  if (o.kind == OutPlan::kView) {
    s = storages.at(o.storage);
  } else {
    uint64_t id = c.mint();
    outs.put_u64(id);
    outs.put_u64(o.nbytes);
    put_shape(outs, static_cast<int8_t>(o.dtype), o.sizes.data(), o.strides.data(), o.sizes.size(), o.offset);
    s = storage_for_id(id, o.nbytes, device);
  }
  return make_tensor(std::move(s), caffe2::TypeMeta::fromScalarType(o.dtype), o.sizes, o.strides, o.offset);
}

}  // namespace

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  std::vector<c10::IValue> args(stack->end() - static_cast<long>(nargs), stack->end());
  const OpInfo& info = op_info(op);
  if (info.always_wait) return call_and_wait(op, args, stack);
  const c10::DeviceIndex device = op_device(args);

  CallKey key(op, info, args);
  std::shared_ptr<const Plan> plan = find_plan(key);
  if (!plan && info.rule) plan = plan_by_rule(op, info, args, key);
  if (!plan) {
    plan = plan_on_meta(op, info, args, key);
    if (key.cacheable()) count_meta_run(op);
    keep_plan(key, plan);
  }
  if (plan->wait) return call_and_wait(op, args, stack);

  // Step 2: the outputs as the plan says, and the op posted when it has any effect.
  Connection& c = Connection::get();
  bool send = info.mutates;
  Writer outs;
  outs.buf().reserve(128);
  outs.put_u32(static_cast<uint32_t>(plan->rets.size()));
  std::vector<c10::IValue> results;
  results.reserve(plan->rets.size());
  for (const OutPlan& o : plan->rets) {
    switch (o.kind) {
      case OutPlan::kAliased:
        // In-place or out=: the argument itself, resized like its meta mirror (for out=).
        if (o.restride && args[o.arg].isTensor() && is_rgpu(args[o.arg].toTensor()))
          restride(args[o.arg].toTensor(), o.sizes, o.strides);
        results.push_back(args[o.arg]);
        outs.put_u8(kOutIgnore);
        break;
      case OutPlan::kNone:
        results.emplace_back();
        outs.put_u8(kOutIgnore);
        break;
      case OutPlan::kUndefined:
        results.emplace_back(at::Tensor());
        outs.put_u8(kOutIgnore);
        break;
      case OutPlan::kView:
        results.emplace_back(planned_tensor(o, c, key.storages(), outs, device));
        outs.put_u8(kOutIgnore);
        break;
      case OutPlan::kFresh:
        outs.put_u8(kOutTensor);
        results.emplace_back(planned_tensor(o, c, key.storages(), outs, device));
        send = true;
        break;
      case OutPlan::kList: {
        bool fresh = !o.list.empty() && o.list[0].kind == OutPlan::kFresh;
        outs.put_u8(fresh ? kOutTensorList : kOutIgnore);
        if (fresh) outs.put_u32(static_cast<uint32_t>(o.list.size()));
        c10::List<at::Tensor> out;
        out.reserve(o.list.size());
        for (const OutPlan& e : o.list) out.push_back(planned_tensor(e, c, key.storages(), outs, device));
        results.emplace_back(std::move(out));
        send = send || fresh;
        break;
      }
    }
  }
  if (send) {
    Writer w;
    // Room for a typical call (name, a few tensors, the outputs), so the buffer does not grow
    // a byte vector step by step on every op.
    w.buf().reserve(512 + outs.size());
    put_call_head(w, schema, args);
    w.append(outs.buf().data(), outs.size());
    c.post(kTorchCall, w);
  }
  torch::jit::drop(*stack, nargs);
  for (auto& v : results) stack->push_back(std::move(v));
}

}  // namespace rgpu::torchdev
