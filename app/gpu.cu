// flashladder — app/gpu.cu: the GPU path of the runner (upload, poison, launch, check, time).
#include <algorithm>
#include <cstring>

#include "common/cuda.cuh"
#include "app/runner.hpp"

namespace fl {

std::optional<DeviceInfo> gpu_device(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    if (why) *why = no_device_reason(e);
    return std::nullopt;
  }
  int dev = 0;
  FL_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  FL_CUDA(cudaGetDeviceProperties(&prop, dev));
  DeviceInfo d;
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = size_t(prop.l2CacheSize);
  int rt = 0, drv = 0;
  FL_CUDA(cudaRuntimeGetVersion(&rt));
  FL_CUDA(cudaDriverGetVersion(&drv));
  d.cuda = std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10);
  d.driver = std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10);
  FL_CUDA(cudaMemGetInfo(&d.free_mem, &d.total_mem));
  return d;
}

namespace {

// Allocates b, and on failure says which buffer it was: the message then reads "step 05_fa2_lse
// (forward): cudaMalloc of Q: cannot allocate N bytes of device memory (F free of T): out of memory"
// (the step and the phase come from in_step below), so a request too large for the device names
// the step, the call, the tensor and the bytes.
void allocate(DeviceBuffer& b, size_t bytes, const char* what) {
  try {
    b.allocate(bytes);
  } catch (const Error& e) {
    throw Error(std::string("cudaMalloc of ") + what + ": " + e.what());
  }
}

// One set of a problem's tensors on the device, in the storage type; the variants' data (ALiBi slopes
// fp32, the varlen offsets and seqused_k int32) beside them when the problem uses them.
struct DeviceSet {
  DeviceBuffer q, k, v, dO, o, lse, dq, dk, dv;
  DeviceBuffer slopes, cu_q, cu_k, used_k;

  explicit DeviceSet(const Problem& p, bool backward) {
    const size_t e = size_t(dtype_bytes(p.dtype));
    allocate(q, e * p.q_elems(), "Q");
    allocate(k, e * p.kv_elems(), "K");
    allocate(v, e * p.kv_elems(), "V");
    allocate(o, e * p.q_elems(), "O");
    allocate(lse, 4 * size_t(p.lse_elems()), "L");
    if (backward) {
      allocate(dO, e * p.q_elems(), "dO");
      allocate(dq, e * p.q_elems(), "dQ");
      allocate(dk, e * p.kv_elems(), "dK");
      allocate(dv, e * p.kv_elems(), "dV");
    }
    allocate(slopes, 4 * size_t(p.alibi_elems()), "the ALiBi slopes");
    allocate(cu_q, 4 * p.cu_seqlens_q.size(), "cu_seqlens_q");
    allocate(cu_k, 4 * p.cu_seqlens_k.size(), "cu_seqlens_k");
    allocate(used_k, 4 * p.seqused_k.size(), "seqused_k");
  }

  void upload(const Inputs& in, bool backward) {
    auto put = [&](DeviceBuffer& b, const std::vector<float>& x) {
      std::vector<uint8_t> bytes = pack(in.p.dtype, x);
      FL_CUDA(cudaMemcpy(b.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    };
    put(q, in.q);
    put(k, in.k);
    put(v, in.v);
    if (backward) put(dO, in.dO);
    require_alibi_slopes(in.p, in.alibi_slopes);  // the buffer holds exactly p.alibi_elems() values
    auto raw = [&](DeviceBuffer& b, const auto& x) {
      if (!x.empty()) FL_CUDA(cudaMemcpy(b.get(), x.data(), b.bytes(), cudaMemcpyHostToDevice));
    };
    raw(slopes, in.alibi_slopes);
    raw(cu_q, in.p.cu_seqlens_q);
    raw(cu_k, in.p.cu_seqlens_k);
    raw(used_k, in.p.seqused_k);
  }

  // The variants' device pointers (null where the problem does not use them).
  template <class Args>
  Args with_variants(Args a) const {
    a.alibi_slopes = slopes.as<const float>();
    a.cu_seqlens_q = cu_q.as<const int32_t>();
    a.cu_seqlens_k = cu_k.as<const int32_t>();
    a.seqused_k = used_k.as<const int32_t>();
    return a;
  }
  ForwardArgs fwd(void* ws, cudaStream_t s) {
    return with_variants(ForwardArgs{q.get(), k.get(), v.get(), o.get(), lse.as<float>(), ws, s});
  }
  BackwardArgs bwd(void* ws, cudaStream_t s) {
    return with_variants(
        BackwardArgs{q.get(), k.get(), v.get(), o.get(), lse.as<float>(), dO.get(), dq.get(), dk.get(), dv.get(), ws, s});
  }
};

std::vector<float> download(const DeviceBuffer& b, DType t, int64_t n) {
  std::vector<uint8_t> bytes(size_t(n) * size_t(dtype_bytes(t)));
  FL_CUDA(cudaMemcpy(bytes.data(), b.get(), bytes.size(), cudaMemcpyDeviceToHost));
  return unpack(t, bytes.data(), n);
}

// Runs f, and on an fl::Error says which step it was in.
template <class F>
auto in_step(const Step& s, const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error("step " + s.folder + " (" + what + "): " + e.what());
  }
}

}  // namespace

Outputs run_step_gpu(const Step& s, const Inputs& in, bool backward) {
  std::string why;
  if (!gpu_device(&why)) throw Error("step " + s.folder + " needs a CUDA device: " + why);
  const Problem& p = in.p;
  return in_step(s, backward ? "backward" : "forward", [&] {
    DeviceSet d(p, backward);
    d.upload(in, backward);
    DeviceBuffer ws;
    allocate(ws, s.impl->workspace_bytes(p), "the forward's workspace");
    d.o.poison();
    d.lse.poison();
    ws.poison();
    s.impl->forward(p, d.fwd(ws.get(), nullptr));
    FL_CUDA(cudaGetLastError());
    FL_CUDA(cudaDeviceSynchronize());
    Outputs out;
    out.o = download(d.o, p.dtype, p.q_elems());
    out.lse = download(d.lse, DType::f32, p.lse_elems());
    if (backward) {
      DeviceBuffer bws;
      allocate(bws, s.impl->backward_workspace_bytes(p), "the backward's workspace");
      d.dq.poison();
      d.dk.poison();
      d.dv.poison();
      bws.poison();
      s.impl->backward(p, d.bwd(bws.get(), nullptr));
      FL_CUDA(cudaGetLastError());
      FL_CUDA(cudaDeviceSynchronize());
      out.dq = download(d.dq, p.dtype, p.q_elems());
      out.dk = download(d.dk, p.dtype, p.kv_elems());
      out.dv = download(d.dv, p.dtype, p.kv_elems());
    }
    return out;
  });
}

namespace {

// Spins one thread for `cycles` clocks of its SM.
__global__ void lead_in_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

}  // namespace

// The start event of a timed launch is recorded behind this spin, so that the GPU is still busy when
// the host has queued the call: the events then time the GPU's work. Without it the GPU sat idle at the
// start event while the host prepared the call (a step's argument checks, cudaFuncSetAttribute, a
// tensor map, a cluster launch's configuration), and a short call's time included the host's: run 302
// (H100, the ladder's decode row, B 1, H 32, H_kv 8, Nq 1, Nk 32768) timed 10b's call at 55 µs where
// compare_torch.py, whose launches have had the same lead-in since run 64 (its time_launches), timed
// the same kernels at 50.6 µs in run 300; with the spin, 51.1 µs (run 303, another H100). 2·10⁶ clocks,
// ~1 ms at 1.98 GHz, compare_torch's figure: longer than any host preparation it has to hide.
void gpu_lead_in() {
  lead_in_kernel<<<1, 1>>>(2'000'000);
  FL_CUDA(cudaGetLastError());
}

Stats time_step_gpu(const Step& s, const Problem& p, bool backward, const TimeOptions& opt) {
  std::string why;
  auto dev = gpu_device(&why);
  if (!dev) throw Error("step " + s.folder + " needs a CUDA device: " + why);
  return in_step(s, backward ? "timing backward" : "timing forward", [&] {
    // Enough input sets that one pass over them is over twice the L2: each launch then reads its
    // inputs from device memory, as a real model's attention layer would.
    const size_t e = size_t(dtype_bytes(p.dtype));
    const size_t set_bytes = e * size_t(p.q_elems() + 2 * p.kv_elems()) * (backward ? 2 : 1);
    const int sets = int(std::clamp<size_t>(2 * dev->l2_bytes / std::max<size_t>(set_bytes, 1) + 1, 1, 64));
    const auto host = timing_inputs(p, opt.seed, sets);  // shared with the previous step at this problem
    std::vector<DeviceSet> d;
    for (int i = 0; i < sets; ++i) {
      d.emplace_back(p, backward);
      d.back().upload((*host)[size_t(i)], backward);
    }
    DeviceBuffer ws, bws;
    allocate(ws, s.impl->workspace_bytes(p), "the forward's workspace");
    allocate(bws, backward ? s.impl->backward_workspace_bytes(p) : 0, "the backward's workspace");
    if (backward)
      for (auto& x : d) {  // each set's own O and L, from this step's forward
        ws.poison();
        s.impl->forward(p, x.fwd(ws.get(), nullptr));
        FL_CUDA(cudaGetLastError());
      }
    cudaEvent_t a, b;
    FL_CUDA(cudaEventCreate(&a));
    FL_CUDA(cudaEventCreate(&b));
    std::vector<double> ms;
    for (int it = 0; it < opt.warmup + opt.reps; ++it) {
      DeviceSet& x = d[size_t(it) % d.size()];
      if (backward) {
        bws.poison();  // the step must initialise what it accumulates into; poisoning is not timed
        gpu_lead_in();
        FL_CUDA(cudaEventRecord(a));
        s.impl->backward(p, x.bwd(bws.get(), nullptr));
      } else {
        ws.poison();
        gpu_lead_in();
        FL_CUDA(cudaEventRecord(a));
        s.impl->forward(p, x.fwd(ws.get(), nullptr));
      }
      FL_CUDA(cudaGetLastError());
      FL_CUDA(cudaEventRecord(b));
      FL_CUDA(cudaEventSynchronize(b));
      float t = 0;
      FL_CUDA(cudaEventElapsedTime(&t, a, b));
      if (it >= opt.warmup) ms.push_back(double(t));
    }
    FL_CUDA(cudaEventDestroy(a));
    FL_CUDA(cudaEventDestroy(b));
    FL_CUDA(cudaDeviceSynchronize());
    return summarize(ms);
  });
}

}  // namespace fl
