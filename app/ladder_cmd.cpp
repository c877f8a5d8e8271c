// flashladder — app/ladder_cmd.cpp: the ladder table, the step list and the step diff.
#include <Eigen/Dense>
#include <charconv>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <tuple>

#include <sys/wait.h>  // WIFEXITED: the status std::system returns
#include <unistd.h>    // getpid: the name of the lab copies' folder

#include "app/record.hpp"
#include "reference/verify.hpp"
#include "app/commands.hpp"

namespace fl::cli {

namespace fs = std::filesystem;

namespace {

bool all_digits(const std::string& s, size_t from) {
  return from < s.size() && s.find_first_not_of("0123456789", from) == std::string::npos;
}

// The offsets and lengths of variable length are int32 (FlashAttention's cu_seqlens); CLI11 says only
// "Could not convert" for a value beyond that.
CLI::Validator fits_int32(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) -> std::string {
        const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+');
        if (!all_digits(s, sign)) return "";  // not a number: CLI11's own conversion error names it
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data() + (s[0] == '+'), s.data() + s.size(), v, 10);
        if (ec == std::errc() && end == s.data() + s.size() && v >= INT32_MIN && v <= INT32_MAX) return "";
        return s + " is not allowed: the " + what + " must fit in int32 (<= 2^31 - 1 = 2147483647)";
      },
      "");
}

}  // namespace

CLI::Validator fits_integer(int digits, bool is_signed) {
  return CLI::Validator(
      [digits, is_signed](std::string& s) -> std::string {
        const bool negative = !s.empty() && s[0] == '-';
        const size_t sign = negative || (!s.empty() && s[0] == '+');
        const bool hex = s.size() > sign + 1 && s[sign] == '0' && (s[sign + 1] == 'x' || s[sign + 1] == 'X');
        const size_t from = sign + (hex ? 2 : 0);
        if (from >= s.size() || s.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789", from) != std::string::npos)
          return "";  // not a number: CLI11's own conversion error names it
        uint64_t magnitude = 0;
        const auto [end, ec] = std::from_chars(s.data() + from, s.data() + s.size(), magnitude, hex ? 16 : 10);
        const uint64_t most = digits >= 64 ? UINT64_MAX : (uint64_t(1) << digits) - 1;
        if (ec == std::errc() && magnitude <= (negative ? (is_signed ? most + 1 : 0) : most)) return "";
        const std::string bits = std::to_string(digits);
        return s + " is not allowed: it must be an integer from " + (is_signed ? "-2^" + bits : std::string("0")) +
               " to 2^" + bits + " - 1 = " + std::to_string(most);
      },
      "");
}

void ProblemOptions::add_to(CLI::App& app) {
  batch_opt = app.add_option("-B,--batch", B, "Batch size B (with --cu-seqlens-q: the number of sequences)")->capture_default_str();
  app.add_option("-H,--heads", H, "Query heads H")->capture_default_str();
  app.add_option("--heads-kv", H_kv, "Key/value heads H_kv (H must be a multiple); default H");
  seq_opt = app.add_option("-N,--seq", N, "Sequence length: Nq = Nk = N unless --nq/--nk say otherwise")->capture_default_str();
  app.add_option("--nq", Nq, "Query length Nq (default N)");
  app.add_option("--nk", Nk, "Key length Nk (default N)");
  app.add_option("-d,--head-dim", d, "Head dimension d")->capture_default_str();
  app.add_flag("--causal", causal, "Causal mask, aligned bottom-right (query i sees key j iff j <= i + Nk - Nq)");
  std::string det_steps;  // the ladder's list, so the help cannot go stale
  for (const Step& s : ladder())
    if (s.deterministic_backward) det_steps += (det_steps.empty() ? "" : ", ") + s.number;
  app.add_flag("--deterministic", deterministic,
               "Backward in a fixed order of dQ additions: bitwise-reproducible dQ, dK, dV (steps that have it: " +
                   det_steps + ")");
  app.add_option("--scale", scale, "Softmax scale (default 1/sqrt(d))");
  // The variants (docs/variants.md).
  app.add_option("--window", window,
                 "Sliding window L,R: query i sees key j iff i+Nk-Nq-L <= j <= i+Nk-Nq+R; -1 = unbounded on that side "
                 "(causal is -1,0; intersected with --causal)")
      ->delimiter(',')
      ->expected(2);
  app.add_option("--softcap", softcap, "Logit soft-capping c > 0: scores become c*tanh(scale*q.k/c) before the softmax");
  app.add_option("--alibi", alibi,
                 "ALiBi biases -slope*|i+Nk-Nq-j|: 'heads' (fp32 slopes [H], the paper's geometric ones) or "
                 "'batch_heads' ([B][H], seeded)");
  app.add_option("--cu-seqlens-q", cu_seqlens_q,
                 "Variable length: B+1 cumulative query offsets a,b,c,... (from 0; Q, O packed as [total_q][H][d]); "
                 "needs --cu-seqlens-k. -B then defaults to the number of sequences, --nq/--nk to the longest")
      ->delimiter(',')
      ->check(fits_int32("offsets"));
  app.add_option("--cu-seqlens-k", cu_seqlens_k, "Variable length: B+1 cumulative key offsets (K, V packed as [total_k][H_kv][d])")
      ->delimiter(',')
      ->check(fits_int32("offsets"));
  app.add_option("--seqused-k", seqused_k,
                 "Keys each sequence uses, B values (a KV cache filled to different lengths); with or without varlen")
      ->delimiter(',')
      ->check(fits_int32("key counts"));
  app.add_option("--dtype", dtype, "Storage type of GPU steps: fp16, bf16 or fp32 (CPU steps use fp32)")
      ->capture_default_str();
  // CLI11 converts "-1" to 2^64 - 1 for an unsigned option; a seed is refused unless it is written
  // as a plain non-negative integer.
  app.add_option("--seed", seed, "Seed of the random inputs, an integer from 0 to 2^64 - 1")
      ->capture_default_str()
      ->transform(CLI::Validator(
          [](std::string& s) -> std::string {
            // Parsed here, in decimal, and handed on in canonical form: CLI11 itself would read a
            // leading 0 as octal (010 -> 8) and saturate 2^64 and above to 2^64 - 1, silently
            // running another seed than the one asked for.
            uint64_t v = 0;
            const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
            if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || ec != std::errc() ||
                end != s.data() + s.size())
              return "seed '" + s + "' is not allowed: it must be an integer from 0 to 2^64 - 1";
            s = std::to_string(v);
            return "";
          },
          "UINT64"));
}

void decimal_integers(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();  // "INT", "UINT", then ":validator" descriptions
    const std::string base = type.substr(0, type.find(':'));
    if (o->get_type_size() == 0) continue;  // a flag
    // An empty value is not a number: -B "" read as B = 0, --seqused-k "" as one 0, --scale "" and
    // --softcap "" were dropped without a word. Nor is it a path or a list: --json "" wrote no records
    // and exited 0, --steps "" ran every step, ring --step "" took the default; --out "" failed later
    // with a path of nothing. No option of the program means anything by it.
    o->transform(CLI::Validator(
        [](std::string& s) -> std::string { return s.empty() ? "an empty value is not allowed: give a value" : ""; },
        ""));
    if (base != "INT" && base != "UINT") continue;  // not an integer
    // Before every other validator (a range converts the text too): leading zeros of a decimal number
    // are dropped, so 010 is 10. 0x.. and 0b.. are left to CLI11: a prefix says its base.
    o->transform(CLI::Validator(
        [](std::string& s) -> std::string {
          const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+');
          size_t i = sign;
          while (i + 1 < s.size() && s[i] == '0') ++i;
          if (i > sign && all_digits(s, sign)) s.erase(sign, i - sign);
          return "";
        },
        ""));
    // After the option's own validators (a range names its own limit): text beyond 64 bits is refused as
    // typed. An int option, which CLI11 also calls "INT", takes fits<int>() itself.
    o->check(base == "INT" ? fits<int64_t>() : fits<uint64_t>());
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) decimal_integers(*sub);
}

Problem ProblemOptions::problem() const {
  Problem p;
  p.B = B;
  p.H = H;
  // An option given explicitly is judged as given, named as the user wrote it.
  for (auto [name, what, v] : {std::tuple{"--heads-kv", "key/value heads H_kv", H_kv},
                               std::tuple{"--nq", "query length Nq", Nq}, std::tuple{"--nk", "key length Nk", Nk}})
    if (v && *v < 1)
      throw Error(std::string(name) + " " + std::to_string(*v) + " is not allowed: the " + what +
                  " must be at least 1 (leave the option out for the default)");
  p.H_kv = H_kv.value_or(H);
  p.Nq = Nq.value_or(N);
  p.Nk = Nk.value_or(N);
  p.d = d;
  // The variants; Problem::validate() below judges their values, naming the field.
  if (!window.empty()) {
    if (window.size() != 2) throw Error("--window takes two numbers L,R (-1 = unbounded), e.g. --window 256,0");
    p.window_left = window[0];
    p.window_right = window[1];
  }
  p.softcap = softcap;
  if (!alibi.empty()) {
    const auto a = parse_alibi(alibi);
    if (!a || *a == Alibi::none) throw Error("--alibi '" + alibi + "' is not allowed: use heads or batch_heads");
    p.alibi = *a;
  }
  p.cu_seqlens_q = cu_seqlens_q;
  p.cu_seqlens_k = cu_seqlens_k;
  p.seqused_k = seqused_k;
  if (!cu_seqlens_q.empty() && !cu_seqlens_k.empty()) {
    // Variable length: B is the number of sequences, and Nq, Nk (the longest a sequence may be)
    // default to the longest sequences given.
    for (auto [name, cu] : {std::pair{"--cu-seqlens-q", &cu_seqlens_q}, std::pair{"--cu-seqlens-k", &cu_seqlens_k}})
      if (cu->size() < 2)
        throw Error(std::string(name) + " has " + std::to_string(cu->size()) +
                    " offset(s); it needs B + 1 >= 2 (0, then the end of each sequence)");
    const int64_t n = int64_t(cu_seqlens_q.size()) - 1;
    if (batch_opt && batch_opt->count() > 0 && B != n)
      throw Error("-B " + std::to_string(B) + " disagrees with --cu-seqlens-q, which gives " + std::to_string(n) +
                  " sequence(s) (B + 1 offsets); leave -B out with variable length");
    p.B = n;
    const bool n_given = seq_opt && seq_opt->count() > 0;
    auto longest = [](const std::vector<int32_t>& cu) {
      int64_t m = 1;
      for (size_t b = 1; b < cu.size(); ++b) m = std::max<int64_t>(m, int64_t(cu[b]) - cu[b - 1]);
      return m;
    };
    if (!Nq && !n_given) p.Nq = longest(cu_seqlens_q);
    if (!Nk && !n_given) p.Nk = longest(cu_seqlens_k);
  }
  p.causal = causal;
  p.deterministic = deterministic;
  p.scale = scale;  // a NaN, zero or negative scale is refused by validate(), with the reason
  auto t = parse_dtype(dtype);
  if (!t) throw Error("unknown storage type '" + dtype + "': use fp16, bf16 or fp32");
  p.dtype = *t;
  p.validate();
  return p;
}

bool gpu_required(bool flag) {
  const char* v = std::getenv("FLASHLADDER_REQUIRE_GPU");
  return flag || (v && *v && std::string(v) != "0");
}

int Tally::finish(bool checked_run, const std::string& gpu_why, bool require_gpu) const {
  std::ostringstream s;
  auto part = [&](int n, const std::string& what) {
    if (n) s << (s.tellp() > 0 ? ", " : "") << n << " " << what;
  };
  part(passed, "passed");
  part(failed, "FAILED");
  part(unchecked, "ran unchecked");
  part(errors, "ERROR");
  part(no_gpu, "not run: no GPU");
  part(refused, "not run: refused for this problem");
  std::cout << "\nsteps: " << s.str() << "\n";
  if (no_gpu) std::cout << "no GPU: " << gpu_why << "\n";
  const bool ran = passed + failed + unchecked + errors > 0;
  if (failed || errors) {
    std::cout << (checked_run ? "SOME CHECKS FAILED" : "Some steps hit an ERROR") << " (details above)\n";
    return 1;
  }
  if (no_gpu && require_gpu) {
    std::cout << "A GPU is required (--require-gpu or FLASHLADDER_REQUIRE_GPU): " << no_gpu
              << " GPU step(s) could not run\n";
    return 1;
  }
  if (!ran) {
    std::cout << "no step ran: nothing was checked\n";
    return 1;
  }
  std::cout << (checked_run ? "all checks passed" : "every step that ran completed (unchecked: --no-check)")
            << (no_gpu + refused ? " (steps not run are listed above)" : "") << "\n";
  return 0;
}

namespace {

std::vector<const Step*> select_steps(const std::string& list) {
  std::vector<const Step*> out;
  if (list.empty()) {
    for (const Step& s : ladder()) out.push_back(&s);
    return out;
  }
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    const Step* s = find_step(name);
    if (!s) {
      std::string known;
      for (const Step& k : ladder()) known += " " + k.folder;
      throw Error("unknown step '" + name + "'; the steps are:" + known);
    }
    out.push_back(s);
  }
  return out;
}

std::string bytes_text(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  std::ostringstream s;
  s << std::fixed << std::setprecision(b < 10 && u ? 1 : 0) << b << " " << unit[u];
  return s.str();
}

std::string num(double x, int prec) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(prec) << x;
  return s.str();
}

// Eigen's own float matrix product, n×n×n, timed like a CPU step: the CPU rows' ceiling.
double eigen_gemm_gflops(int n, const TimeOptions& opt, Stats* st) {
  using M = Eigen::MatrixXf;
  M a = M::Random(n, n), b = M::Random(n, n), c(n, n);
  std::vector<double> ms;
  Stopwatch total;
  for (int it = 0; it < opt.warmup + opt.reps; ++it) {
    Stopwatch w;
    c.noalias() = a * b;
    if (it >= opt.warmup) ms.push_back(w.ms());
    if (it >= opt.warmup + 4 && total.ms() > 1000 * opt.max_seconds) break;
    if (it < opt.warmup - 1 && total.ms() > 1000 * opt.max_seconds) it = opt.warmup - 1;  // as time_step
  }
  *st = summarize(ms);
  return 2.0 * n * double(n) * n / (st->median_ms * 1e-3) / 1e9;
}

struct Row {
  std::string step, change, dtype, status;
  double ms = NAN, tflops = NAN, ceiling_frac = NAN, speedup = NAN, max_err = NAN, tol_used = NAN;
  double kv_bytes_per_s = NAN;  // the decode row's measure: K+V bytes over the median time
  size_t extra = 0;
  bool ran = false, checked = false, pass = true;
};

// The default run's decode row (issue 17): one query row per head against a 32768-key cache, B 1, H 32,
// H_kv 8, d 128, fp16 — issue 17's sweep point where a prefill grid is smallest (B·H = 32 blocks), 128 MiB
// of K and V: small enough for the CPU oracle and a CPU-only machine's two CPU rows (~40 ms each).
Problem decode_problem() {
  Problem p;
  p.B = 1; p.H = 32; p.H_kv = 8; p.Nq = 1; p.Nk = 32768; p.d = 128; p.dtype = DType::f16;  // as bench's, B 1
  return p;
}

// decode: the decode row's table, where K+V bytes per second stand in for the share of the GEMM ceiling
// (a call that does ~1 multiply-add per byte of K and V is measured by how fast it reads them).
void print_table(const std::vector<Row>& rows, bool decode = false) {
  std::cout << std::left << std::setw(24) << "step" << std::right << std::setw(6) << "type" << std::setw(11)
            << "median ms" << std::setw(10) << "TFLOP/s" << std::setw(9) << (decode ? "K+V TB/s" : "%ceil")
            << std::setw(9) << "speedup"
            << std::setw(12) << "extra mem" << std::setw(11) << "max err" << std::setw(9) << "tol used"
            << "  the one idea\n";
  for (const Row& r : rows) {
    std::cout << std::left << std::setw(24) << r.step << std::right << std::setw(6) << r.dtype;
    if (!r.ran) {
      std::cout << "  " << r.status << "\n";
      continue;
    }
    std::cout << std::setw(11) << num(r.ms, r.ms < 10 ? 3 : 1) << std::setw(10) << num(r.tflops, 3)
              << std::setw(9)
              << (decode ? num(r.kv_bytes_per_s / 1e12, 2)
                         : std::isnan(r.ceiling_frac) ? "-" : num(100 * r.ceiling_frac, 1) + "%")
              << std::setw(9) << (std::isnan(r.speedup) ? "-" : num(r.speedup, 2) + "x") << std::setw(12)
              << bytes_text(double(r.extra));
    if (r.checked)
      std::cout << std::setw(11) << [&] { std::ostringstream s; s << std::setprecision(2) << r.max_err; return s.str(); }()
                << std::setw(9) << (num(100 * r.tol_used, 0) + "%");
    else
      std::cout << std::setw(11) << "unchecked" << std::setw(9) << "-";
    std::cout << "  " << (r.pass ? "" : "FAIL ") << r.change << "\n";
  }
}

}  // namespace

int run_ladder(const LadderOptions& o) {
  const Problem base = o.prob.problem();
  if (o.time.reps < 1) throw Error("--reps must be at least 1");
  if (o.time.warmup < 0) throw Error("--warmup must be at least 0");
  std::vector<const Step*> steps = select_steps(o.steps);
  std::vector<int64_t> Ns = o.sweep;
  for (int64_t n : Ns)
    if (n < 1) throw Error("--sweep: sequence length " + std::to_string(n) + " is not allowed; it must be >= 1");
  // Every point is judged before any is run (a bad one used to stop the sweep half-way with exit 1, or
  // a packed batch's points were dropped or run as its longest sequence).
  if (!Ns.empty() && (base.varlen() || !base.seqused_k.empty()))
    throw Error(std::string("--sweep sets Nq = Nk = N: it cannot sweep a problem with ") +
                (base.varlen() ? "--cu-seqlens-q/--cu-seqlens-k (each sequence's length is given)"
                               : "--seqused-k (the keys each sequence uses are given)"));
  for (int64_t n : Ns) {
    Problem p = base;
    p.Nq = p.Nk = n;
    const std::string why = p.invalid_reason();
    if (!why.empty()) throw Error("--sweep point N = " + std::to_string(n) + ": " + why);
  }

  std::string gpu_why;
  const bool have_gpu = gpu_device(&gpu_why).has_value();
  Environment env = have_gpu ? gpu_environment() : cpu_environment();
  Environment cpu_env = cpu_environment();
  bool any_cpu = false, any_gpu = false;
  for (const Step* s : steps) (s->gpu() ? any_gpu : any_cpu) = true;

  RecordFile json(o.json);
  auto emit = [&](const nlohmann::json& r) { json.write(r); };

  std::cout << "flashladder: " << (have_gpu ? env.device + " (" + std::to_string(env.sm_count) + " SMs, CUDA " + env.cuda + ", driver " + env.driver + ")" : "no GPU: " + gpu_why)
            << "; CPU " << cpu_env.device << "; commit " << env.commit << "\n";

  // Ceilings measured in this run: Eigen's float GEMM for CPU rows, cuBLAS fp16 GEMM for GPU rows.
  double eigen_gflops = NAN, cublas_tflops = NAN;
  if (any_cpu) {
    Stats st;
    TimeOptions g = o.time;
    g.max_seconds = 5;
    eigen_gflops = eigen_gemm_gflops(2048, g, &st);
    std::cout << "ceiling (CPU): Eigen float GEMM 2048x2048x2048: " << num(eigen_gflops, 1) << " GFLOP/s (median of "
              << st.reps << ")\n";
    Problem gp;
    gp.B = gp.H = gp.H_kv = 1; gp.Nq = gp.Nk = 2048; gp.d = 2048; gp.dtype = DType::f32;
    nlohmann::json r = make_record("eigen_gemm", "gemm", gp, st, std::nullopt, cpu_env);
    r["tflops"] = eigen_gflops / 1000;
    r["note"] = "square 2048 float product, 2·n³ FLOPs; B, H, Nq, Nk, d describe no attention problem";
    emit(r);
  }
  if (any_gpu && have_gpu) {
    GemmResult g = cublas_gemm_rate(base.dtype == DType::f32 ? DType::f32 : base.dtype, 8192, o.time);
    cublas_tflops = g.tflops;
    std::cout << "ceiling (GPU): cuBLAS " << dtype_name(base.dtype) << " GEMM 8192^3: " << num(g.tflops, 1)
              << " TFLOP/s (median of " << g.t.reps << ")\n";
  }
  std::cout << "FLOPs: forward 4·B·H·Nq·Nk·d (halved when causal), backward 2.5x forward. Times: median of --reps "
            << o.time.reps << " after " << o.time.warmup << " warm-ups.\n";

  // The problems: the one asked (or each point of the sweep), then the decode row where o.decode asks
  // for it (app/flashladder.cpp: by default, a run given no problem option and no --sweep).
  std::vector<Problem> problems;
  if (Ns.empty()) problems.push_back(base);
  for (int64_t N : Ns) {
    problems.push_back(base);
    problems.back().Nq = problems.back().Nk = N;
  }
  if (o.decode) problems.push_back(decode_problem());
  Tally tally;
  for (size_t pi = 0; pi < problems.size(); ++pi) {
    const Problem& p0 = problems[pi];
    const bool decode = o.decode && pi + 1 == problems.size();
    const double kv_bytes = 2.0 * double(p0.kv_elems()) * dtype_bytes(p0.dtype);
    if (decode)
      std::cout << "\ndecode: " << p0.describe() << " (K+V " << num(kv_bytes / (1 << 20), 0) << " MiB; --no-decode "
                << "leaves this out)\n"
                << "One query row per head against a long KV cache: about one multiply-add per byte of K and V, so a\n"
                   "step is measured by the K+V bytes it reads per second. Steps 05 to 09f give each (batch, head,\n"
                   "block of query rows) one thread block: "
                << p0.B * p0.H << " blocks here"
                << (have_gpu ? " for " + std::to_string(env.sm_count) + " SMs" : std::string())
                << ", each reading its head's K and V\nalone; steps 10 and 10b split the keys too, and read K and V "
                   "once per group of query heads.\n";
    else
      std::cout << "\nproblem: " << p0.describe() << "\n";
    std::map<int, Expected> expected;  // by storage type
    std::map<int, Inputs> inputs;
    std::vector<Row> rows;
    double prev_ms = NAN;
    for (bool bwd : {false, true}) {
      if (bwd && (!o.backward || decode)) break;  // decoding is inference: the decode row has no backward
      for (const Step* s : steps) {
        if (bwd && !s->has_backward()) continue;
        Row r;
        Problem p = p0;
        if (!s->supports_dtype(p.dtype) && !s->gpu()) p.dtype = DType::f32;  // CPU steps are fp32
        r.step = s->folder + (bwd ? " bwd" : "");
        r.change = s->change;
        r.dtype = dtype_name(p.dtype);
        // One wording for every GPU step without a GPU; the reason is printed once, in the summary.
        if (s->gpu() && !have_gpu) {
          r.status = "not run: no GPU";
          ++tally.no_gpu;
          rows.push_back(r);
          continue;
        }
        std::string why = s->why_not(p);  // the row names the step already
        if (!why.empty()) {
          r.status = "not run: " + why;
          ++tally.refused;
          rows.push_back(r);
          continue;
        }
        const int key = int(p.dtype);
        if (!o.no_check && !inputs.count(key)) {
          // Outside the step's try: a problem without a finite baseline is bad input (exit 2).
          inputs.emplace(key, make_inputs(p, o.prob.seed));
          expected.emplace(key, expected_for(inputs.at(key), o.backward));
          require_finite_baseline(inputs.at(key), expected.at(key), o.backward);
        }
        try {
          if (!o.no_check) {
            Outputs got = run_step(*s, inputs.at(key), bwd);
            Verdict v = verify(inputs.at(key), got, expected.at(key), bwd);
            r.checked = true;
            r.pass = v.pass;
            r.tol_used = v.tol_used;
            r.max_err = 0;
            for (const Check& c : v.checks) {
              r.max_err = std::max(r.max_err, c.max_err);
              if (!c.pass) std::cerr << s->folder << ": " << c.summary() << "\n";
            }
            ++(v.pass ? tally.passed : tally.failed);
          } else {
            ++tally.unchecked;
          }
          TimeOptions t = o.time;
          t.seed = o.prob.seed;
          Stats st = time_step(*s, p, bwd, t);
          r.ran = true;
          r.ms = st.median_ms;
          r.tflops = (bwd ? flops_backward(p) : flops_forward(p)) / (st.median_ms * 1e-3) / 1e12;
          r.extra = extra_bytes(*s, p, bwd);
          if (s->gpu()) r.ceiling_frac = r.tflops / cublas_tflops;
          else r.ceiling_frac = r.tflops * 1000 / eigen_gflops;
          r.kv_bytes_per_s = 2.0 * double(p.kv_elems()) * dtype_bytes(p.dtype) / (st.median_ms * 1e-3);
          if (!bwd) {
            r.speedup = prev_ms / st.median_ms;
            prev_ms = st.median_ms;
          }
          nlohmann::json rec = make_record(s->folder, bwd ? "bwd" : "fwd", p, st,
                                           r.checked ? std::optional<double>(r.tol_used) : std::nullopt,
                                           s->gpu() ? env : cpu_env);
          rec["extra_bytes"] = r.extra;
          rec["pass_check"] = r.checked ? nlohmann::json(r.pass) : nlohmann::json(nullptr);
          if (decode) {  // as flashladder bench's decode records
            rec["kv_bytes"] = 2.0 * double(p.kv_elems()) * dtype_bytes(p.dtype);
            rec["kv_bytes_per_s"] = r.kv_bytes_per_s;
          }
          emit(rec);
        } catch (const Error& e) {
          r.ran = false;
          r.status = std::string("ERROR: ") + e.what();
          ++tally.errors;
        }
        rows.push_back(r);
      }
    }
    print_table(rows, decode);
  }
  json.close();
  return tally.finish(!o.no_check, gpu_why, gpu_required(o.require_gpu));
}

int list_steps(bool names_only, bool gpu_only, int64_t head_dim) {
  if (names_only) {
    std::string out;
    for (const Step& s : ladder())
      if ((!gpu_only || s.gpu()) && (head_dim == 0 || s.supports_d(head_dim))) out += (out.empty() ? "" : ",") + s.folder;
    std::cout << out << "\n";
    return 0;
  }
  std::string why;
  const bool have_gpu = gpu_device(&why).has_value();
  std::cout << std::left << std::setw(26) << "step" << std::setw(5) << "on" << std::setw(10) << "backward"
            << std::setw(18) << "types" << std::setw(22) << "head dims" << "the one idea\n";
  for (const Step& s : ladder())
    if ((!gpu_only || s.gpu()) && (head_dim == 0 || s.supports_d(head_dim)))
      std::cout << std::left << std::setw(26) << s.folder << std::setw(5) << (s.gpu() ? "GPU" : "CPU")
                << std::setw(10) << (s.has_backward() ? "yes" : "-") << std::setw(18) << s.dtypes_text()
                << std::setw(22) << s.head_dims_text() << s.change << "\n";
  if (!have_gpu) std::cout << "\nGPU steps need a CUDA device; here: " << why << "\n";
  return 0;
}

int show_diff(const std::string& name) {
  const Step* s = find_step(name);
  if (!s) throw Error("unknown step '" + name + "'; see 'flashladder steps'");
  const Step* base = s->base_step();  // the step its source is diffed against (steps/ladder.cpp)
  if (!base) throw Error("step " + s->folder + " is the first step; there is nothing before it to diff against");
  // The step sources: installed beside the program (PREFIX/share/flashladder/steps, found from
  // /proc/self/exe, so a moved or installed program finds its own), else the source tree it was
  // built from.
  std::vector<fs::path> roots;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // PREFIX/bin/flashladder -> PREFIX/share/flashladder/steps
    fs::path prefix = exe.parent_path();
    for (const fs::path& part : fs::path(FLASHLADDER_INSTALL_BINDIR)) {
      (void)part;
      prefix = prefix.parent_path();
    }
    roots.push_back(prefix / FLASHLADDER_INSTALL_DATADIR / "flashladder" / "steps");
  }
  roots.push_back(fs::path(FLASHLADDER_SOURCE_DIR) / "steps");
  auto source = [&](const Step& st) {
    for (const fs::path& root : roots)
      for (const char* f : {"attention.cu", "attention.cpp"})
        if (fs::exists(root / st.folder / f)) return root / st.folder / f;
    std::string where;
    for (const fs::path& root : roots) where += " " + (root / st.folder).string();
    throw Error("flashladder diff needs the step sources: no attention.cu or attention.cpp in" + where +
                " (install the program with 'cmake --install', which installs them, or run it from its build tree)");
  };
  // The lab marks (// LAB:…, app/lab_cmd.cpp) are not part of a step's idea: diffed without them.
  // The copies' folder (TMPDIR/flashladder-diff-PID, named here only) goes on every path out: it was
  // removed only after diff ran, so a copy that could not be written (a full disk) left it behind.
  struct RemoveCopies {
    fs::path dir;
    ~RemoveCopies() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } copies;
  std::error_code tmp_ec;
  const fs::path tmp = fs::temp_directory_path(tmp_ec);
  if (tmp_ec) {
    const char* env = std::getenv("TMPDIR");
    throw Error("flashladder diff writes the two sources without their lab marks to a temporary folder, and there is "
                "none: " + (env ? "TMPDIR = '" + std::string(env) + "'" : std::string("/tmp")) + " (" + tmp_ec.message() + ")");
  }
  copies.dir = tmp / ("flashladder-diff-" + std::to_string(::getpid()));
  const std::string b = lab_stripped_copy(source(*s).string(), copies.dir.string());
  // A step that adds the backward and runs its base's forward (09 on 08d) is its backward alone:
  // shown whole, as new lines.
  const std::string a = s->diff_whole() ? std::string("/dev/null") : lab_stripped_copy(source(*base).string(), copies.dir.string());
  const std::string a_name = s->diff_whole() ? std::string("/dev/null") : source(*base).string();
  const std::string cmd = "diff -u --label '" + a_name + "' --label '" + source(*s).string() + "' '" + a + "' '" + b + "'";
  std::cout << "# " << s->folder << " against " << base->folder
            << (s->diff_whole() ? " (whose forward it runs; its source is the backward, all new)" : "") << ": "
            << s->change << "\n" << std::flush;
  int rc = std::system(cmd.c_str());
  if (rc == -1) throw Error("could not run diff");
  // diff exits 1 when files differ, which is the point; 2 is its own trouble (a source it could not
  // read, an output it could not write), which it has already named on stderr.
  const int status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  if (status == 128 + SIGPIPE) return status;  // the reader went away (| head): quiet, as a program killed by SIGPIPE
  if (status > 1)
    throw Error("diff failed (exit status " + std::to_string(status) +
                "): the diff shown is incomplete");
  return 0;
}

}  // namespace fl::cli
