// A user's program against the installed oracle: judge an "implementation" (here the oracle's own
// answer rounded to fp16, as a step would store it) with verify(), then through golden files.
#include <cstdio>
#include <string>

#include "reference/golden.hpp"
#include "reference/verify.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer DIR\n");
    return 2;
  }
  try {
    fl::Problem p;
    p.B = 1, p.H = 4, p.H_kv = 2, p.Nq = 9, p.Nk = 11, p.d = 5, p.causal = true, p.dtype = fl::DType::f16;
    const fl::Inputs in = fl::make_inputs(p, 3);
    const fl::Expected e = fl::expected_for(in, true);
    auto rounded = [&](const std::vector<double>& xs) {
      std::vector<float> out(xs.begin(), xs.end());
      fl::round_all(p.dtype, out);
      return out;
    };
    fl::Outputs got;
    got.o = rounded(e.fwd.o);
    got.lse = std::vector<float>(e.fwd.lse.begin(), e.fwd.lse.end());
    got.dq = rounded(e.bwd.dq), got.dk = rounded(e.bwd.dk), got.dv = rounded(e.bwd.dv);
    const fl::Verdict v = fl::verify(in, got, e, true);
    for (const fl::Check& c : v.checks) std::printf("  %s\n", c.summary().c_str());

    const std::string dir = argv[1];
    fl::golden::generate(p, 3, dir + "/golden");
    fl::golden::write_outputs(dir + "/candidate", p, got, true);
    const fl::golden::Report r = fl::golden::check(dir + "/golden", dir + "/candidate", true);
    if (!(v.pass && r.pass)) {
      std::printf("consumer: FAIL\n");
      return 1;
    }
    std::printf("consumer: ok (verify and golden-file check pass; tolerance used %.1f%%)\n", 100 * v.tol_used);
    return 0;
  } catch (const fl::Error& e) {
    std::fprintf(stderr, "consumer: error: %s\n", e.what());
    return 2;
  }
}
