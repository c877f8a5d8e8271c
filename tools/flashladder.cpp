// flashladder — tools/flashladder.cpp: the command-line program.
//
//   flashladder                 the ladder: every step this machine can run, checked and timed
//   flashladder steps           the list of steps
//   flashladder diff NN         the source diff of step NN against step NN−1
//   flashladder --help, flashladder SUBCOMMAND --help
//
// Exit status: 0 all good; 1 a check failed; 2 bad input (named in the message).
#include <iostream>

#include "tools/commands.hpp"

int main(int argc, char** argv) {
  using namespace fl::cli;
  CLI::App app{
      "flashladder: FlashAttention as a ladder of working implementations, each checked against an\n"
      "fp64 oracle and timed. With no subcommand it runs the ladder."};
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  app.require_subcommand(0, 1);

  LadderOptions lad;
  auto add_ladder_options = [&](CLI::App& a) {
    lad.prob.add_to(a);
    a.add_option("--steps", lad.steps, "Comma-separated steps to run (number, folder or name); default: all");
    a.add_option("--sweep", lad.sweep, "Sweep sequence lengths: run the ladder at each N (Nq = Nk = N)")
        ->delimiter(',');
    a.add_option("--json", lad.json, "Write one JSON record per timed row to this file (JSON lines)");
    a.add_flag("--backward", lad.backward, "Also time the backward of steps that have one");
    a.add_flag("--no-check", lad.no_check, "Skip the oracle check (for problems too large for the CPU oracle)");
    a.add_option("--reps", lad.time.reps, "Timed repetitions; the median is reported")->capture_default_str();
    a.add_option("--warmup", lad.time.warmup, "Untimed warm-up repetitions")->capture_default_str();
  };
  add_ladder_options(app);

  CLI::App* steps = app.add_subcommand("steps", "List the steps: number, folder, the one idea, types, head dims");
  std::string diff_step;
  CLI::App* diff = app.add_subcommand("diff", "Show the source diff of a step against the step before it");
  diff->add_option("step", diff_step, "Step number, folder or name (e.g. 05)")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*steps) return list_steps();
    if (*diff) return show_diff(diff_step);
    return run_ladder(lad);
  } catch (const fl::Error& e) {
    std::cerr << "flashladder: error: " << e.what() << "\n";
    return 2;
  }
}
