// flashladder — app/commands.hpp: the subcommands of the flashladder program.
#pragma once

#include <CLI/CLI.hpp>
#include <limits>
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
  bool deterministic = false;
  std::optional<double> scale;  // empty: the default 1/sqrt(d)
  std::string dtype = "fp16";
  uint64_t seed = 1;
  // The variants (issue 21, docs/variants.md); unset: the plain problem.
  std::vector<int64_t> window;                 // --window L,R
  std::optional<double> softcap;               // --softcap C
  std::string alibi;                           // --alibi heads|batch_heads ("" none)
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqused_k;
  // Whether -B and -N were given (with variable length they default to the offsets' count and longest
  // sequence instead); set by add_to, read by problem().
  const CLI::Option* batch_opt = nullptr;
  const CLI::Option* seq_opt = nullptr;
  void add_to(CLI::App& app);
  Problem problem() const;  // throws fl::Error naming a bad field
};

/// Every integer option of app and of its subcommands reads decimal: CLI11 2.1 converts integers with
/// strtoll(s, 0), which takes a leading 0 for octal (`-N 010` ran N = 8, `-N 08` could not be converted).
/// Called once, after every option is added; an option added later would read 010 as 8 again.
/// Every integer option refuses text beyond 64 bits too (fits<int64_t>, fits<uint64_t>), after its own
/// validators; and every option or argument that takes a value, of any type, refuses an empty one.
void decimal_integers(CLI::App& app);

/// Integer text beyond what an option's type holds is refused, quoted as typed, with the type's range.
/// CLI11 2.1 converts with strtoll, which saturates: -N 99999999999999999999 ran as 2^63 - 1 and the error
/// quoted that, a number nobody typed; beyond an int it said only "Could not convert: --timeout = …".
/// CLI11 names int and int64_t alike ("INT"), so an int option adds ->check(fits<int>()) itself.
CLI::Validator fits_integer(int digits, bool is_signed);  // digits: std::numeric_limits<T>::digits
template <class T>
CLI::Validator fits() {
  return fits_integer(std::numeric_limits<T>::digits, std::numeric_limits<T>::is_signed);
}

/// Whether a GPU step that cannot run here (no GPU, or a build without CUDA) is a failure: with
/// --require-gpu, or FLASHLADDER_REQUIRE_GPU set to anything but "" or "0" (the device script sets
/// it; the test suite's GPU gate reads the same variable). Otherwise such a step is "not run: no
/// GPU", reported and not counted against the exit status.
bool gpu_required(bool flag);

/// What a `check` or ladder run did with its steps, and the exit status that follows: 1 when a
/// check failed, a step hit an error, no step ran at all, or a GPU step could not run while a GPU
/// is required; else 0. Prints the summary lines.
struct Tally {
  int passed = 0, failed = 0, unchecked = 0, errors = 0, no_gpu = 0, refused = 0;
  int finish(bool checked_run, const std::string& gpu_why, bool require_gpu) const;
};

struct LadderOptions {
  ProblemOptions prob;
  std::string steps;                // comma list; empty = every step
  std::vector<int64_t> sweep;       // sequence lengths to sweep (Nq = Nk = N each)
  std::string json;                 // JSONL output path
  bool backward = false;
  bool no_check = false;
  bool require_gpu = false;
  bool decode = false;              // the decode row after the table (app/flashladder.cpp decides the default)
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
int run_check(const ProblemOptions& po, const std::string& steps, bool backward, bool require_gpu = false);
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
/// `flashladder diff` shows. strip_lab_marks works on text; lab_stripped_copy writes it into the folder
/// `dir` (created; the caller owns it and removes it) as FOLDER_FILE, and returns that file's path.
std::string strip_lab_marks(const std::string& text);
std::string lab_stripped_copy(const std::string& source, const std::string& dir);

/// The cuBLAS baselines (GEMM rate and standard attention); in builds without CUDA these throw.
struct GemmResult { double tflops; Stats t; int n; };
GemmResult cublas_gemm_rate(DType t, int n, const TimeOptions& opt);
Stats cublas_attention_time(const Problem& p, const TimeOptions& opt, double* tol_used);

}  // namespace fl::cli
