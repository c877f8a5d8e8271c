# Runs CMD with ARGS (a ;-list) on a machine with a CUDA device; passes only if it exits with status RC
# and its output matches EXPECT (and not REJECT, when given): expect_exit.cmake's check. Without a
# usable device the test is skipped visibly, or fails with FLASHLADDER_REQUIRE_GPU set (gpu_gate.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/gpu_gate.cmake)
if(FL_GPU_SKIPPED)
  return()
endif()
include(${CMAKE_CURRENT_LIST_DIR}/expect_exit.cmake)
