// Argument values as both decoders of them see them: kTorchCall's arguments (session.cpp's Value,
// which adds tensors) and a compiled graph's (graph.h's GraphValue, which adds references to inputs
// and node results). The one place that says how the tags they share are read off the wire
// (protocol/torch_wire.h) and which tag each schema type accepts and what IValue it becomes.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/wire.h"
#include "protocol/torch_wire.h"

namespace rgpu::opserver {

// The fields of the tags both kinds of value share; Self is the value type (its list's elements).
template <class Self>
struct ArgumentValue {
  torchwire::Tag tag = torchwire::kNone;
  bool b = false;
  int64_t i = 0;
  double d = 0, im = 0;
  std::string s;
  uint8_t device_kind = 0;
  int8_t device_index = 0;
  std::vector<Self> list;
};

// Reads one value: its tag, then the shared tags' fields here (a list's elements through this
// again), any other tag's through other(r, &v, depth), which throws for a tag it does not take.
// Throws Error for bytes that do not decode; `truncated` names what ran short.
template <class Error, class V, class Other>
V decode_argument(Reader& r, int depth, const char* truncated, Other&& other) {
  using namespace rgpu::torchwire;
  V v;
  v.tag = static_cast<Tag>(r.u8());
  if (!r.ok()) throw Error(truncated);
  switch (v.tag) {
    case kNone:
      break;
    case kBool:
      v.b = r.u8() != 0;
      break;
    case kInt:
      v.i = r.get<int64_t>();
      break;
    case kDouble:
      v.d = r.get<double>();
      break;
    case kComplex:
      v.d = r.get<double>();
      v.im = r.get<double>();
      break;
    case kString:
      v.s = r.str(kMaxString);
      break;
    case kDevice:
      v.device_kind = r.u8();
      v.device_index = r.get<int8_t>();
      if (v.device_kind > kDeviceMeta) throw Error("unknown device kind");
      break;
    case kList: {
      if (depth >= static_cast<int>(kMaxListDepth)) throw Error("lists nested too deep");
      uint32_t n = r.u32();
      if (!r.ok() || n > r.left()) throw Error("list longer than the message");
      v.list.reserve(n);
      for (uint32_t k = 0; k < n; ++k) v.list.push_back(decode_argument<Error, V>(r, depth + 1, truncated, other));
      break;
    }
    default:
      other(r, &v, depth);
  }
  if (!r.ok()) throw Error(truncated);
  return v;
}

// The dtypes a client may name (kTorchCall and compiled graphs alike).
bool dtype_accepted(int8_t dtype);

// The IValue `type` asks for from v, or throws Error(where + ...) saying what was expected.
// V has the fields tag, b, i, d, im, s, device_kind, device_index and list. The caller supplies:
//   got(tag)              the name of what v is, for the error;
//   device(index)         a client's device index as this server's device;
//   tensor(v)             the IValue for a Tensor argument (or throws);
//   element(e, type)      the IValue for an optional's value or a list's element (the caller's
//                         own entry, so what it handles before calling this applies there too).
template <class Error, class V, class Got, class DeviceOf, class TensorOf, class Element>
c10::IValue schema_value(const V& v, const c10::TypePtr& type, const std::string& where, Got&& got,
                         DeviceOf&& device, TensorOf&& tensor, Element&& element) {
  using namespace rgpu::torchwire;
  auto mismatch = [&](const char* want) { return Error(where + ": expected " + want + ", got " + got(v.tag)); };
  switch (type->kind()) {
    case c10::TypeKind::OptionalType:
      if (v.tag == kNone) return c10::IValue();
      return element(v, type->castRaw<c10::OptionalType>()->getElementType());
    case c10::TypeKind::NoneType:
      if (v.tag != kNone) throw mismatch("None");
      return c10::IValue();
    case c10::TypeKind::TensorType:
      // An undefined tensor where the schema says Tensor: autograd passes them for inputs a
      // backward may ignore (_scaled_dot_product_efficient_attention_backward's attn_bias).
      if (v.tag == kNone) return at::Tensor();
      return tensor(v);
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      if (v.tag != kInt) throw mismatch("int");
      return v.i;
    case c10::TypeKind::ScalarTypeType:
      if (v.tag != kInt || (v.i < INT8_MIN) || (v.i > INT8_MAX) || !dtype_accepted(static_cast<int8_t>(v.i)))
        throw mismatch("a dtype");
      return v.i;
    case c10::TypeKind::LayoutType:
      if (v.tag != kInt || v.i != static_cast<int64_t>(at::kStrided)) throw Error(where + ": only the strided layout is supported");
      return v.i;
    case c10::TypeKind::MemoryFormatType:
      if (v.tag != kInt || v.i < 0 || v.i >= static_cast<int64_t>(c10::MemoryFormat::NumOptions)) throw mismatch("a memory format");
      return v.i;
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType:
      if (v.tag == kDouble) return v.d;
      if (v.tag == kInt) return static_cast<double>(v.i);
      throw mismatch("float");
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType:
      if (v.tag != kBool) throw mismatch("bool");
      return v.b;
    case c10::TypeKind::ComplexType:
      if (v.tag != kComplex) throw mismatch("complex");
      return c10::complex<double>(v.d, v.im);
    case c10::TypeKind::NumberType:
      if (v.tag == kInt) return v.i;
      if (v.tag == kDouble) return v.d;
      if (v.tag == kBool) return v.b;
      if (v.tag == kComplex) return c10::complex<double>(v.d, v.im);
      throw mismatch("a number");
    case c10::TypeKind::StringType:
      if (v.tag != kString) throw mismatch("str");
      return v.s;
    case c10::TypeKind::DeviceObjType:
      if (v.tag != kDevice) throw mismatch("device");
      if (v.device_kind == kDeviceRemote) return device(v.device_index);
      if (v.device_kind == kDeviceMeta) return c10::Device(c10::kMeta);
      return c10::Device(c10::kCPU);
    case c10::TypeKind::ListType: {
      if (v.tag != kList) throw mismatch("a list");
      c10::TypePtr elem = type->castRaw<c10::ListType>()->getElementType();
      c10::impl::GenericList out(elem);
      out.reserve(v.list.size());
      for (const V& e : v.list) out.push_back(element(e, elem));
      return out;
    }
    case c10::TypeKind::GeneratorType:
      throw Error(where + ": generators cannot be sent to the server; use torch.manual_seed");
    default:
      throw Error(where + ": arguments of type " + type->str() + " are not supported by rgpu");
  }
}

}  // namespace rgpu::opserver
