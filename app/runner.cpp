// flashladder — app/runner.cpp: the CPU path, and dispatch to the GPU path.
#include "app/runner.hpp"

#include <cstring>
#include <mutex>
#include <sstream>

namespace fl {

namespace {

void refuse_if_needed(const Step& s, const Problem& p, bool backward) {
  std::string why = s.refusal(p);  // names the step itself
  if (!why.empty()) throw Error(why);
  if (backward && !s.has_backward()) throw Error("step " + s.folder + " has no backward pass");
  if (backward && p.deterministic && !s.deterministic_backward)
    throw Error("step " + s.folder + " has no deterministic backward (its dQ is summed with atomics in any "
                "order); run it without --deterministic, or use a step that has one (09c)");
}

// Runs f, and on an fl::Error puts the step's name on it: steps do not name themselves.
template <class F>
void in_cpu_step(const Step& s, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    throw Error(s.named(e.what()));
  }
}

// The variants' data for a CPU step: host pointers to the inputs' slopes and the problem's offsets
// (null where unused).
template <class Args>
void variant_args(Args& a, const Inputs& in) {
  auto ptr = [](const auto& v) { return v.empty() ? nullptr : v.data(); };
  a.alibi_slopes = ptr(in.alibi_slopes);
  a.cu_seqlens_q = ptr(in.p.cu_seqlens_q);
  a.cu_seqlens_k = ptr(in.p.cu_seqlens_k);
  a.seqused_k = ptr(in.p.seqused_k);
}

// A CPU step's buffers: fp32 host vectors, outputs and workspace poisoned with NaN.
struct CpuRun {
  const Step& s;
  const Problem& p;
  std::vector<float> o, lse, dq, dk, dv;
  std::vector<uint8_t> ws;

  CpuRun(const Step& st, const Problem& pr) : s(st), p(pr) {}

  void forward(const Inputs& in) {
    o = poisoned(p.q_elems());
    lse = poisoned(p.lse_elems());
    ws.assign(s.impl->workspace_bytes(p), 0xFF);  // 0xFF bytes are NaN in fp32
    ForwardArgs a{in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), ws.data(), nullptr};
    variant_args(a, in);
    in_cpu_step(s, [&] { s.impl->forward(p, a); });
  }

  void backward(const Inputs& in) {
    dq = poisoned(p.q_elems());
    dk = poisoned(p.kv_elems());
    dv = poisoned(p.kv_elems());
    ws.assign(s.impl->backward_workspace_bytes(p), 0xFF);
    BackwardArgs a{in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), in.dO.data(),
                   dq.data(), dk.data(), dv.data(), ws.data(), nullptr};
    variant_args(a, in);
    in_cpu_step(s, [&] { s.impl->backward(p, a); });
  }
};

}  // namespace

Outputs run_step(const Step& s, const Inputs& in, bool backward) {
  refuse_if_needed(s, in.p, backward);
  require_alibi_slopes(in.p, in.alibi_slopes);  // slopes of the wrong shape would be read past their end
  if (s.gpu()) return run_step_gpu(s, in, backward);
  CpuRun r(s, in.p);
  r.forward(in);
  Outputs out;
  if (backward) r.backward(in);
  out.o = std::move(r.o);
  out.lse = std::move(r.lse);
  out.dq = std::move(r.dq);
  out.dk = std::move(r.dk);
  out.dv = std::move(r.dv);
  return out;
}

Stats time_step(const Step& s, const Problem& p, bool backward, const TimeOptions& opt) {
  refuse_if_needed(s, p, backward);
  if (s.gpu()) return time_step_gpu(s, p, backward, opt);
  Inputs in = make_inputs(p, opt.seed);
  CpuRun r(s, p);
  if (backward) r.forward(in);
  std::vector<double> ms;
  Stopwatch total;
  for (int it = 0; it < opt.warmup + opt.reps; ++it) {
    Stopwatch w;
    backward ? r.backward(in) : r.forward(in);
    if (it >= opt.warmup) ms.push_back(w.ms());
    // Stop early on slow CPU runs, but never below 5 samples; Stats::reps records the real count. The
    // warm-ups stop there too (--warmup 2000000000 ran on past any limit before the first sample).
    if (it >= opt.warmup + 4 && total.ms() > 1000 * opt.max_seconds) break;
    if (it < opt.warmup - 1 && total.ms() > 1000 * opt.max_seconds) it = opt.warmup - 1;
  }
  return summarize(ms);
}

std::shared_ptr<const std::vector<Inputs>> timing_inputs(const Problem& p, uint64_t seed, int sets) {
  // Everything make_inputs reads: the problem as described (shapes, type, variants), the offsets and
  // lengths of a packed batch (which describe() only names), the seeds and the count.
  std::ostringstream key;
  key << p.describe() << "|seed " << seed << "|sets " << sets << "|q";
  for (int64_t x : p.cu_seqlens_q) key << ' ' << x;
  key << "|k";
  for (int64_t x : p.cu_seqlens_k) key << ' ' << x;
  key << "|used";
  for (int64_t x : p.seqused_k) key << ' ' << x;
  static std::mutex mu;
  static std::string cached_key;
  static std::shared_ptr<const std::vector<Inputs>> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (cached && cached_key == key.str()) return cached;
  cached.reset();  // the previous problem's sets are freed before this one's are drawn
  cached_key.clear();
  auto made = std::make_shared<std::vector<Inputs>>();
  for (int i = 0; i < sets; ++i) made->push_back(make_inputs(p, seed + uint64_t(i)));
  const size_t bytes = size_t(sets) * size_t(2 * p.q_elems() + 2 * p.kv_elems()) * sizeof(float);
  if (bytes <= kTimingInputsCacheBytes) {
    cached = made;
    cached_key = key.str();
  }
  return made;
}

size_t extra_bytes(const Step& s, const Problem& p, bool backward) {
  if (!s.impl) return 0;
  if (backward) return s.impl->backward_workspace_bytes ? s.impl->backward_workspace_bytes(p) : 0;
  return s.impl->workspace_bytes(p);
}

}  // namespace fl
