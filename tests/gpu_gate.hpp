// flashladder — tests/gpu_gate.hpp: GPU tests skip with a visible reason on machines without a GPU,
// and FAIL instead when FLASHLADDER_REQUIRE_GPU is set (the device script sets it), so a run that
// needs the GPU can never pass by skipping.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "app/runner.hpp"

namespace fl::test {

inline bool gpu_required() {
  const char* v = std::getenv("FLASHLADDER_REQUIRE_GPU");
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace fl::test

#define FL_NEED_GPU()                                                                              \
  do {                                                                                             \
    std::string fl_why_;                                                                           \
    if (!::fl::gpu_device(&fl_why_)) {                                                             \
      if (::fl::test::gpu_required())                                                              \
        FAIL() << "FLASHLADDER_REQUIRE_GPU is set but there is no usable GPU: " << fl_why_;        \
      else                                                                                         \
        GTEST_SKIP() << "GPU test skipped (set FLASHLADDER_REQUIRE_GPU=1 to make this a failure): " \
                     << fl_why_;                                                                   \
    }                                                                                              \
  } while (0)
