// flashladder — reference/golden.hpp: the oracle as files, for implementations outside this project.
//
// A golden set is a folder: the inputs (q, k, v, do) in the storage type, the oracle's answers
// (o, lse, dq, dk, dv) in f8, and manifest.json with the problem, the seed and, per output, the
// tolerance of the rule (2 · max|baseline − oracle| + floor: the numbers compare() computes). A
// candidate's .npy outputs are judged against it with compare_with_tol(), so an implementation in
// numpy, Triton or PyTorch meets exactly the check the ladder's own steps meet.
#pragma once

#include <string>
#include <vector>

#include "common/compare.hpp"
#include "common/npy.hpp"
#include "common/tensor.hpp"

namespace fl::golden {

/// One tensor of a golden set, as the manifest records it.
struct TensorInfo {
  std::string name;              // "q", "k", "v", "do", ("alibi_slopes",) "o", "lse", "dq", "dk", "dv"
  std::string file;              // name + ".npy"
  bool input = false;
  std::vector<int64_t> shape;    // derived from the problem, never typed
  npy::Kind kind;                // of the golden file: inputs in the storage type, outputs f8
  DType storage;                 // the type a candidate is judged at (fp32 for lse)
  Tolerance tol;                 // outputs only
};

struct Manifest {
  Problem p;
  uint64_t seed = 0;
  InputOptions opt;
  std::vector<TensorInfo> tensors;  // q, k, v, do, (alibi_slopes with ALiBi,) o, lse, dq, dk, dv
  const TensorInfo& at(const std::string& name) const;  // throws if absent
};

/// The .npy element type that holds a storage type: f2, u2 (bf16 bits) or f4.
npy::Kind kind_for(DType t);
/// The element types a candidate may use for a tensor of storage type t: its own, or a wider float.
std::vector<npy::Kind> accepted_kinds(DType t);
/// An array's values widened to double; u2 is read as bf16 bits.
std::vector<double> to_double(const npy::Array& a);
/// An array in kind_for(t) from values exact in t (as make_inputs and every step produce them).
npy::Array from_float(DType t, const std::vector<float>& xs, const std::vector<int64_t>& shape);

/// Computes the oracle (forward and backward) and the baseline on seeded inputs, writes the golden
/// set into dir (created if needed) and returns its manifest. A problem refused (a tolerance that
/// cannot be given) leaves dir untouched; a write that fails leaves it without manifest.json.
Manifest generate(const Problem& p, uint64_t seed, const std::string& dir, InputOptions opt = {});

/// dir/manifest.json, checked: a malformed field, or a shape that disagrees with the problem, is
/// refused with fl::Error naming it.
Manifest read_manifest(const std::string& dir);
/// The same check on manifest text in memory; `where` names it in errors (the fuzz target's entry).
/// Integers must be JSON integers in range (1.9, -1, 1e300 are refused, quoted as written), and
/// each output's tol must equal 2 · baseline_err + floor.
Manifest parse_manifest_text(const std::string& text, const std::string& where);

/// The golden set's inputs as a step sees them (q, k, v, dO, each exact in the storage type).
Inputs read_inputs(const std::string& dir, const Manifest& m);

/// Refuses (fl::Error naming the files) a forward-only write (backward false) into a dir that holds
/// dq.npy, dk.npy or dv.npy: check() would judge them beside the new o and lse.
void check_output_folder(const std::string& dir, bool backward);
/// Writes a step's outputs in dir as .npy: o (and dq, dk, dv when backward) in kind_for(p.dtype),
/// lse in f4, after check_output_folder. Returns the files written.
std::vector<std::string> write_outputs(const std::string& dir, const Problem& p, const Outputs& out, bool backward);

struct TensorResult {
  std::string name;
  bool present = false;   // the candidate has the file
  std::string mismatch;   // a dtype or shape that disagrees with the manifest; empty when compared
  Check check;            // filled when compared
  bool pass = false;
};

struct Report {
  std::vector<TensorResult> tensors;  // o, lse, then dq, dk, dv where present (or required)
  bool pass = false;
};

/// Judges candidate/{o,lse,dq,dk,dv}.npy against the golden set. o and lse are required; dq, dk,
/// dv are judged when present and required when backward is set. A missing required file, a
/// malformed .npy or a broken golden set (an answer that is NaN or infinite, a floor that its
/// answers do not give) throws fl::Error (bad input); a wrong dtype, wrong shape or wrong value is a
/// failed tensor in the report.
Report check(const std::string& golden_dir, const std::string& candidate_dir, bool backward);

}  // namespace fl::golden
