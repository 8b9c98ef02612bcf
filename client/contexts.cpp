// Implementation of client/contexts.h.
#include "client/contexts.h"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace rgpu::client::contexts {
namespace {

std::mutex g_mu;
std::unordered_map<CUcontext, CUdevice>* g_devices = new std::unordered_map<CUcontext, CUdevice>();
thread_local std::vector<CUcontext> t_stack;

}  // namespace

void learn(CUcontext ctx, CUdevice dev) {
  std::lock_guard<std::mutex> lock(g_mu);
  (*g_devices)[ctx] = dev;
}

void forget(CUcontext ctx) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_devices->erase(ctx);
  }
  if (!t_stack.empty() && t_stack.back() == ctx) t_stack.pop_back();
}

CUcontext current() { return t_stack.empty() ? nullptr : t_stack.back(); }

void set_current(CUcontext ctx) {
  if (t_stack.empty()) {
    if (ctx) t_stack.push_back(ctx);
  } else if (ctx) {
    t_stack.back() = ctx;
  } else {
    t_stack.pop_back();
  }
}

void push(CUcontext ctx) { t_stack.push_back(ctx); }

CUcontext pop() {
  if (t_stack.empty()) return nullptr;
  CUcontext c = t_stack.back();
  t_stack.pop_back();
  return c;
}

bool device_of(CUcontext ctx, CUdevice* dev) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_devices->find(ctx);
  if (it == g_devices->end()) return false;
  *dev = it->second;
  return true;
}

}  // namespace rgpu::client::contexts
