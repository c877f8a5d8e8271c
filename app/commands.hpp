// flashladder — app/commands.hpp: the subcommands of the flashladder program.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/problem.hpp"
#include "app/runner.hpp"

namespace fl::cli {

/// Problem options shared by every subcommand that runs attention.
struct ProblemOptions {
  int64_t B = 2, H = 8, N = 2048, d = 64;
  // Unset means "= H" and "= N". Optional rather than 0-for-unset, so that an explicit
  // `--nq 0` is refused by problem() instead of silently meaning N.
  std::optional<int64_t> H_kv, Nq, Nk;
  bool causal = false;
  std::optional<double> scale;  // empty: the default 1/sqrt(d)
  std::string dtype = "fp16";
  uint64_t seed = 1;
  void add_to(CLI::App& app);
  Problem problem() const;  // throws fl::Error naming a bad field
};

struct LadderOptions {
  ProblemOptions prob;
  std::string steps;                // comma list; empty = every step
  std::vector<int64_t> sweep;       // sequence lengths to sweep (Nq = Nk = N each)
  std::string json;                 // JSONL output path
  bool backward = false;
  bool no_check = false;
  TimeOptions time;
};

int run_ladder(const LadderOptions& o);

struct BenchOptions {
  std::string json;
  std::string headline_steps = "all";       // GPU steps run at the headline problem
  std::vector<DType> headline_dtypes = {DType::f16};
  std::string sweep_steps;                  // steps timed over the FA2 sweep ("" = none)
  bool sweep_cublas = true;
  uint64_t seed = 1;
  TimeOptions time;
};
int run_bench(const BenchOptions& o);
/// Steps against the oracle on one problem, untimed (what compute-sanitizer runs). Exit 1 on a failure.
int run_check(const ProblemOptions& po, const std::string& steps, bool backward);
/// The step list; with names_only, a comma-separated list of folders (for scripts), filtered.
int list_steps(bool names_only = false, bool gpu_only = false, int64_t head_dim = 0);
int show_diff(const std::string& step);

/// The oracle for other implementations (app/oracle_cmd.cpp): golden files, their check, and any
/// step run on .npy inputs. Exit 0 pass, 1 a failed check, 2 bad input (fl::Error).
int oracle_generate(const ProblemOptions& po, const std::string& out_dir);
int oracle_check(const std::string& golden_dir, const std::string& candidate_dir, bool backward);
int run_on_files(const std::string& step, const std::string& in_dir, const std::string& out_dir, bool backward);

/// The cuBLAS baselines (GEMM rate and standard attention); in builds without CUDA these throw.
struct GemmResult { double tflops; Stats t; int n; };
GemmResult cublas_gemm_rate(DType t, int n, const TimeOptions& opt);
Stats cublas_attention_time(const Problem& p, const TimeOptions& opt, double* tol_used);

}  // namespace fl::cli
