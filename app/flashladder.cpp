// flashladder — app/flashladder.cpp: the command-line program.
//
//   flashladder                 the ladder: every step this machine can run, checked and timed
//   flashladder steps           the list of steps
//   flashladder diff NN         the source diff of step NN against step NN−1
//   flashladder check           steps against the oracle on one problem, untimed
//   flashladder bench           the benchmark (GPU): ceilings, headline problem, FA2 sweep
//   flashladder oracle generate golden files (.npy + manifest.json) for other implementations
//   flashladder oracle check    a candidate's .npy outputs against golden files
//   flashladder run             one step on the .npy inputs of a golden folder, outputs as .npy
//   flashladder ring            step 11: ring attention on G GPUs over NCCL (app/ring_cmd.cpp)
//   flashladder lab new STEP DIR   an exercise: the step with its idea cut out; lab check DIR: its check
//   flashladder --help, flashladder SUBCOMMAND --help
//
// Exit status: 0 all good; 1 a check failed (or a step hit an error, or no step ran); 2 bad input
// (named in the message). A GPU step that cannot run here ("not run: no GPU") is not a failure
// unless --require-gpu or FLASHLADDER_REQUIRE_GPU=1 says a GPU is required.
#include <algorithm>
#include <functional>
#include <regex>
#include <iostream>
#include <new>

#include "app/commands.hpp"
#include "app/ring_cmd.hpp"

namespace {

// --help-all expands every level of subcommands: CLI11 expands the first only, so `oracle generate`'s and
// `lab new`'s options were missing from it. The same layout as CLI11's own (Formatter::make_expanded).
class ExpandEveryLevel : public CLI::Formatter {
 public:
  std::string make_expanded(const CLI::App* sub) const override {
    std::stringstream out;
    out << sub->get_display_name(true) << "\n"
        << make_description(sub) << make_positionals(sub) << make_groups(sub, CLI::AppFormatMode::Sub)
        << make_subcommands(sub, CLI::AppFormatMode::All);
    std::string text = CLI::detail::find_and_replace(out.str(), "\n\n", "\n");
    text = text.substr(0, text.size() - 1);
    return CLI::detail::find_and_replace(text, "\n", "\n  ") + "\n";
  }
};

// CLI11 names an option by its long name in a refusal: "-N abc" was refused as "Could not convert:
// --seq = abc", an option the user did not type. An option with a short name is named by both, as
// --help lists it ("-N/--seq"), in every command's refusals (the message's first line; CLI11's "Run
// with --help" line is kept as it is).
std::string name_both_ways(const CLI::App* app, const CLI::Error& e) {
  std::string what = e.what();
  std::function<void(const CLI::App*)> visit = [&](const CLI::App* a) {
    for (const CLI::Option* o : a->get_options()) {
      if (o->get_snames().empty() || o->get_lnames().empty()) continue;
      const std::string l = "--" + o->get_lnames().front(), both = "-" + o->get_snames().front() + "/" + l;
      if (what.find(both) != std::string::npos) continue;  // named so already (an enclosing command's)
      what = std::regex_replace(what, std::regex("(^|[^-\\w/])" + l + "(?![-\\w])"), "$1" + both);
    }
    for (const CLI::App* sub : a->get_subcommands([](const CLI::App*) { return true; })) visit(sub);
  };
  visit(app);
  const std::string simple = CLI::FailureMessage::simple(app, e);
  return what + simple.substr(std::min(simple.size(), std::string(e.what()).size()));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fl::cli;
  CLI::App app{
      "flashladder: FlashAttention as a ladder of working implementations, each checked against an\n"
      "fp64 oracle and timed. With no subcommand it runs the ladder."};
  app.formatter(std::make_shared<ExpandEveryLevel>());  // before the subcommands, which inherit it
  app.failure_message(name_both_ways);                  // the subcommands inherit it too
  app.set_help_all_flag("--help-all", "Help for every subcommand, at every level");
  app.require_subcommand(0, 1);

  LadderOptions lad;
  // The decode row follows the table of a run given no problem option and no --sweep (tools/ladder's
  // default run: why steps 10 and 10b exist); --decode adds it to any run, --no-decode leaves it out.
  std::vector<const CLI::Option*> problem_opts;
  CLI::Option *decode_on = nullptr, *decode_off = nullptr;
  auto add_ladder_options = [&](CLI::App& a) {
    const size_t before = a.get_options().size();
    lad.prob.add_to(a);
    const std::vector<CLI::Option*> all = a.get_options();  // in the order added: the problem's last
    problem_opts.assign(all.begin() + std::ptrdiff_t(before), all.end());
    a.add_option("--steps", lad.steps, "Comma-separated steps to run (number, folder or name); default: all");
    problem_opts.push_back(a.add_option("--sweep", lad.sweep, "Sweep sequence lengths: run the ladder at each N (Nq = Nk = N)")
        ->delimiter(','));
    decode_on = a.add_flag("--decode", "Also run the decode row: B 1, H 32, H_kv 8, Nq 1, Nk 32768, d 128, fp16, in K+V "
                                       "bytes per second (default: only when no problem option and no --sweep is given)");
    decode_off = a.add_flag("--no-decode", "Leave the decode row out of a run without problem options")->excludes(decode_on);
    a.add_option("--json", lad.json, "Write one JSON record per timed row to this file (JSON lines)");
    a.add_flag("--backward", lad.backward, "Also time the backward of steps that have one");
    a.add_flag("--no-check", lad.no_check, "Skip the oracle check (for problems too large for the CPU oracle)");
    a.add_flag("--require-gpu", lad.require_gpu,
               "A GPU step that cannot run here is a failure (also FLASHLADDER_REQUIRE_GPU=1)");
    // Bounded: --warmup 2147483647 wrapped warmup + reps negative, timed nothing and reported 0 ms.
    a.add_option("--reps", lad.time.reps, "Timed repetitions; the median is reported")
        ->capture_default_str()->check(CLI::Range(1, fl::kMaxReps));
    a.add_option("--warmup", lad.time.warmup, "Untimed warm-up repetitions")
        ->capture_default_str()->check(CLI::Range(0, fl::kMaxReps));
  };
  add_ladder_options(app);

  CLI::App* steps = app.add_subcommand("steps", "List the steps: number, folder, the one idea, types, head dims");
  bool steps_names = false, steps_gpu = false;
  int64_t steps_d = 0;
  steps->add_flag("--names", steps_names, "Print only the folders, comma-separated (for scripts)");
  steps->add_flag("--gpu", steps_gpu, "Only GPU steps");
  steps->add_option("--head-dim", steps_d, "Only steps that support this head dim")->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  std::string diff_step;
  CLI::App* diff = app.add_subcommand("diff", "Show the source diff of a step against its base (the step before it, or the one its ladder entry names)");
  diff->add_option("step", diff_step, "Step number, folder or name (e.g. 05)")->required();

  ProblemOptions chk_prob;
  std::string chk_steps;
  bool chk_bwd = false;
  CLI::App* check = app.add_subcommand(
      "check", "Run steps once against the oracle, untimed (exit 1 on a failure; steps without a GPU are 'not run')");
  chk_prob.add_to(*check);
  check->add_option("--steps", chk_steps, "Comma-separated steps; default: all");
  check->add_flag("--backward", chk_bwd, "Also check the backward of steps that have one");
  bool chk_require_gpu = false;
  check->add_flag("--require-gpu", chk_require_gpu,
                  "A GPU step that cannot run here is a failure, not 'not run' (also FLASHLADDER_REQUIRE_GPU=1)");

  BenchOptions bench_o;
  std::vector<std::string> bench_types = {"fp16"};
  CLI::App* bench = app.add_subcommand("bench", "The benchmark: cuBLAS ceilings, the headline problem, the FA2 sweep (GPU; exit 0 done, 2 bad input or no GPU)");
  bench->add_option("--json", bench_o.json, "Append one JSON record per measurement to this file");
  bench->add_option("--steps", bench_o.headline_steps, "GPU steps at the headline problem (default all)")->capture_default_str();
  bench->add_option("--headline-dtypes", bench_types, "Storage types of the headline problem")->delimiter(',')->capture_default_str();
  bench->add_option("--sweep-steps", bench_o.sweep_steps, "GPU steps timed over the FA2 sweep (default none)");
  bench->add_flag("!--no-sweep-cublas", bench_o.sweep_cublas, "Skip cuBLAS standard attention in the sweep");
  bench->add_option("--reps", bench_o.time.reps, "Timed repetitions")->capture_default_str()->check(CLI::Range(1, fl::kMaxReps));
  bench->add_option("--warmup", bench_o.time.warmup, "Warm-up repetitions")
      ->capture_default_str()->check(CLI::Range(0, fl::kMaxReps));

  // The oracle for other implementations (app/oracle_cmd.cpp).
  CLI::App* oracle = app.add_subcommand("oracle", "Golden files for other implementations, and the check of theirs");
  oracle->require_subcommand(1);
  ProblemOptions gen_prob;
  std::string gen_out, chk_golden, chk_cand;
  bool chk_golden_bwd = false;
  CLI::App* gen = oracle->add_subcommand(
      "generate", "Write q, k, v, do (storage type; bf16 as <u2), the oracle's o, lse, dq, dk, dv (f8) and manifest.json");
  gen_prob.add_to(*gen);
  gen->add_option("--out", gen_out, "Folder to write the golden set into (created if needed)")->required();
  CLI::App* ocheck = oracle->add_subcommand(
      "check", "Judge a candidate's o.npy, lse.npy (and dq, dk, dv) by the tolerance rule (exit 0 pass, 1 fail, 2 bad input)");
  ocheck->add_option("--golden", chk_golden, "Folder made by 'oracle generate'")->required();
  ocheck->add_option("--candidate", chk_cand, "Folder holding the candidate's .npy outputs")->required();
  ocheck->add_flag("--backward", chk_golden_bwd, "Require dq.npy, dk.npy, dv.npy (else they are judged when present)");
  std::string run_step_name, run_in, run_out;
  bool run_bwd = false;
  CLI::App* runf = app.add_subcommand("run", "Run one step on the .npy inputs of a golden folder and write its outputs as .npy");
  runf->add_option("--step", run_step_name, "Step number, folder or name (e.g. 01)")->required();
  runf->add_option("--in", run_in, "Golden folder: manifest.json and q, k, v, do .npy")->required();
  runf->add_option("--out", run_out, "Folder for o.npy, lse.npy (and dq, dk, dv with --backward)")->required();
  runf->add_flag("--backward", run_bwd, "Also run the step's backward (steps that have one)");

  RingOptions ring_o;
  CLI::App* ring = add_ring_command(app, ring_o);
  // The lab kit (app/lab_cmd.cpp).
  CLI::App* lab = app.add_subcommand("lab", "Exercises for courses: a step handed out with its idea to write, and its check");
  lab->require_subcommand(1);
  std::string lab_step, lab_dir, lab_mutation;
  bool lab_solution = false, lab_force = false;
  CLI::App* lab_new_c = lab->add_subcommand(
      "new", "Write an exercise folder: the step's source with its idea cut out (TODO(lab) and a hint), README, build file");
  lab_new_c->add_option("step", lab_step, "Step number (the exercises: 02, 05, 07, 08a, 09, 10, 10b)")->required();
  lab_new_c->add_option("dir", lab_dir, "Folder to create")->required();
  lab_new_c->add_flag("--solution", lab_solution, "Hand out the step whole, the cut lines kept (for instructors)");
  lab_new_c->add_option("--mutate", lab_mutation,
                        "Hand out the solution with a known mistake applied (a tests/lab/*.txt fixture; for instructors)")
      ->check([](const std::string& f) { return f.empty() ? std::string("an empty value is not allowed: name a fixture") : ""; });
  lab_new_c->add_flag("--force", lab_force,
                      "Write into a folder that is not empty: overwrite the exercise's files, and remove DIR/build "
                      "if it is a lab build (any other build/ is refused)");
  std::string lab_check_dir;
  CLI::App* lab_check_c = lab->add_subcommand(
      "check", "Build the folder's source in place of the step and run the step's suite (exit 0 pass, 1 fail, 77 needs a GPU)");
  lab_check_c->add_option("dir", lab_check_dir, "Folder made by 'lab new'")->required();

  // Output that never reached its file (a full disk, a closed pipe) is a failure, not a success.
  auto finish = [](int rc) {
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "flashladder: error: writing to standard output failed (disk full or a closed pipe?): "
                   "the output is incomplete\n";
      return rc ? rc : 2;
    }
    return rc;
  };
  decimal_integers(app);  // after every option above: -N 010 is 10, not octal 8
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return finish(app.exit(e) == 0 ? 0 : 2);
  }
  auto dispatch = [&]() -> int {
    try {
      if (*steps) return list_steps(steps_names, steps_gpu, steps_d);
      if (*diff) return show_diff(diff_step);
      if (*lab_new_c) return lab_new(lab_step, lab_dir, lab_solution, lab_mutation, lab_force);
      if (*lab_check_c) return lab_check(lab_check_dir);
      if (*gen) return oracle_generate(gen_prob, gen_out);
      if (*ocheck) return oracle_check(chk_golden, chk_cand, chk_golden_bwd);
      if (*runf) return run_on_files(run_step_name, run_in, run_out, run_bwd);
      if (*ring) return run_ring(ring_o);
      if (*check) return run_check(chk_prob, chk_steps, chk_bwd, chk_require_gpu);
      if (*bench) {
        bench_o.headline_dtypes.clear();
        for (const std::string& t : bench_types) {
          auto d = fl::parse_dtype(t);
          if (!d) throw fl::Error("unknown storage type '" + t + "': use fp16, bf16 or fp32");
          bench_o.headline_dtypes.push_back(*d);
        }
        return run_bench(bench_o);
      }
      lad.decode = decode_on->count() > 0 ||
                   (decode_off->count() == 0 &&
                    std::none_of(problem_opts.begin(), problem_opts.end(), [](const CLI::Option* o) { return o->count() > 0; }));
      return run_ladder(lad);
    } catch (const fl::Error& e) {
      std::cerr << "flashladder: error: " << e.what() << "\n";
      return 2;
    } catch (const std::bad_alloc&) {
      // The host side (inputs, the fp64 oracle) needs memory too; a problem too large for it is bad
      // input, not a crash.
      // --no-check was suggested to a run that had it (step 01 keeps the N × N scores: 4 TiB at N = 2^20),
      // and to commands without it (oracle generate, run, bench: CLI11 then refused it). Only the ladder has
      // --no-check; the ring's way to skip the oracle is --check none.
      const bool ladder_run = app.get_subcommands().empty();
      const bool unchecked = ladder_run && lad.no_check;
      const char* hint = ladder_run && !lad.no_check ? " or --no-check"
                         : *ring && ring_o.check != "none" ? " or --check none"
                                                          : "";
      std::cerr << "flashladder: error: out of host memory: the problem's host buffers (inputs, outputs, "
                << (unchecked ? "a CPU step's scores, N x N in step 01" : "when checked, the fp64 oracle")
                << ") do not fit in this machine's memory; choose a smaller problem" << hint << "\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << "flashladder: error: " << e.what() << "\n";
      return 2;
    }
  };
  return finish(dispatch());
}
