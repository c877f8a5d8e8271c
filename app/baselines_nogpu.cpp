// flashladder — app/baselines_nogpu.cpp: the cuBLAS baselines in a build without CUDA.
#include "app/commands.hpp"

namespace fl::cli {
static const char* kNo = "the cuBLAS baselines need a build with CUDA and a CUDA device";
GemmResult cublas_gemm_rate(DType, int, const TimeOptions&) { throw Error(kNo); }
Stats cublas_attention_time(const Problem&, const TimeOptions&, double*) { throw Error(kNo); }
}  // namespace fl::cli
