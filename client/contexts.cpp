// Implementation of client/contexts.h.
#include "client/contexts.h"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace rgpu::client::contexts {
namespace {

std::mutex g_mu;
std::unordered_map<CUcontext, CUdevice>* g_devices = new std::unordered_map<CUcontext, CUdevice>();
// Each thread's stack is allocated on first use and never destroyed: thread_local objects die
// before the exit handlers that still call the driver.
thread_local std::vector<CUcontext>* t_stack_ptr = nullptr;
std::vector<CUcontext>& stack() {
  if (!t_stack_ptr) t_stack_ptr = new std::vector<CUcontext>();
  return *t_stack_ptr;
}

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
  if (!stack().empty() && stack().back() == ctx) stack().pop_back();
}

CUcontext current() { return stack().empty() ? nullptr : stack().back(); }

void set_current(CUcontext ctx) {
  if (stack().empty()) {
    if (ctx) stack().push_back(ctx);
  } else if (ctx) {
    stack().back() = ctx;
  } else {
    stack().pop_back();
  }
}

void push(CUcontext ctx) { stack().push_back(ctx); }

CUcontext pop() {
  if (stack().empty()) return nullptr;
  CUcontext c = stack().back();
  stack().pop_back();
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
