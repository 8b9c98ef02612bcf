/* Reads the real driver's cuGetProcAddress answers, for gen/proc_address.gen.txt (issue 3).
 * Run on a machine with the real driver (codegen/probe/run_procaddr_probe.sh does it):
 *   procaddr_probe LIBCUDA NAMES_FILE > proc_address.txt
 * For each base name in NAMES_FILE, each flag (0 default, 1 legacy stream, 2 per-thread stream)
 * and each CUDA version from 2000 to 13000 in steps of 10, asks cuGetProcAddress_v2 and maps the
 * pointer back to an exported symbol with dladdr. Prints one line per change of answer:
 *   name flags min_version symbol        (symbol "-" = not found, "?+0xOFF" = not exported)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*GetProcAddressV2)(const char*, void**, int, unsigned long long, int*);
typedef int (*Init)(unsigned);

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s LIBCUDA NAMES_FILE\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
    return 1;
  }
  GetProcAddressV2 gpa = (GetProcAddressV2)dlsym(lib, "cuGetProcAddress_v2");
  Init init = (Init)dlsym(lib, "cuInit");
  if (!gpa || !init) return 1;
  init(0);
  FILE* names = fopen(argv[2], "r");
  if (!names) return 1;
  char name[256];
  printf("# name flags min_version symbol (from %s)\n", argv[1]);
  while (fscanf(names, "%255s", name) == 1) {
    for (unsigned long long flags = 0; flags <= 2; ++flags) {
      char last[300] = "";
      for (int version = 2000; version <= 13000; version += 10) {
        void* fn = NULL;
        int status = -1;
        int rc = gpa(name, &fn, version, flags, &status);
        char sym[300];
        if (rc != 0 || status != 0 || !fn) {
          snprintf(sym, sizeof sym, "-");
        } else {
          Dl_info info;
          if (dladdr(fn, &info) && info.dli_sname && info.dli_saddr == fn)
            snprintf(sym, sizeof sym, "%s", info.dli_sname);
          else
            snprintf(sym, sizeof sym, "?+0x%lx",
                     (unsigned long)((uintptr_t)fn - (uintptr_t)(info.dli_fbase ? info.dli_fbase : 0)));
        }
        if (strcmp(sym, last) != 0) {
          printf("%s %llu %d %s\n", name, flags, version, sym);
          snprintf(last, sizeof last, "%s", sym);
        }
      }
    }
  }
  return 0;
}
