# flashladder — tests/install_step.cmake: step(what COMMAND…) for the install tests run with cmake -P
# (consumer_test.cmake, capi_installed.cmake): runs the command; a non-zero exit fails the test with its
# output; otherwise prints "<what>: ok" and the output, and leaves it in last_out for the caller to check.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}${err}")
  endif()
  message(STATUS "${what}: ok\n${out}")
  set(last_out "${out}" PARENT_SCOPE)
endfunction()
