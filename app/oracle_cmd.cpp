// flashladder — app/oracle_cmd.cpp: `oracle generate`, `oracle check` and `run`, the oracle for
// implementations outside the project. The work is in reference/golden.cpp (also in the installed
// package); this file prints it.
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "reference/golden.hpp"
#include "app/commands.hpp"

namespace fl::cli {

namespace {
std::string sci(double x) {
  std::ostringstream s;
  s << std::setprecision(3) << x;
  return s.str();
}
}  // namespace

int oracle_generate(const ProblemOptions& po, const std::string& out) {
  const Problem p = po.problem();
  std::cout << "oracle generate: " << p.describe() << " seed " << po.seed << "\n";
  const golden::Manifest m = golden::generate(p, po.seed, out);
  for (const golden::TensorInfo& t : m.tensors) {
    std::cout << "  " << std::left << std::setw(8) << t.file << std::setw(5) << npy::descr(t.kind)
              << std::setw(22) << npy::shape_text(t.shape);
    if (!t.input)
      std::cout << "tol " << sci(t.tol.tol) << " = 2 x baseline " << sci(t.tol.baseline_err) << " + floor "
                << sci(t.tol.floor) << " (" << dtype_name(t.storage) << ")";
    std::cout << "\n";
  }
  std::cout << "wrote " << m.tensors.size() << " tensors and manifest.json to " << out << "\n";
  return 0;
}

int oracle_check(const std::string& golden_dir, const std::string& candidate_dir, bool backward) {
  const golden::Report r = golden::check(golden_dir, candidate_dir, backward);
  // Every column starts with a space, so a value wider than its column (an error of 1e+300, a
  // fraction of 3e12 %) pushes the row right instead of running into its neighbour.
  std::cout << std::left << std::setw(5) << "" << std::setw(5) << "" << std::right << " " << std::setw(10) << "max err"
            << " " << std::setw(10) << "tol" << " " << std::setw(9) << "tol used" << " " << std::setw(5) << "NaN"
            << " " << std::setw(5) << "Inf" << "  first bad entry\n";
  for (const golden::TensorResult& t : r.tensors) {
    std::cout << std::left << std::setw(5) << t.name << std::setw(5) << (t.pass ? "pass" : "FAIL");
    if (!t.mismatch.empty()) {
      std::cout << " " << t.mismatch << "\n";
      continue;
    }
    const Check& c = t.check;
    std::ostringstream used;  // fixed up to 9999.9 %, scientific beyond
    if (100 * c.frac < 1e4) used << std::fixed << std::setprecision(1) << 100 * c.frac << "%";
    else used << std::setprecision(3) << 100 * c.frac << "%";
    std::cout << std::right << " " << std::setw(10) << sci(c.max_err) << " " << std::setw(10) << sci(c.tol) << " "
              << std::setw(9) << used.str() << " " << std::setw(5) << c.nans << " " << std::setw(5) << c.infs << "  "
              << (c.pass ? "-" : c.first_bad) << "\n";
  }
  std::string failed;
  for (const golden::TensorResult& t : r.tensors)
    if (!t.pass) failed += " " + t.name;
  if (r.pass)
    std::cout << "oracle check: PASS (" << r.tensors.size() << " tensors within the tolerance of " << golden_dir << ")\n";
  else
    std::cout << "oracle check: FAIL:" << failed << "\n";
  return r.pass ? 0 : 1;
}

int run_on_files(const std::string& step_name, const std::string& in_dir, const std::string& out_dir, bool backward) {
  const Step* s = find_step(step_name);
  if (!s) throw Error("unknown step '" + step_name + "'; see 'flashladder steps'");
  // A golden folder holds the oracle's o.npy, lse.npy (…): the step's outputs would replace them (run
  // --in g --out g did, and the set then failed its own check).
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(out_dir) / "manifest.json", ec))
    throw Error("--out " + out_dir + " holds a golden set (manifest.json): the step's outputs would replace the "
                "oracle's; write them to another folder");
  golden::check_output_folder(out_dir, backward);  // before the step runs, not after
  const golden::Manifest m = golden::read_manifest(in_dir);
  Inputs in = golden::read_inputs(in_dir, m);
  // CPU steps compute in fp32; fp16 and bf16 inputs are exact in fp32, so they run on the very
  // values of the golden set and their outputs (f4) are judged at the golden set's tolerance.
  if (!s->gpu() && !s->supports_dtype(in.p.dtype) && s->supports_dtype(DType::f32)) in.p.dtype = DType::f32;
  const std::string why = s->refusal(in.p);
  if (!why.empty()) throw Error(why);
  if (backward && !s->has_backward()) throw Error("step " + s->folder + " has no backward pass");
  std::cout << "run: " << s->folder << (backward ? " forward and backward" : " forward") << " on " << in.p.describe()
            << " (inputs of " << in_dir << ")\n";
  const Outputs out = run_step(*s, in, backward);
  for (const std::string& f : golden::write_outputs(out_dir, in.p, out, backward)) std::cout << "  wrote " << f << "\n";
  return 0;
}

}  // namespace fl::cli
