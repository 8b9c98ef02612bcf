// Inductor on the server (`rgpu-opserver --compile inductor`, the default where CMake found a
// shared libpython for RGPU_TORCH_PYTHON): a compiled graph (opserver/graph.h) is compiled at its
// first run by torch._inductor in a Python interpreter embedded in this process, and each later run
// calls the generated code instead of the graph's ops one by one (fused kernels: C++/OpenMP on
// --device cpu, Triton on cuda).
//
// The interpreter starts at the first graph a session compiles, in that session's process (never
// in the listening parent, which forks sessions), with the environment of the python CMake
// recorded (RGPU_OPSERVER_PYTHON overrides it), whose torch must be the one this program links.
// The GIL is held only around calls into Python. What cannot compile (no Python, a torch elsewhere,
// a graph Inductor refuses) runs op by op, as with --compile none; Session::graph_run decides.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "opserver/graph.h"

namespace rgpu::opserver {

// Whether this program embeds Python; when not, why (CMake's finding), for the log.
bool inductor_built();
const char* inductor_missing_reason();
// The python whose environment the interpreter takes (pyvenv.cfg, site-packages), as CMake
// recorded it from RGPU_TORCH_PYTHON; "" when not built.
const char* inductor_default_python();

// One graph's generated code: a Python callable, released with the GIL held.
class InductorProgram {
 public:
  explicit InductorProgram(void* fn) : fn_(fn) {}
  ~InductorProgram();
  InductorProgram(const InductorProgram&) = delete;
  InductorProgram& operator=(const InductorProgram&) = delete;
  void* callable() const { return fn_; }

 private:
  void* fn_;  // PyObject*
};

// A session's Inductor. Nothing of Python happens before the first compile().
class Inductor {
 public:
  explicit Inductor(std::string python) : python_(std::move(python)) {}

  // Inductor's code for graph g, compiled with these inputs as its example inputs; device maps a
  // client's device index to this server's device. nullptr with *why (one line, for the log) when
  // there is none: Python did not start (then no later graph of this session tries again) or
  // Inductor refused the graph.
  std::shared_ptr<InductorProgram> compile(uint64_t id, const Graph& g, const std::vector<c10::IValue>& inputs,
                                           const std::function<c10::Device(int)>& device, std::string* why);

  // Runs it: one IValue per graph result (a tensor, or None). An exception raised in the
  // generated code becomes a KindError (session.h) with its Python class's kind and message.
  std::vector<c10::IValue> run(const InductorProgram& p, const std::vector<c10::IValue>& inputs);

  // Python did not start: no graph of this session compiles.
  bool python_failed() const { return state_ == State::kFailed; }

 private:
  bool start(std::string* why);

  std::string python_;
  enum class State { kNotStarted, kRunning, kFailed } state_ = State::kNotStarted;
  std::string failed_why_;
  void* module_ = nullptr;  // PyObject*: opserver/inductor_compile.py
};

}  // namespace rgpu::opserver
