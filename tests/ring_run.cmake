# Runs `flashladder ring` (CMD, ARGS a ;-list) for step 11's tests and judges it:
#   EXPECT_RC 0 (default): passes when it exits 0 and prints PASS (the command checks itself against
#     the oracle, and with --bitwise-local against the local steps), and no FAIL;
#   EXPECT_RC 2 with EXPECT (a regex): passes when it exits 2 and prints EXPECT (a refused or failed run).
# Fewer GPUs than the run needs ("needs G GPUs; this machine has n"): a visible skip ("GPU test
# skipped"), which fails instead when FLASHLADDER_REQUIRE_GPU is set and there is no GPU at all, or when
# FLASHLADDER_REQUIRE_GPUS is at least G (set it on the machine that has them). NO_SKIP: never skip (the
# launcher's tests over fake ranks, where the GPU count is part of what is tested).
if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC 0)
endif()
string(REPLACE ";" " " text "${ARGS}")
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 1500)
set(all "${out}${err}")
if(NOT NO_SKIP AND all MATCHES "needs ([0-9]+) GPUs; this machine has ([0-9]+)")
  set(need "${CMAKE_MATCH_1}")
  set(have "${CMAKE_MATCH_2}")
  set(req "$ENV{FLASHLADDER_REQUIRE_GPU}")
  set(req_n "$ENV{FLASHLADDER_REQUIRE_GPUS}")
  if(have EQUAL 0 AND NOT req STREQUAL "" AND NOT req STREQUAL "0")
    message(FATAL_ERROR "FLASHLADDER_REQUIRE_GPU is set but there is no usable GPU:\n${all}")
  endif()
  if(NOT req_n STREQUAL "" AND req_n GREATER_EQUAL need)
    message(FATAL_ERROR "FLASHLADDER_REQUIRE_GPUS=${req_n} but the run found ${have} GPUs:\n${all}")
  endif()
  message(STATUS "GPU test skipped (needs ${need} GPUs, this machine has ${have}; FLASHLADDER_REQUIRE_GPUS=${need} makes it a failure): ${all}")
  return()
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "'flashladder ${text}' did not exit normally (${rc}):\n${all}")
endif()
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "'flashladder ${text}' exited ${rc}, expected ${EXPECT_RC}:\n${all}")
endif()
if(EXPECT_RC EQUAL 0)
  if(NOT all MATCHES "PASS" OR all MATCHES "FAIL")
    message(FATAL_ERROR "'flashladder ${text}' exited 0 but did not print PASS without FAIL:\n${all}")
  endif()
elseif(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "output of 'flashladder ${text}' (exit ${rc}) does not match '${EXPECT}':\n${all}")
endif()
message(STATUS "exit ${rc}:\n${all}")
