# Step 11 (ring attention across GPUs on NCCL): `flashladder ring` checks itself against the fp64
# oracle (the full one up to N = 4096, sampled rows beyond), so each test is one run of it, judged by
# ring_run.cmake. The plan (which pairs, which chunks) has CPU tests in test_ring_plan.cpp.

# The plan's CPU tests join the main test program.
target_sources(flashladder_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/test_ring_plan.cpp)

# The launcher over fake CPU ranks (ring_fake_rank.cpp): built everywhere, GPU or not, NCCL or not, so
# that what happens around the ranks (ids through pipes, outputs through shared memory, a failed or hung
# rank ended and named, a missing row caught by the check) is tested in CI.
# (app/ladder_cmd.cpp holds the problem options; the cuBLAS baselines it names are the no-GPU stubs here.)
add_executable(flashladder_ring_launcher ring_launcher_main.cpp ring_fake_rank.cpp ${PROJECT_SOURCE_DIR}/app/ring_cmd.cpp
               ${PROJECT_SOURCE_DIR}/app/ladder_cmd.cpp ${PROJECT_SOURCE_DIR}/app/lab_cmd.cpp
               ${PROJECT_SOURCE_DIR}/app/baselines_nogpu.cpp)
target_link_libraries(flashladder_ring_launcher PRIVATE flashladder_core CLI11::CLI11)
target_compile_definitions(flashladder_ring_launcher PRIVATE FLASHLADDER_HAVE_NCCL  # the launcher's path; no NCCL is called
  # app/ladder_cmd.cpp's `diff` looks for installed step sources (the program's own definitions)
  FLASHLADDER_INSTALL_DATADIR="${CMAKE_INSTALL_DATADIR}" FLASHLADDER_INSTALL_BINDIR="${CMAKE_INSTALL_BINDIR}"
  # and `diff` hides the lab marks with app/lab_cmd.cpp's helper, which needs the lab kit's definitions
  FLASHLADDER_BINARY_DIR="${CMAKE_BINARY_DIR}" FLASHLADDER_CMAKE_COMMAND="${CMAKE_COMMAND}")
target_compile_options(flashladder_ring_launcher PRIVATE $<$<BOOL:${FLASHLADDER_NATIVE}>:-march=native>)
# fl_ring_launcher_test(name exit-status regex [ENV VAR=value …] ARGS ring-arguments …)
function(fl_ring_launcher_test name rc expect)
  cmake_parse_arguments(T "" "" "ENV;ARGS" ${ARGN})
  add_test(NAME ring_launcher.${name} COMMAND ${CMAKE_COMMAND} -E env ${T_ENV} FAKE_RING_GPUS=2
           ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:flashladder_ring_launcher> "-DARGS=ring;${T_ARGS}"
           -DEXPECT_RC=${rc} "-DEXPECT=${expect}" -DNO_SKIP=1 -P ${CMAKE_CURRENT_SOURCE_DIR}/ring_run.cmake)
  set_tests_properties(ring_launcher.${name} PROPERTIES TIMEOUT 120)
endfunction()
fl_ring_launcher_test(pass_zigzag_bwd 0 "" ARGS --gpus;2;--causal;--backward;-B;2;-H;6;--heads-kv;2;-N;201;-d;64;--reps;1)
fl_ring_launcher_test(pass_sampled 0 "" ARGS --gpus;2;--layout;contiguous;--backward;-B;1;-H;2;--heads-kv;1;-N;1500;-d;64;--check;sampled;--check-kv-heads;1;--reps;1)
fl_ring_launcher_test(failed_rank_ends_the_hung_one 2 "rank 1 exited with status 1: rank 1: failure injected.*rank 0 was killed by signal 15 \\(ended by the launcher\\)"
  ENV FLASHLADDER_RING_FAIL_RANK=1 FAKE_RING_HANG_RANK=0 ARGS --gpus;2;-N;64;-H;2;-d;64;--timeout;100)
fl_ring_launcher_test(timeout_ends_a_hung_rank 2 "the run passed --timeout 2 s; ranks still running: 1"
  ENV FAKE_RING_HANG_RANK=1 ARGS --gpus;2;-N;64;-H;2;-d;64;--timeout;2)
fl_ring_launcher_test(unwritten_row_fails 1 "O: FAIL .*first \\(0, 0, 64, 0\\) step=nan"
  ENV FAKE_RING_NAN_RANK=1 ARGS --gpus;2;--layout;contiguous;-B;1;-H;2;-N;128;-d;64;--reps;0)
fl_ring_launcher_test(too_few_gpus 2 "needs 3 GPUs; this machine has 2" ARGS --gpus;3;-N;64)
# More K/V heads to judge than the problem has was accepted, and H_kv of them judged; the default (2)
# still takes the one head of H_kv = 1.
fl_ring_launcher_test(check_kv_heads_over_h_kv 2 "--check-kv-heads 3: the problem has 2 K/V heads \\(--heads-kv\\); at most that many"
  ARGS --gpus;2;--backward;-H;4;--heads-kv;2;-N;64;-d;64;--check;sampled;--check-kv-heads;3)
fl_ring_launcher_test(default_check_kv_heads_one_head 0 "" ARGS --gpus;2;--layout;contiguous;--backward;-B;1;-H;2;--heads-kv;1;-N;256;-d;64;--check;sampled;--reps;1)

if(NOT FLASHLADDER_HAVE_NCCL)
  # A visible skip (exit 77), a failure under FLASHLADDER_REQUIRE_GPU (as gpu_gate.cmake and lab_test.cmake
  # treat a build without the GPU code): a GPU run must not pass with step 11 silently left out.
  add_test(NAME ring.not_built COMMAND sh -c "if [ -n \"$FLASHLADDER_REQUIRE_GPU\" ] && [ \"$FLASHLADDER_REQUIRE_GPU\" != 0 ]; then echo \"FLASHLADDER_REQUIRE_GPU is set but step 11 is not in this build: $0\"; exit 1; fi; echo \"GPU test skipped: step 11 is not in this build: $0\"; exit 77"
           "${FLASHLADDER_NCCL_WHY}")
  set_tests_properties(ring.not_built PROPERTIES SKIP_RETURN_CODE 77)
  return()
endif()

# Refusals, before any GPU is looked for (they run in CI).
fl_cli_fails(ring_does_not_split "the sequence does not split: N = 3 is less than the 4 chunks of the zigzag layout on 2 GPUs"
  ring --gpus 2 --layout zigzag -N 3 -d 64)
fl_cli_fails(ring_nq_nk "needs Nq = Nk" ring --gpus 2 --nq 64 --nk 65)
fl_cli_fails(ring_bitwise_needs_one "--bitwise-local needs --gpus 1 --layout contiguous" ring --gpus 2 --bitwise-local)
fl_cli_fails(ring_nccl_ctas_range "--nccl-ctas 33 is out of range: 0 \\(NCCL's choice\\) or 1-32" ring --gpus 2 -N 64 --nccl-ctas 33)
fl_cli_test(ring_help "ring attention on G GPUs" ring --help)

function(fl_ring_test name)
  add_test(NAME ring.${name} COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:flashladder> "-DARGS=ring;${ARGN}"
           -P ${CMAKE_CURRENT_SOURCE_DIR}/ring_run.cmake)
  # Each rank takes a whole GPU: one ring test at a time.
  set_tests_properties(ring.${name} PROPERTIES SKIP_REGULAR_EXPRESSION "GPU test skipped" TIMEOUT 1500
                       RESOURCE_LOCK fl_ring_gpus LABELS ring)
endfunction()

set(small --reps;2;--warmup;1)
# 2 GPUs, the full oracle: causal and not, both layouts, GQA, N not a multiple of the chunks, fp16, bf16.
fl_ring_test(g2_zigzag_causal_gqa_fp16 --gpus;2;--layout;zigzag;--causal;--backward;-B;2;-H;6;--heads-kv;2;-N;1001;-d;128;${small})
fl_ring_test(g2_zigzag_causal_mqa_bf16 --gpus;2;--layout;zigzag;--causal;--backward;-B;1;-H;4;--heads-kv;1;-N;517;-d;64;--dtype;bf16;${small})
fl_ring_test(g2_zigzag_full_fp16 --gpus;2;--layout;zigzag;--backward;-B;2;-H;3;-N;1025;-d;64;${small})
fl_ring_test(g2_contiguous_causal_bf16 --gpus;2;--layout;contiguous;--causal;--backward;-B;2;-H;6;--heads-kv;3;-N;999;-d;128;--dtype;bf16;${small})
fl_ring_test(g2_contiguous_full_fp16_gqa --gpus;2;--layout;contiguous;--backward;-B;1;-H;4;--heads-kv;2;-N;97;-d;128;${small})
fl_ring_test(g2_zigzag_causal_d64_fp16 --gpus;2;--layout;zigzag;--causal;--backward;-B;1;-H;2;-N;777;-d;64;${small})
# NCCL's kernels held to 2 thread blocks (--nccl-ctas): slower hops, the same answer.
fl_ring_test(g2_zigzag_causal_gqa_fp16_ctas2 --gpus;2;--layout;zigzag;--causal;--backward;-B;2;-H;6;--heads-kv;2;-N;1001;-d;128;--nccl-ctas;2;${small})
# Long: sampled rows (dK, dV on one K/V head: a full O(N²·d) CPU pass).
fl_ring_test(g2_zigzag_causal_32768_sampled --gpus;2;--layout;zigzag;--causal;--backward;-B;1;-H;4;--heads-kv;2;-N;32768;-d;128;--check;sampled;--check-kv-heads;1;${small})
# 3 and 4 GPUs (skipped on fewer): the backward's steps s ≥ 2, which add to a sum that arrived, exist
# only from G = 3 (on 2 GPUs step 1 starts the sum and the final hop takes it home).
fl_ring_test(g3_contiguous_causal_fp16 --gpus;3;--layout;contiguous;--causal;--backward;-B;1;-H;4;--heads-kv;2;-N;999;-d;128;${small})
fl_ring_test(g4_zigzag_causal_gqa_fp16 --gpus;4;--layout;zigzag;--causal;--backward;-B;2;-H;6;--heads-kv;2;-N;1001;-d;128;${small})
# 1 GPU: the ring of one equals the local steps bit for bit (contiguous), and zigzag passes the rule.
fl_ring_test(g1_bitwise_causal --gpus;1;--layout;contiguous;--causal;--backward;--bitwise-local;-B;2;-H;4;--heads-kv;2;-N;1025;-d;128;${small})
fl_ring_test(g1_bitwise_full_bf16 --gpus;1;--layout;contiguous;--backward;--bitwise-local;-B;1;-H;3;-N;300;-d;64;--dtype;bf16;${small})
fl_ring_test(g1_zigzag_causal --gpus;1;--layout;zigzag;--causal;--backward;-B;1;-H;4;-N;1001;-d;128;${small})
# A rank that fails must not hang the others: rank 1 fails once the communicator is up; rank 0 waits in
# NCCL for it until the launcher ends it; the run exits 2 naming rank 1, well inside the test timeout.
add_test(NAME ring.g2_failed_rank_is_named COMMAND ${CMAKE_COMMAND} -E env FLASHLADDER_RING_FAIL_RANK=1
         ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:flashladder> "-DARGS=ring;--gpus;2;-N;256;-H;2;-d;64;--timeout;120"
         -DEXPECT_RC=2 "-DEXPECT=rank 1 exited with status 1: rank 1: failure injected"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/ring_run.cmake)
set_tests_properties(ring.g2_failed_rank_is_named PROPERTIES SKIP_REGULAR_EXPRESSION "GPU test skipped" TIMEOUT 300
                     RESOURCE_LOCK fl_ring_gpus LABELS ring)
