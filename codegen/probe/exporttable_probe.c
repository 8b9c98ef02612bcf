/* Lists the real driver's export tables that the CUDA 13 stack asks for: for each UUID, whether
 * the driver knows it, its first word (the size in bytes, for tables that have one) and which
 * of the following slots are filled. Run on a machine with the real driver:
 *   exporttable_probe LIBCUDA */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef int (*GetExportTable)(const void**, const unsigned char*);
typedef int (*Init)(unsigned);

static const char* kUuids[] = {
    "f8cff95121468b4eb9e2fb469e7c0dd9", "6bd5fb6c5bf4e74a8987d93912fd9df9", "a094798c2e742e7493f20800200c0a66",
    "42d85a8123f6cb478298f6e78a3aecdc", "c693336e1121df11a8c368f355d89593", "263e88607cd2614392f6bbd5006dfa7e",
    "d4082055bde6704b8d34ba123c66e1f2", "21318c60971432488ca641ff7324c8f2", "1734dc26800d47458726c0f1e7dd8bca",
    "da9151d33ae6cc41a5c04f26d533e328", "6e163fbeb958444d835ce182aff1991e", "0ca50b8c1004929a89a7d0df10e77286",
    "195bcbf4d67d024aacc51d29cea631ae", "b10541e1f7c7c74a9f64f223be99f1e2",
};

int main(int argc, char** argv) {
  void* lib = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW);
  if (!lib) return 1;
  ((Init)dlsym(lib, "cuInit"))(0);
  GetExportTable get = (GetExportTable)dlsym(lib, "cuGetExportTable");
  for (unsigned i = 0; i < sizeof kUuids / sizeof kUuids[0]; ++i) {
    unsigned char id[16];
    for (int b = 0; b < 16; ++b) sscanf(kUuids[i] + 2 * b, "%2hhx", &id[b]);
    const void* table = NULL;
    int rc = get(&table, id);
    if (rc != 0 || !table) {
      printf("%s rc=%d\n", kUuids[i], rc);
      continue;
    }
    const uintptr_t* w = table;
    printf("%s rc=0 word0=0x%lx", kUuids[i], (unsigned long)w[0]);
    unsigned n = (w[0] > 0 && w[0] < 4096 && w[0] % 8 == 0) ? (unsigned)(w[0] / 8) : 16;
    printf(" filled:");
    for (unsigned s = 1; s < n; ++s) printf("%s", w[s] ? "1" : "0");
    printf("\n");
  }
  return 0;
}
