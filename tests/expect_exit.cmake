# Runs CMD with ARGS (a ;-list); passes only if it exits with status RC exactly (0 pass, 1 failed
# check, 2 bad input), was not killed by a signal, and its output matches EXPECT.
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
string(REPLACE ";" " " arglist_text "${ARGS}")
set(all "${out}${err}")
if(NOT rc STREQUAL "${RC}")
  message(FATAL_ERROR "'${arglist_text}' exited with '${rc}', expected ${RC}. Output:\n${all}")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "output of '${arglist_text}' (exit ${rc}) does not match '${EXPECT}':\n${all}")
endif()
message(STATUS "exit ${rc}: ${all}")
