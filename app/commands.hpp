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
  int64_t B = 2, H = 8, H_kv = 0 /* 0: = H */, N = 2048, Nq = 0, Nk = 0 /* 0: = N */, d = 64;
  bool causal = false;
  bool deterministic = false;
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

/// The lab kit (app/lab_cmd.cpp): an exercise folder from a step, and its check. Exit 0 pass, 1 fail,
/// 77 a GPU exercise on a machine without a GPU, 2 bad input.
int lab_new(const std::string& step, const std::string& dir, bool solution, const std::string& mutation, bool force);
int lab_check(const std::string& dir);
/// A step's source without its lab marks (every line whose first non-blank text is "// LAB:"): what
/// `flashladder diff` shows. strip_lab_marks works on text; lab_stripped_copy writes a temporary file.
std::string strip_lab_marks(const std::string& text);
std::string lab_stripped_copy(const std::string& source);

/// The cuBLAS baselines (GEMM rate and standard attention); in builds without CUDA these throw.
struct GemmResult { double tflops; Stats t; int n; };
GemmResult cublas_gemm_rate(DType t, int n, const TimeOptions& opt);
Stats cublas_attention_time(const Problem& p, const TimeOptions& opt, double* tol_used);

}  // namespace fl::cli
