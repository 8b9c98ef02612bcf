// Implementation of opserver/inductor.h: the embedded interpreter, the checked graph handed to
// opserver/inductor_compile.py as Python values, and the calls of the code Inductor generated.
//
// Tensors cross into Python and back as torch's own Python objects (THPVariable_Wrap and
// THPVariable_Unpack, from libtorch_python): no copy, no conversion, and the at::Tensor that comes
// back is the very TensorImpl the generated code returned, so Session::bind still sees which
// results are fresh storages and which alias a storage the session holds already. (DLPack capsules
// would hand back new storages around the same memory: an output that aliases an input would look
// fresh, and the client would get a second storage id for the same bytes.)
//
// Without a shared libpython (RGPU_OPSERVER_PYTHON undefined at compile time) only the stubs at the
// end are built; the fuzz target builds those too.
#include "opserver/inductor.h"

#include <ATen/ATen.h>

#include "common/log.h"
#include "opserver/session.h"

#if RGPU_OPSERVER_PYTHON

#include <Python.h>
#include <dlfcn.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <unistd.h>

#include <chrono>

#include "opserver/inductor_compile_py.h"  // kInductorCompilePy: opserver/inductor_compile.py, embedded by CMake

namespace rgpu::opserver {

using namespace rgpu::torchwire;

bool inductor_built() { return true; }
const char* inductor_missing_reason() { return ""; }
const char* inductor_default_python() { return RGPU_OPSERVER_PYTHON_EXECUTABLE; }

namespace {

// The GIL, for the scope.
struct Gil {
  PyGILState_STATE state = PyGILState_Ensure();
  ~Gil() { PyGILState_Release(state); }
};

// An owned reference.
struct Ref {
  PyObject* p = nullptr;
  Ref() = default;
  explicit Ref(PyObject* o) : p(o) {}
  Ref(Ref&& o) noexcept : p(o.p) { o.p = nullptr; }
  Ref& operator=(Ref&& o) noexcept {
    std::swap(p, o.p);
    return *this;
  }
  ~Ref() { Py_XDECREF(p); }
  PyObject* release() { return std::exchange(p, nullptr); }
  explicit operator bool() const { return p != nullptr; }
};

// A Python call failed: the exception is pending.
struct PythonFailed {};

PyObject* check(PyObject* o) {
  if (!o) throw PythonFailed{};
  return o;
}

// The pending exception as the module describes it: (kind, one line, the whole traceback). Clears it.
struct Described {
  std::string kind = "runtime", line, full;
};
Described describe_pending(PyObject* module) {
  Described d;
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  Ref t(type), v(value), trace(tb);
  if (v.p && trace.p) PyException_SetTraceback(v.p, trace.p);
  auto text = [](PyObject* o) {
    std::string s;
    if (!o) return s;
    Ref str(PyObject_Str(o));
    const char* c = str ? PyUnicode_AsUTF8(str.p) : nullptr;
    if (c) s = c;
    PyErr_Clear();
    return s;
  };
  std::string name = t.p ? reinterpret_cast<PyTypeObject*>(t.p)->tp_name : "exception";
  d.full = d.line = name + ": " + text(v.p);
  if (module && v.p) {
    Ref r(PyObject_CallMethod(module, "describe_error", "O", v.p));
    if (r && PyTuple_Check(r.p) && PyTuple_Size(r.p) == 3) {
      d.kind = text(PyTuple_GET_ITEM(r.p, 0));
      d.line = text(PyTuple_GET_ITEM(r.p, 1));
      d.full = text(PyTuple_GET_ITEM(r.p, 2));
    }
    PyErr_Clear();
  }
  return d;
}

uint8_t kind_of(const std::string& k) {
  if (k == "not_implemented") return kErrNotImplemented;
  if (k == "value") return kErrValue;
  if (k == "index") return kErrIndex;
  if (k == "type") return kErrType;
  if (k == "out_of_memory") return kErrOutOfMemory;
  if (k == "linalg") return kErrLinAlg;
  if (k == "accelerator") return kErrAccelerator;
  return kErrRuntime;
}

// The directory of the torch libraries this process runs (libtorch_python's, found by one of its
// symbols): the torch the interpreter must import.
std::string linked_torch_lib_dir() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(static_cast<PyObject* (*)(const at::TensorBase&)>(&THPVariable_Wrap)), &info) ||
      !info.dli_fname)
    return "";
  std::string path = info.dli_fname;
  return path.substr(0, path.rfind('/'));
}

Ref py_str(const std::string& s) { return Ref(check(PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size())))); }

// A graph value as inductor_compile.py takes it: references as tuples, constants typed by the
// schema type `type` (dtype, layout, memory format and device as torch's objects). Throws
// std::runtime_error for a constant the schema does not take (the graph then runs op by op, where
// graph_arg reports it to the client).
Ref py_value(const GraphValue& v, const c10::TypePtr& type, const std::function<c10::Device(int)>& device) {
  if (v.tag == kGraphInput) return Ref(check(Py_BuildValue("(sI)", "input", v.node)));
  if (v.tag == kGraphNode) return Ref(check(Py_BuildValue("(sIIi)", "node", v.node, v.ret, v.elem)));
  if (v.tag == kNone) return Ref(Py_NewRef(Py_None));
  c10::TypePtr t = type;
  if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
  switch (v.tag) {
    case kBool:
      return Ref(check(PyBool_FromLong(v.b)));
    case kInt:
      switch (t->kind()) {
        case c10::TypeKind::ScalarTypeType:
          if (v.i < INT8_MIN || v.i > INT8_MAX || !dtype_accepted(static_cast<int8_t>(v.i)))
            throw std::runtime_error(log::format("dtype %lld is not one this server accepts", (long long)v.i));
          return Ref(Py_NewRef(reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(v.i)))));
        case c10::TypeKind::LayoutType:
          if (v.i != static_cast<int64_t>(at::kStrided)) throw std::runtime_error("only the strided layout is supported");
          return Ref(Py_NewRef(reinterpret_cast<PyObject*>(torch::getTHPLayout(at::kStrided))));
        case c10::TypeKind::MemoryFormatType:
          if (v.i < 0 || v.i >= static_cast<int64_t>(c10::MemoryFormat::NumOptions))
            throw std::runtime_error("not a memory format");
          return Ref(Py_NewRef(torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.i))));
        default:
          return Ref(check(PyLong_FromLongLong(v.i)));
      }
    case kDouble:
      return Ref(check(PyFloat_FromDouble(v.d)));
    case kComplex:
      return Ref(check(PyComplex_FromDoubles(v.d, v.im)));
    case kString:
      return py_str(v.s);
    case kDevice: {
      c10::Device d = v.device_kind == kDeviceRemote ? device(v.device_index)
                      : v.device_kind == kDeviceMeta ? c10::Device(c10::kMeta)
                                                     : c10::Device(c10::kCPU);
      return Ref(check(THPDevice_New(d)));
    }
    case kList: {
      c10::TypePtr elem = t->kind() == c10::TypeKind::ListType ? t->castRaw<c10::ListType>()->getElementType() : t;
      Ref list(check(PyList_New(static_cast<Py_ssize_t>(v.list.size()))));
      for (size_t k = 0; k < v.list.size(); ++k)
        PyList_SET_ITEM(list.p, static_cast<Py_ssize_t>(k), py_value(v.list[k], elem, device).release());
      return list;
    }
    default:
      throw std::runtime_error("a value Inductor is not given");
  }
}

// A run's inputs as the positional arguments of the generated code.
Ref py_inputs(const std::vector<c10::IValue>& inputs) {
  Ref args(check(PyTuple_New(static_cast<Py_ssize_t>(inputs.size()))));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const c10::IValue& x = inputs[k];
    PyObject* o = x.isTensor() ? THPVariable_Wrap(x.toTensor())
                  : x.isInt()  ? PyLong_FromLongLong(x.toInt())
                  : x.isDouble() ? PyFloat_FromDouble(x.toDouble())
                  : x.isBool() ? PyBool_FromLong(x.toBool())
                               : Py_NewRef(Py_None);
    PyTuple_SET_ITEM(args.p, static_cast<Py_ssize_t>(k), check(o));
  }
  return args;
}

}  // namespace

InductorProgram::~InductorProgram() {
  if (!fn_ || !Py_IsInitialized()) return;
  Gil gil;
  Py_DECREF(static_cast<PyObject*>(fn_));
}

bool Inductor::start(std::string* why) {
  if (state_ == State::kRunning) return true;
  if (state_ == State::kFailed) {
    *why = failed_why_;
    return false;
  }
  state_ = State::kFailed;
  auto fail = [&](const std::string& message) {
    failed_why_ = message + "; graphs of this session run op by op";
    *why = failed_why_;
    return false;
  };
  if (python_.empty() || access(python_.c_str(), X_OK) != 0)
    return fail("no python at '" + python_ + "' (set RGPU_OPSERVER_PYTHON to the python whose torch rgpu-opserver links)");
  std::string lib_dir = linked_torch_lib_dir();
  auto began = std::chrono::steady_clock::now();
  // Isolated: PYTHONPATH, PYTHONHOME and the user's site-packages of whoever started the server do
  // not choose the torch; no signal handlers (the server's own stay). The venv's python as the
  // executable: site.py then reads its pyvenv.cfg, as when that python runs.
  PyConfig config;
  PyConfig_InitIsolatedConfig(&config);
  PyStatus st = PyConfig_SetBytesString(&config, &config.program_name, python_.c_str());
  if (!PyStatus_Exception(st)) st = PyConfig_SetBytesString(&config, &config.executable, python_.c_str());
  if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(st) || !Py_IsInitialized())
    return fail(std::string("Python did not start (") + (st.err_msg ? st.err_msg : "no reason given") + ") for " + python_);
  // This thread holds the GIL now.
  std::string started;
  try {
    Ref code(check(Py_CompileString(kInductorCompilePy, "opserver/inductor_compile.py", Py_file_input)));
    Ref module(check(PyImport_ExecCodeModule("rgpu_inductor_compile", code.p)));
    Ref v(check(PyObject_CallMethod(module.p, "start", "s", lib_dir.c_str())));
    const char* c = PyUnicode_AsUTF8(v.p);
    started = c ? c : "?";
    module_ = module.release();
  } catch (const PythonFailed&) {
    Described d = describe_pending(nullptr);
    PyEval_SaveThread();
    return fail("Inductor is not available: " + d.line);
  }
  PyEval_SaveThread();  // released until the next call
  state_ = State::kRunning;
  log::info("Inductor started: %s, in %.1f s", started.c_str(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  return true;
}

std::shared_ptr<InductorProgram> Inductor::compile(uint64_t id, const Graph& g, const std::vector<c10::IValue>& inputs,
                                                   const std::function<c10::Device(int)>& device, std::string* why) {
  if (!start(why)) return nullptr;
  Gil gil;
  try {
    Ref nodes(check(PyList_New(static_cast<Py_ssize_t>(g.nodes.size()))));
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const GraphNode& n = g.nodes[k];
      const auto& schema = n.op->schema().arguments();
      Ref args(check(PyList_New(static_cast<Py_ssize_t>(n.args.size()))));
      for (size_t a = 0; a < n.args.size(); ++a)
        PyList_SET_ITEM(args.p, static_cast<Py_ssize_t>(a), py_value(n.args[a], schema[a].type(), device).release());
      Ref name = py_str(n.name), overload = py_str(n.overload);
      PyList_SET_ITEM(nodes.p, static_cast<Py_ssize_t>(k), check(PyTuple_Pack(3, name.p, overload.p, args.p)));
    }
    Ref outputs(check(PyList_New(static_cast<Py_ssize_t>(g.outputs.size()))));
    for (size_t k = 0; k < g.outputs.size(); ++k)
      PyList_SET_ITEM(outputs.p, static_cast<Py_ssize_t>(k), py_value(g.outputs[k], c10::AnyType::get(), device).release());
    Ref example = py_inputs(inputs);
    Ref fn(check(PyObject_CallMethod(static_cast<PyObject*>(module_), "compile_graph", "KOOO", (unsigned long long)id,
                                     nodes.p, outputs.p, example.p)));
    return std::make_shared<InductorProgram>(fn.release());
  } catch (const PythonFailed&) {
    Described d = describe_pending(static_cast<PyObject*>(module_));
    if (log::level() >= log::kDebug) log::debug("graph %llu: Inductor: %s", (unsigned long long)id, d.full.c_str());
    *why = d.line;
  } catch (const std::exception& e) {
    PyErr_Clear();
    *why = e.what();
  }
  return nullptr;
}

std::vector<c10::IValue> Inductor::run(const InductorProgram& p, const std::vector<c10::IValue>& inputs) {
  Gil gil;
  try {
    Ref args = py_inputs(inputs);
    Ref out(check(PyObject_Call(static_cast<PyObject*>(p.callable()), args.p, nullptr)));
    Ref seq(check(PySequence_Fast(out.p, "Inductor's code returned something that is not a list")));
    std::vector<c10::IValue> results;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.p);
    results.reserve(static_cast<size_t>(n));
    for (Py_ssize_t k = 0; k < n; ++k) {
      PyObject* o = PySequence_Fast_GET_ITEM(seq.p, k);
      if (THPVariable_Check(o))
        results.emplace_back(THPVariable_Unpack(o));
      else
        results.emplace_back();  // None (or a number the client takes no result for)
    }
    return results;
  } catch (const PythonFailed&) {
    Described d = describe_pending(static_cast<PyObject*>(module_));
    throw KindError(kind_of(d.kind), "in the code Inductor generated for it: " + d.line);
  }
}

}  // namespace rgpu::opserver

#else  // built without Python

namespace rgpu::opserver {

bool inductor_built() { return false; }
const char* inductor_missing_reason() {
#ifdef RGPU_OPSERVER_NO_PYTHON_REASON
  return RGPU_OPSERVER_NO_PYTHON_REASON;
#else
  return "this build does not embed Python";
#endif
}
const char* inductor_default_python() { return ""; }

InductorProgram::~InductorProgram() = default;

std::shared_ptr<InductorProgram> Inductor::compile(uint64_t, const Graph&, const std::vector<c10::IValue>&,
                                                   const std::function<c10::Device(int)>&, std::string* why) {
  state_ = State::kFailed;
  *why = std::string("rgpu-opserver was built without Python: ") + inductor_missing_reason();
  return nullptr;
}

std::vector<c10::IValue> Inductor::run(const InductorProgram&, const std::vector<c10::IValue>&) {
  throw std::runtime_error("rgpu-opserver was built without Python");
}

bool Inductor::start(std::string*) { return false; }

}  // namespace rgpu::opserver

#endif
