# Runs CMD with ARGS (a ;-list); passes only if it exits with status RC exactly (0 pass, 1 failed
# check, 2 bad input), was not killed by a signal, and its output matches EXPECT. With REJECT given,
# output that matches REJECT fails the test too (what must never be printed).
if(NOT DEFINED FL_EXPECT_TIMEOUT)
  set(FL_EXPECT_TIMEOUT 300)
endif()
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${FL_EXPECT_TIMEOUT})
string(REPLACE ";" " " arglist_text "${ARGS}")
set(all "${out}${err}")
if(NOT rc STREQUAL "${RC}")
  message(FATAL_ERROR "'${arglist_text}' exited with '${rc}', expected ${RC}. Output:\n${all}")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "output of '${arglist_text}' (exit ${rc}) does not match '${EXPECT}':\n${all}")
endif()
if(DEFINED REJECT AND NOT REJECT STREQUAL "" AND all MATCHES "${REJECT}")
  message(FATAL_ERROR "output of '${arglist_text}' (exit ${rc}) matches '${REJECT}', which it must not ('${CMAKE_MATCH_0}'):\n${all}")
endif()
message(STATUS "exit ${rc}: ${all}")
