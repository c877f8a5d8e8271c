// flashladder — app/launch_probe.cpp: every GPU step's kernel launches, recorded without a GPU.
//
//   flashladder_launches            one JSON object per line: {"kernel": <mangled name>, "step": <folder>,
//                                   "threads": block size, "dynamic_smem": bytes, "problem": …}
//   flashladder_launches --splits   one JSON object per point of issue 17's decode sweep: the key splits S
//                                   that step 10 chooses on this stand-in's 132 SMs, read from its
//                                   workspace (scripts/splits_table.py writes step 10's table from it)
//
// scripts/resources_table.py writes each GPU step page's resources block from two things the build
// already has: ptxas's report of every kernel (registers, spills, static shared memory; the build
// keeps it beside each step's object, cmake/ptxas_report.sh) and this program's output. The dynamic
// shared memory and the block size of a launch are computed by the step's own launcher at run time
// (launch<T, d>() in each step's source), so no compiler report has them: this program runs every
// GPU step's forward and backward host code, for each storage type and head dim of its ladder entry
// and a few problems (square, causal and not; a decode problem; a long one), against a stand-in for
// the CUDA runtime defined below. Nothing is launched and no memory is touched: the device pointers
// are made-up aligned addresses, and each launch is recorded instead of run.
//
// It links the step objects, steps/ladder.cpp and the oracle library only, not libcudart: the
// functions below are the runtime's entry points that those objects call (`nm -u` lists them), with
// the runtime's own signatures (cuda_runtime_api.h, crt/host_runtime.h). The devices they describe are
// an H100 SXM (device 0) and an H200 (device 1): 132 SMs, compute capability 9.0, 227 KiB of opt-in
// shared memory per block, and each its memory (clock and bus width). The launchers ask for the SM
// count to choose a grid (step 10's split count), and steps 10 and 10b for the memory's peak, which
// chooses a grid (10b's blocks for the memory) and a ring (step 10's deep_ring: the H200's launches
// use kernels and shared memory that the H100's do not), so every problem is probed on both. A
// runtime entry point a step starts to use and this file lacks fails the link, naming it.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "common/problem.hpp"
#include "steps/ladder.hpp"

namespace {

std::map<const void*, std::string>& kernel_names() {  // host function → mangled device name
  static std::map<const void*, std::string> names;
  return names;
}

struct Launch {
  std::string kernel;
  unsigned threads;
  size_t smem;
  bool operator<(const Launch& o) const {
    return std::tie(kernel, threads, smem) < std::tie(o.kernel, o.threads, o.smem);
  }
};
std::set<Launch>* g_launches = nullptr;  // where the running step's launches go
int g_device = 0;                         // the stand-in device the launchers see: 0 an H100, 1 an H200
const char* const kDeviceNames[2] = {"H100", "H200"};

void record(const void* fun, dim3 block, size_t smem) {
  auto it = kernel_names().find(fun);
  const std::string name = it == kernel_names().end() ? "<unregistered>" : it->second;
  if (g_launches) g_launches->insert({name, block.x * block.y * block.z, smem});
}

dim3 g_grid, g_block;
size_t g_smem = 0;

CUresult CUDAAPI fake_encode_tiled(CUtensorMap* map, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  std::memset(map, 0, sizeof *map);
  return CUDA_SUCCESS;
}

}  // namespace

// --- The stand-in runtime ---------------------------------------------------------------------------
extern "C" {

void** CUDARTAPI __cudaRegisterFatBinary(void*) {
  static void* handle = nullptr;
  return &handle;
}
void CUDARTAPI __cudaRegisterFatBinaryEnd(void**) {}
void CUDARTAPI __cudaUnregisterFatBinary(void**) {}
void CUDARTAPI __cudaRegisterFunction(void**, const char* hostFun, char* deviceFun, const char*, int, uint3*, uint3*,
                                      dim3*, dim3*, int*) {
  kernel_names()[hostFun] = deviceFun;
}
unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st*) {
  g_grid = gridDim;
  g_block = blockDim;
  g_smem = sharedMem;
  return 0;
}
cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  *gridDim = g_grid;
  *blockDim = g_block;
  *sharedMem = g_smem;
  *static_cast<cudaStream_t*>(stream) = nullptr;
  return cudaSuccess;
}
cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t* kernel, const void* fun) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(fun));
  return cudaSuccess;
}
cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3, dim3 blockDim, void**, size_t sharedMem,
                                         cudaStream_t) {
  record(reinterpret_cast<const void*>(kernel), blockDim, sharedMem);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void**) {
  record(func, config->blockDim, config->dynamicSmemBytes);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  switch (attr) {
    case cudaDevAttrMemoryClockRate: *value = device == 1 ? 3201000 : 2619000; break;  // kHz, as nvidia-smi's max
    case cudaDevAttrGlobalMemoryBusWidth: *value = device == 1 ? 6016 : 5120; break;   // bits (H200: run 234)
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = 228 * 1024; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrL2CacheSize: *value = 50 << 20; break;
    default: *value = 0;
  }
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFuncSetAttribute(const void*, enum cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void*, int, size_t,
                                                                              unsigned int) {
  *numBlocks = 1;
  return cudaSuccess;
}
// Step 10b asks how many thread-block clusters of each size fit at once (one block per SM). The stand-in
// answers what the H100 and the H200 answered (10b's README, "How many clusters fit": runs 85, 89, 128,
// 129; run 229 printed the same): 132 of 1 block, 66 of 2, … 15 of 8, 9 of 9, and 7 (the GPCs that hold
// a cluster of 16) of every size from 10 to 16. Only the grid's split count depends on it, not a launch's
// block size or shared memory — but the split count picks 10b's kernels (its clusters of 9 or 8, blocks
// of 4 or 8 warps, step 10's kernels), so the stand-in must give the GPUs' numbers for the table to show
// their launches.
cudaError_t CUDARTAPI cudaOccupancyMaxActiveClusters(int* numClusters, const void*, const cudaLaunchConfig_t* config) {
  static const int hopper[17] = {0, 132, 66, 39, 30, 22, 17, 15, 15, 9, 7, 7, 7, 7, 7, 7, 7};
  int size = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) size = int(config->attrs[i].val.clusterDim.x);
  *numClusters = size >= 1 && size <= 16 ? hopper[size] : 0;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = size_t(80) << 30;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int,
                                                       unsigned long long,
                                                       enum cudaDriverEntryPointQueryResult* driverStatus) {
  const bool known = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  *funcPtr = known ? reinterpret_cast<void*>(&fake_encode_tiled) : nullptr;
  if (driverStatus) *driverStatus = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetLastError(void) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return cudaSuccess; }
const char* CUDARTAPI cudaGetErrorName(cudaError_t) { return "cudaErrorUnknown"; }
const char* CUDARTAPI cudaGetErrorString(cudaError_t) { return "(the launch probe's stand-in runtime)"; }

}  // extern "C"

// --- The probe ------------------------------------------------------------------------------------
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return out + "\"";
}

// A made-up device address, 1 MiB aligned, distinct per buffer.
void* fake(int i) { return reinterpret_cast<void*>(uintptr_t(0x7f0000000000) + (uintptr_t(i) << 32)); }

}  // namespace

// --splits: issue 17's sweep (H = 32, d = 128, fp16), S = step 10's workspace / one split's partial (1
// when it has none), as its rule chooses on the stand-in's 132 SMs.
int print_splits() {
  using namespace fl;
  const Step* s10 = nullptr;
  for (const Step& s : ladder())
    if (s.folder == "10_split_kv") s10 = &s;
  if (!s10 || !s10->impl) {
    std::cerr << "flashladder_launches --splits: step 10 is not in this build\n";
    return 1;
  }
  for (int64_t B : {1, 16, 64})
    for (int64_t H_kv : {8, 32})
      for (int64_t Nq : {1, 4})
        for (int64_t Nk : {1024, 8192, 32768, 131072}) {
          Problem p;
          p.B = B, p.H = 32, p.H_kv = H_kv, p.Nq = Nq, p.Nk = Nk, p.d = 128;
          p.dtype = DType::f16;
          const size_t per = size_t(p.lse_elems()) * size_t(p.d + 1) * sizeof(float);
          const size_t ws = s10->impl->workspace_bytes(p);
          std::cout << "{\"B\": " << B << ", \"H\": 32, \"H_kv\": " << H_kv << ", \"Nq\": " << Nq << ", \"Nk\": " << Nk
                    << ", \"d\": 128, \"sms\": 132, \"splits\": " << (ws == 0 ? 1 : ws / per);
          std::cout << "}\n";
        }
  return 0;
}

int main(int argc, char** argv) {
  using namespace fl;
  if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::cout << "flashladder_launches: every GPU step's kernel launches, recorded without a GPU (one JSON object\n"
                 "per launch: step, pass, kernel, threads, dynamic shared memory, problem, and the stand-in\n"
                 "device, an H100 or an H200, whose memory's peak chooses some of steps 10 and 10b's launches).\n"
                 "  --splits   step 10's key splits S over issue 17's decode sweep on a stand-in of 132 SMs\n";
    return 0;
  }
  // Output that never reached stdout (a full disk, a closed pipe) is an error: the table scripts read it.
  auto written = [](int rc) {
    std::cout.flush();
    if (std::cout) return rc;
    std::cerr << "flashladder_launches: error: writing to standard output failed (disk full or a closed pipe?)\n";
    return 2;
  };
  if (argc == 2 && std::strcmp(argv[1], "--splits") == 0) return written(print_splits());
  if (argc > 1) {
    std::cerr << "flashladder_launches: unknown argument '" << argv[1] << "' (none: every launch; --splits: step "
              << "10's key splits over issue 17's decode sweep)\n";
    return 2;
  }
  // Problems that reach every launch path of the ladder: square (causal and not), a decode problem
  // (step 10's split-KV path and merge), a long one (more splits, more blocks), MQA with 4 query
  // rows (step 10's tiles of 32 rows: 128 packed rows, split), and 32 K/V heads at B 1 (10b's own
  // clusters, with 2048 keys per split: on the H200 its deeper ring, deep_clusters), and 8 K/V heads of
  // 4 query heads at Nq 4 (8 tiles: on the H100 in 10b's clusters of 9; on the H200 in clusters of 8 of 8
  // warps, two_to_a_gpc and eight_warps — given the H200's own cluster counts and bus width, above), and
  // two unsplit grids of one block per SM with 8192 keys a tile (512 tiles of 1 row, 400 of 16: on the
  // H100 10b's rings with V ahead of K, v_ahead, swapped and not; on the H200 its blocks of 8 warps).
  struct Shape {
    int64_t B, H, H_kv, Nq, Nk;
  };
  const Shape shapes[] = {{2, 4, 2, 512, 512},  {1, 8, 2, 1, 32768},  {1, 8, 2, 4, 8192},   {1, 2, 1, 8192, 8192},
                          {1, 32, 1, 4, 32768}, {1, 32, 32, 1, 8192}, {1, 32, 8, 4, 8192}, {16, 32, 32, 1, 8192},
                          {50, 32, 8, 4, 8192}};
  // The variants' template bits (softcap, ALiBi, per-sequence lengths; 09d's window) select kernels of
  // their own: each combination a step lists is probed too, so every instantiation's launch is recorded.
  // Bits: 1 softcap, 2 ALiBi, 4 variable length, 8 seqused_k (alone: the [B][H][N][d] layout with
  // per-sequence keys), 16 a window of (100, 0).
  int refused = 0, ran = 0;
  for (g_device = 0; g_device < 2; ++g_device)  // the H100, then the H200: each step's launches on both
  for (const Step& s : ladder()) {
    if (!s.gpu() || !s.impl) continue;
    for (int var = 0; var < 32; ++var) {
      const unsigned need = (var & 1 ? kSoftcap : 0u) | (var & 2 ? kAlibi : 0u) | (var & 4 ? kVarlen : 0u) |
                            (var & 8 ? kSeqused : 0u) | (var & 16 ? kWindow : 0u);
      if ((need & ~s.variants) != 0 || ((var & 4) && (var & 8))) continue;
      for (DType t : s.dtypes)
        for (int64_t d : s.head_dims)
          for (const Shape& sh : shapes)
            for (bool causal : {false, true})
              for (bool bwd : {false, true}) {
                if (bwd && !s.has_backward()) continue;
                Problem p;
                p.B = sh.B, p.H = sh.H, p.H_kv = sh.H_kv, p.Nq = sh.Nq, p.Nk = sh.Nk, p.d = d;
                p.causal = causal;
                p.dtype = t;
                if (var & 1) p.softcap = 20.0;
                if (var & 2) p.alibi = Alibi::heads;
                if (var & 4) {  // B sequences of the shape's lengths, packed
                  p.cu_seqlens_q.assign(1, 0);
                  p.cu_seqlens_k.assign(1, 0);
                  for (int64_t b = 0; b < p.B; ++b) {
                    p.cu_seqlens_q.push_back(int32_t(p.cu_seqlens_q.back() + p.Nq));
                    p.cu_seqlens_k.push_back(int32_t(p.cu_seqlens_k.back() + p.Nk));
                  }
                }
                if (var & 8) p.seqused_k.assign(size_t(p.B), int32_t(p.Nk));
                if (var & 16) p.window_left = 100, p.window_right = 0;
                if (!p.invalid_reason().empty() || !s.why_not(p).empty()) {
                  ++refused;
                  continue;
                }
                std::set<Launch> launches;
                g_launches = &launches;
                const float* slopes = var & 2 ? static_cast<const float*>(fake(12)) : nullptr;
                const int32_t* cu_q = var & 4 ? static_cast<const int32_t*>(fake(13)) : nullptr;
                const int32_t* cu_k = var & 4 ? static_cast<const int32_t*>(fake(14)) : nullptr;
                const int32_t* used = var & 8 ? static_cast<const int32_t*>(fake(15)) : nullptr;
                try {
                  ForwardArgs fa{fake(1), fake(2), fake(3), fake(4), static_cast<float*>(fake(5)), fake(6), nullptr,
                                 slopes, cu_q, cu_k, used};
                  if (!bwd) {
                    s.impl->forward(p, fa);
                  } else {
                    BackwardArgs ba{fake(1), fake(2), fake(3), fake(4), static_cast<const float*>(fake(5)),
                                    fake(7), fake(8), fake(9), fake(10), fake(11), nullptr,
                                    slopes, cu_q, cu_k, used};
                    s.impl->backward(p, ba);
                  }
                } catch (const std::exception& e) {
                  std::cerr << "flashladder_launches: step " << s.folder << " (" << (bwd ? "backward" : "forward")
                            << ", " << p.describe() << "): " << e.what() << "\n";
                  return 1;
                }
                g_launches = nullptr;
                ++ran;
                for (const Launch& l : launches)
                  std::cout << "{\"step\": " << quoted(s.folder) << ", \"pass\": \"" << (bwd ? "bwd" : "fwd")
                            << "\", \"kernel\": " << quoted(l.kernel) << ", \"threads\": " << l.threads
                            << ", \"dynamic_smem\": " << l.smem << ", \"problem\": " << quoted(p.describe())
                            << ", \"device\": \"" << kDeviceNames[g_device] << "\"}\n";
              }
    }
  }
  if (const int rc = written(0)) return rc;
  std::cerr << "flashladder_launches: " << ran << " runs recorded, " << refused << " problems refused by a step\n";
  return ran > 0 ? 0 : 1;
}
