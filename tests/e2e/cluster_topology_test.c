/* CUBLASLT_1734DC26 slots 4 and 13 (client/dark_api/cluster_topology.cpp) called as cuBLASLt 13
 * calls them before its first clustered matmul: slot 4 (void **data, u64 *token) with a current
 * context, then slot 13 (data, token). One body, run through rgpu (shim -> server -> fake or real
 * driver) and directly against the real driver (cluster_topology_test_real): what cuBLASLt reads
 * must be there on both, one GPC index per TPC (multiprocessor count / 2 bytes). Prints the
 * token and the TPCs per GPC, so a run on the GPU shows what the real driver answers.
 * Usage: cluster_topology_test */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

typedef CUresult (*TopologyFn)(void** data, uint64_t* token);
typedef CUresult (*TopologyFreeFn)(void* data, uint64_t token);

static const CUuuid kTable = {{0x17, 0x34, (char)0xdc, 0x26, (char)0x80, 0x0d, 0x47, 0x45, (char)0x87, 0x26,
                               (char)0xc0, (char)0xf1, (char)0xe7, (char)0xdd, (char)0x8b, (char)0xca}};

int main(void) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  int sms = 0;
  CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));

  const void* const* table = NULL;
  CU(cuGetExportTable((const void**)&table, &kTable));
  if (!table) return 1;
  CHECK((uintptr_t)table[0] == 17 * sizeof(void*), "the table's size word is %zu, not 17 words", (size_t)(uintptr_t)table[0]);
  TopologyFn get = (TopologyFn)table[4];
  TopologyFreeFn release = (TopologyFreeFn)table[13];

  for (int round = 0; round < 2; ++round) {  /* cuBLASLt asks again for each cluster shape */
    void* data = NULL;
    uint64_t token = 0;
    CU(get(&data, &token));
    CHECK(data != NULL, "slot 4 handed out no data");
    if (!data) break;
    const uint8_t* gpc_of = data;
    int tpcs = sms / 2, per_gpc[256] = {0}, gpcs = 0;
    for (int t = 0; t < tpcs; ++t) {
      CHECK(gpc_of[t] < 32, "TPC %d: GPC %u is not a GPC index", t, gpc_of[t]);
      if (per_gpc[gpc_of[t]]++ == 0) ++gpcs;
    }
    CHECK(gpcs >= 1 && gpcs <= tpcs, "%d GPCs for %d TPCs", gpcs, tpcs);
    if (round == 0) {
      printf("cluster_topology_test: token %llu, %d TPCs in %d GPCs:", (unsigned long long)token, tpcs, gpcs);
      for (int g = 0; g < 256; ++g)
        if (per_gpc[g]) printf(" %d:%d", g, per_gpc[g]);
      printf("\ncluster_topology_test: bytes");
      for (int t = 0; t < tpcs; ++t) printf(" %u", gpc_of[t]);
      printf("\n");
    }
    CU(release(data, token));
  }

  CU(cuDevicePrimaryCtxRelease(dev));
  if (g_failures) {
    fprintf(stderr, "cluster_topology_test: %d of %d checks FAILED\n", g_failures, g_checks);
    return 1;
  }
  printf("cluster_topology_test: all %d checks passed\n", g_checks);
  return 0;
}
