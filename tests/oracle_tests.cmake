# flashladder — tests/oracle_tests.cmake: the oracle for other implementations (issue 6): the .npy
# reader, golden sets, `oracle generate/check` and `run` through the program, the fuzz target and the
# installed package. Included from tests/CMakeLists.txt, after fl_cli_test/fl_cli_fails.
target_sources(flashladder_tests PRIVATE test_npy.cpp test_golden.cpp)

# --- The program, with exact exit statuses: 0 pass, 1 failed check, 2 bad input ------------------
function(fl_cli_exit name rc expect_regex)
  add_test(NAME cli.${name} COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:flashladder> "-DARGS=${ARGN}"
           -DRC=${rc} -DEXPECT=${expect_regex} -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake)
endfunction()
set(G ${CMAKE_CURRENT_BINARY_DIR}/oracle_cli)
fl_cli_test(oracle_help "generate.*\n.*check" oracle --help)
fl_cli_test(oracle_generate_help "--out" oracle generate --help)
fl_cli_test(oracle_check_help "--candidate" oracle check --help)
fl_cli_test(run_help "--step" run --help)
fl_cli_exit(oracle_generate 0 "wrote 9 tensors and manifest.json"
            oracle generate --out ${G}/golden -B 1 -H 4 --heads-kv 2 --nq 21 --nk 13 -d 16 --causal --dtype bf16 --seed 7)
fl_cli_exit(run_step01 0 "wrote .*o.npy" run --step 01 --in ${G}/golden --out ${G}/run01)
fl_cli_exit(oracle_check_step01 0 "oracle check: PASS" oracle check --golden ${G}/golden --candidate ${G}/run01)
fl_cli_exit(oracle_check_golden_itself 0 "oracle check: PASS \\(5 tensors" oracle check --golden ${G}/golden --candidate ${G}/golden --backward)
fl_cli_exit(oracle_check_wrong_problem 1 "o    FAIL.*lse  FAIL" oracle check --golden ${G}/golden --candidate ${G}/other)
fl_cli_exit(oracle_check_missing 2 "run01/dq.npy: missing" oracle check --golden ${G}/golden --candidate ${G}/run01 --backward)
fl_cli_exit(oracle_check_no_golden 2 "manifest.json: cannot be opened" oracle check --golden ${G}/nowhere --candidate ${G}/run01)
fl_cli_exit(run_no_backward 2 "has no backward pass" run --step 02 --in ${G}/golden --out ${G}/run02 --backward)
# A refusal names the step once, in any build (d = 16 is refused before the build or a GPU is asked):
# never a line that names the step twice ("step 08e_wgmma: step 08e_wgmma: …").
add_test(NAME cli.run_refusal_named_once COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:flashladder>
         "-DARGS=run;--step;08e;--in;${G}/golden;--out;${G}/run08e" -DRC=2
         "-DEXPECT=flashladder: error: step 08e_wgmma: does not support head dim d = 16"
         "-DREJECT=08e_wgmma[^\n]*08e_wgmma" -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake)
fl_cli_exit(oracle_generate_bad 2 "d = 0 is not allowed" oracle generate --out ${G}/bad -d 0)
fl_cli_fails(oracle_needs_sub "A subcommand is required|requires|subcommand" oracle)
# A candidate from another problem (same shapes, other seed): every output fails on values.
fl_cli_exit(oracle_generate_other 0 "wrote 9 tensors"
            oracle generate --out ${G}/other -B 1 -H 4 --heads-kv 2 --nq 21 --nk 13 -d 16 --causal --dtype bf16 --seed 8)
set_tests_properties(cli.oracle_generate PROPERTIES FIXTURES_SETUP fl_golden)
set_tests_properties(cli.oracle_generate_other PROPERTIES FIXTURES_SETUP fl_golden_other)
set_tests_properties(cli.run_step01 PROPERTIES FIXTURES_REQUIRED fl_golden FIXTURES_SETUP fl_run01)
set_tests_properties(cli.oracle_check_step01 cli.oracle_check_missing PROPERTIES FIXTURES_REQUIRED "fl_golden;fl_run01")
set_tests_properties(cli.oracle_check_golden_itself cli.run_no_backward cli.run_refusal_named_once PROPERTIES FIXTURES_REQUIRED fl_golden)
set_tests_properties(cli.oracle_check_wrong_problem PROPERTIES FIXTURES_REQUIRED "fl_golden;fl_golden_other")

# --- The installed package: install to a temporary prefix, build tests/consumer against it -------
add_test(NAME package.consumer COMMAND ${CMAKE_COMMAND}
         -DBUILD_DIR=${PROJECT_BINARY_DIR} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/consumer_work
         -DCONSUMER=${CMAKE_CURRENT_SOURCE_DIR}/consumer "-DGENERATOR=${CMAKE_GENERATOR}"
         -DCXX=${CMAKE_CXX_COMPILER} -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer_test.cmake)
# PASS_REGULAR_EXPRESSION makes ctest ignore the exit status, so the pattern is the script's last
# line, printed only when every step before it passed.
set_tests_properties(package.consumer PROPERTIES TIMEOUT 600
                     PASS_REGULAR_EXPRESSION "consumer: ok \\(library, program and installed step sources\\)")

# --- libFuzzer on the .npy reader: clang only, a bounded run in the suite -------------------------
include(${CMAKE_CURRENT_SOURCE_DIR}/fuzz.cmake)
