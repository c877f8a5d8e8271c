# Runs CMD with ARGS (a ;-list) on a machine with a CUDA device; passes only if it exits non-zero, was
# not killed by a signal, and its output matches EXPECT. Without a usable device (as `CMD steps`
# reports it) the test prints "GPU test skipped" and the reason, which the test's
# SKIP_REGULAR_EXPRESSION turns into a visible skip; with FLASHLADDER_REQUIRE_GPU set it fails instead.
execute_process(COMMAND ${CMD} steps RESULT_VARIABLE steps_rc OUTPUT_VARIABLE steps_out ERROR_VARIABLE steps_err
                TIMEOUT 60)
if(NOT steps_rc EQUAL 0)
  message(FATAL_ERROR "'${CMD} steps' failed (${steps_rc}):\n${steps_out}${steps_err}")
endif()
if(steps_out MATCHES "GPU steps need a CUDA device; here: ([^\n]*)")
  set(why "${CMAKE_MATCH_1}")
  if(NOT "$ENV{FLASHLADDER_REQUIRE_GPU}" STREQUAL "" AND NOT "$ENV{FLASHLADDER_REQUIRE_GPU}" STREQUAL "0")
    message(FATAL_ERROR "FLASHLADDER_REQUIRE_GPU is set but there is no usable GPU: ${why}")
  endif()
  message(STATUS "GPU test skipped (set FLASHLADDER_REQUIRE_GPU=1 to make this a failure): ${why}")
  return()
endif()
# The rest is expect_failure.cmake's check, with room for a slow device run.
set(FL_EXPECT_TIMEOUT 300)
include(${CMAKE_CURRENT_LIST_DIR}/expect_failure.cmake)
