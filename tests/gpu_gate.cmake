# flashladder — tests/gpu_gate.cmake: included by the cmake -P scripts of tests that need a CUDA
# device. Without a usable device (as `CMD steps` reports it) it prints "GPU test skipped" and the
# reason, which the test's SKIP_REGULAR_EXPRESSION turns into a visible skip, and sets FL_GPU_SKIPPED
# (the includer returns); with FLASHLADDER_REQUIRE_GPU set it fails instead.
set(FL_GPU_SKIPPED OFF)
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
  set(FL_GPU_SKIPPED ON)
endif()
