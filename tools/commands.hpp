// flashladder — tools/commands.hpp: the subcommands of the flashladder program.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/problem.hpp"
#include "common/runner.hpp"

namespace fl::cli {

/// Problem options shared by every subcommand that runs attention.
struct ProblemOptions {
  int64_t B = 2, H = 8, H_kv = 0 /* 0: = H */, N = 2048, Nq = 0, Nk = 0 /* 0: = N */, d = 64;
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
int list_steps();
int show_diff(const std::string& step);

/// The cuBLAS baselines (GEMM rate and standard attention); in builds without CUDA these throw.
struct GemmResult { double tflops; Stats t; int n; };
GemmResult cublas_gemm_rate(DType t, int n, const TimeOptions& opt);
Stats cublas_attention_time(const Problem& p, const TimeOptions& opt, double* tol_used);

}  // namespace fl::cli
