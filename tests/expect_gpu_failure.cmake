# Runs CMD with ARGS (a ;-list) on a machine with a CUDA device; passes only if it exits non-zero, was
# not killed by a signal, and its output matches EXPECT. Without a usable device the test is skipped
# visibly, or fails with FLASHLADDER_REQUIRE_GPU set (gpu_gate.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/gpu_gate.cmake)
if(FL_GPU_SKIPPED)
  return()
endif()
# The rest is expect_failure.cmake's check, with room for a slow device run.
set(FL_EXPECT_TIMEOUT 300)
include(${CMAKE_CURRENT_LIST_DIR}/expect_failure.cmake)
