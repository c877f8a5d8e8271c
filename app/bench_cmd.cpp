// flashladder — app/bench_cmd.cpp: `flashladder check` (steps against the oracle, untimed: what
// compute-sanitizer runs) and `flashladder bench` (the benchmark of ladder.md: ceilings, the headline
// problem for every step with cuBLAS standard attention beside it, one decode problem, and the FA2 sweep).
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "app/record.hpp"
#include "reference/verify.hpp"
#include "app/commands.hpp"

namespace fl::cli {

namespace {

// The steps of a comma-separated list ("" or "all": every step). gpu_opt: the list is that option of
// bench, which times GPU steps; a CPU step named in it is refused (only "all" was filtered: --steps 01
// ran, and its CPU time was recorded under the GPU's environment).
std::vector<const Step*> pick(const std::string& list, const char* gpu_opt = nullptr) {
  std::vector<const Step*> out;
  if (list.empty() || list == "all") {
    for (const Step& s : ladder())
      if (!gpu_opt || s.gpu()) out.push_back(&s);
    return out;
  }
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    const Step* s = find_step(name);
    if (!s) throw Error("unknown step '" + name + "'; see 'flashladder steps'");
    if (gpu_opt && !s->gpu())
      throw Error(std::string(gpu_opt) + " " + s->folder + " runs on the CPU; the benchmark times GPU steps");
    out.push_back(s);
  }
  return out;
}

}  // namespace

int run_check(const ProblemOptions& po, const std::string& steps, bool backward, bool require_gpu) {
  Problem p0 = po.problem();
  Tally tally;
  std::string gpu_why;
  const bool have_gpu = gpu_device(&gpu_why).has_value();
  std::map<int, std::pair<Inputs, Expected>> cache;
  for (const Step* s : pick(steps)) {
    Problem p = p0;
    if (!s->gpu() && !s->supports_dtype(p.dtype)) p.dtype = DType::f32;
    const bool bwd = backward && s->backward;
    // A step that could not run is not a failure (a newcomer's `check` without a GPU passes on the
    // CPU steps), unless a GPU is required: Tally::finish decides.
    if (s->gpu() && !have_gpu) {
      std::cout << s->folder << ": not run: no GPU\n";
      ++tally.no_gpu;
      continue;
    }
    const std::string why = s->why_not(p);  // the line starts with the step's folder already
    if (!why.empty()) {
      std::cout << s->folder << ": not run: " << why << "\n";
      ++tally.refused;
      continue;
    }
    const int key = int(p.dtype);
    if (!cache.count(key)) {
      Inputs in = make_inputs(p, po.seed);
      Expected e = expected_for(in, backward);
      require_finite_baseline(in, e, backward);  // bad input (exit 2), not the step's failure
      cache.emplace(key, std::make_pair(std::move(in), std::move(e)));
    }
    auto& [in, e] = cache.at(key);
    try {
      Outputs got = run_step(*s, in, bwd);
      Verdict v = verify(in, got, e, bwd);
      std::cout << s->folder << ": " << (v.pass ? "pass" : "FAIL") << " (" << p.describe() << ", seed " << in.seed
                << ")\n";
      for (const Check& c : v.checks) std::cout << "  " << c.summary() << "\n";
      ++(v.pass ? tally.passed : tally.failed);
    } catch (const Error& err) {
      std::cout << s->folder << ": ERROR: " << err.what() << "\n";
      ++tally.errors;
    }
  }
  return tally.finish(true, gpu_why, gpu_required(require_gpu));
}

int run_bench(const BenchOptions& o) {
  // The step lists first: an unknown name was found after the ceilings (--steps) or the headline and
  // decode sections (--sweep-steps), minutes in, with records already written; without a GPU never.
  // A CPU step is refused here too, so that a machine without a GPU says so (tests/input_tests.cmake).
  pick(o.headline_steps, "--steps");
  pick(o.sweep_steps, "--sweep-steps");
  std::string why;
  auto dev = gpu_device(&why);
  if (!dev) throw Error("the benchmark needs a CUDA device: " + why);
  Environment env = gpu_environment();
  RecordFile json(o.json);
  // Every line out as soon as it is written: a bench cut short (run 235: a 240 s timeout in the decode
  // problem, stdout to a file) kept its records but none of its printed lines, which sat in the buffer.
  std::cout << std::unitbuf;
  auto emit = [&](nlohmann::json r) {
    r["suite"] = "bench";
    json.write(r);
  };
  std::cout << "flashladder bench on " << env.device << " (" << env.sm_count << " SMs, CUDA " << env.cuda << ", driver "
            << env.driver << "), commit " << env.commit << "\n"
            << "FLOPs: forward 4·B·H·Nq·Nk·d (halved when causal), backward 2.5x forward; median of " << o.time.reps
            << " timed launches after " << o.time.warmup << " warm-ups, inputs rotated past the L2.\n\n";

  // 1. Ceilings: cuBLAS GEMM 8192³ at fp16, bf16, fp32.
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    GemmResult g = cublas_gemm_rate(t, 8192, o.time);
    Problem gp;
    gp.B = gp.H = gp.H_kv = 1;
    gp.Nq = gp.Nk = gp.d = g.n;
    gp.dtype = t;
    nlohmann::json r = make_record("cublas_gemm", "gemm", gp, g.t, std::nullopt, env);
    r["tflops"] = g.tflops;
    r["note"] = "square n=8192 matrix product, 2·n³ FLOPs, fp32 accumulation; B/H/Nq/Nk/d are not an attention problem";
    emit(r);
    std::cout << "cublas_gemm " << dtype_name(t) << " 8192^3: " << std::fixed << std::setprecision(1) << g.tflops
              << " TFLOP/s\n";
  }

  // 2. The headline problem, every selected step, checked against the oracle and timed.
  auto time_row = [&](const Step& s, const Problem& p, bool bwd, std::optional<double> tol) {
    Stats st = time_step(s, p, bwd, o.time);
    nlohmann::json r = make_record(s.folder, bwd ? "bwd" : "fwd", p, st, tol, env);
    r["extra_bytes"] = extra_bytes(s, p, bwd);
    emit(r);
    return r;
  };
  for (DType t : o.headline_dtypes) {
    Problem hp;
    hp.B = 4; hp.H = hp.H_kv = 16; hp.Nq = hp.Nk = 4096; hp.d = 128; hp.dtype = t;
    std::cout << "\nheadline: " << hp.describe() << "\n";
    Inputs in = make_inputs(hp, o.seed);
    bool need_bwd = false;
    for (const Step* s : pick(o.headline_steps, "--steps")) need_bwd = need_bwd || s->has_backward();
    Expected e = expected_for(in, need_bwd);
    for (const Step* s : pick(o.headline_steps, "--steps")) {
      if (const std::string why = s->why_not(hp); !why.empty()) {
        std::cout << "  " << std::left << std::setw(22) << s->folder << " not run: " << why << "\n";
        continue;
      }
      for (bool bwd : {false, true}) {
        if (bwd && !s->has_backward()) continue;
        try {
          Verdict v = verify(in, run_step(*s, in, bwd), e, bwd);
          nlohmann::json r = time_row(*s, hp, bwd, v.tol_used);
          std::cout << "  " << std::left << std::setw(22) << (s->folder + (bwd ? " bwd" : "")) << std::right
                    << std::setw(10) << std::setprecision(3) << r["median_ms"].get<double>() << " ms "
                    << std::setw(8) << std::setprecision(1) << r["tflops"].get<double>() << " TFLOP/s  tol used "
                    << std::setprecision(0) << 100 * v.tol_used << "% " << (v.pass ? "" : "FAIL") << "\n";
          if (!v.pass)
            for (const Check& c : v.checks) std::cout << "    " << c.summary() << "\n";
        } catch (const Error& err) {
          std::cout << "  " << s->folder << ": ERROR: " << err.what() << "\n";
        }
      }
    }
    double tol = NAN;
    Stats st = cublas_attention_time(hp, o.time, &tol);
    nlohmann::json r = make_record("cublas_attention", "fwd", hp, st, std::nullopt, env);
    emit(r);
    std::cout << "  " << std::left << std::setw(22) << "cublas_attention" << std::right << std::setw(10)
              << std::setprecision(3) << st.median_ms << " ms " << std::setw(8) << std::setprecision(1)
              << r["tflops"].get<double>() << " TFLOP/s\n";
  }

  // 2b. One decode problem (issue 17): a single query row per head against a long KV cache, GQA
  //     (B = 16, H = 32, H_kv = 8, Nq = 1, Nk = 32768, d = 128, fp16). Every selected step, checked and
  //     timed; decoding is a memory problem, so the K+V bytes per second are printed and recorded
  //     (kv_bytes_per_s) beside TFLOP/s. This row is why step 10 (split-KV) exists.
  {
    Problem dp;
    dp.B = 16; dp.H = 32; dp.H_kv = 8; dp.Nq = 1; dp.Nk = 32768; dp.d = 128; dp.dtype = DType::f16;
    const double kv_bytes = 2.0 * double(dp.kv_elems()) * dtype_bytes(dp.dtype);
    std::cout << "\ndecode: " << dp.describe() << " (K+V " << std::setprecision(0) << kv_bytes / (1 << 20)
              << " MiB)\n";
    Inputs in = make_inputs(dp, o.seed);
    Expected e = expected_for(in, false);
    for (const Step* s : pick(o.headline_steps, "--steps")) {
      if (const std::string why = s->why_not(dp); !why.empty()) {
        std::cout << "  " << std::left << std::setw(22) << s->folder << " not run: " << why << "\n";
        continue;
      }
      try {
        Verdict v = verify(in, run_step(*s, in, false), e, false);
        Stats st = time_step(*s, dp, false, o.time);
        nlohmann::json r = make_record(s->folder, "fwd", dp, st, v.tol_used, env);
        r["extra_bytes"] = extra_bytes(*s, dp, false);
        r["kv_bytes"] = kv_bytes;
        r["kv_bytes_per_s"] = kv_bytes / (st.median_ms * 1e-3);
        emit(r);
        std::cout << "  " << std::left << std::setw(22) << s->folder << std::right << std::setw(10)
                  << std::setprecision(3) << st.median_ms << " ms " << std::setw(8) << std::setprecision(1)
                  << r["tflops"].get<double>() << " TFLOP/s " << std::setw(6) << std::setprecision(2)
                  << r["kv_bytes_per_s"].get<double>() / 1e12 << " TB/s of K+V  tol used " << std::setprecision(0)
                  << 100 * v.tol_used << "% " << (v.pass ? "" : "FAIL") << "\n";
        if (!v.pass)
          for (const Check& c : v.checks) std::cout << "    " << c.summary() << "\n";
      } catch (const Error& err) {
        std::cout << "  " << s->folder << ": ERROR: " << err.what() << "\n";
      }
    }
  }

  // 3. The FA2 sweep: hidden 2048 (H = 2048/d), B·N = 16384, N = 512 … 16384, d 64 and 128, causal
  //    off and on. Timed, not checked (the ragged tests and the headline check correctness).
  if (!o.sweep_steps.empty()) {
    std::cout << "\nFA2 sweep (TFLOP/s; fwd, and bwd where a step has one)\n";
    for (int64_t d : {64, 128})
      for (bool causal : {false, true}) {
        std::cout << "d=" << d << (causal ? " causal" : " full") << "\n";
        for (int64_t N = 512; N <= 16384; N *= 2) {
          Problem p;
          p.B = 16384 / N; p.H = p.H_kv = 2048 / d; p.Nq = p.Nk = N; p.d = d; p.causal = causal;
          p.dtype = DType::f16;
          std::cout << "  N=" << std::setw(5) << N << ":";
          for (const Step* s : pick(o.sweep_steps, "--sweep-steps")) {
            if (!s->refusal(p).empty()) continue;
            for (bool bwd : {false, true}) {
              if (bwd && !s->has_backward()) continue;
              try {
                nlohmann::json r = time_row(*s, p, bwd, std::nullopt);
                std::cout << " " << s->folder << (bwd ? "/bwd " : " ") << std::fixed << std::setprecision(1)
                          << r["tflops"].get<double>();
              } catch (const Error& err) {
                std::cout << " " << s->folder << " ERROR(" << err.what() << ")";
              }
            }
          }
          if (o.sweep_cublas) {
            try {
              Stats st = cublas_attention_time(p, o.time, nullptr);
              nlohmann::json r = make_record("cublas_attention", "fwd", p, st, std::nullopt, env);
              emit(r);
              std::cout << " cublas_attention " << std::setprecision(1) << r["tflops"].get<double>();
            } catch (const Error& err) {
              std::cout << " cublas_attention ERROR(" << err.what() << ")";
            }
          }
          std::cout << "\n" << std::flush;
        }
      }
  }
  json.close();
  return 0;
}

}  // namespace fl::cli
