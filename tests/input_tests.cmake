# flashladder — tests/input_tests.cmake: issue 13's bad input, each through the program with its exit
# status and message (fl_cli_exit from oracle_tests.cmake: 0 pass, 1 failed check, 2 bad input).
# Included from tests/CMakeLists.txt after oracle_tests.cmake.

# --- Row 1: the oracle's memory is O(N) -----------------------------------------------------------
# Under an address-space cap that the whole-matrix oracle cannot meet (checked by hand: it dies with
# std::bad_alloc inside its OpenMP region, exit 134, under both caps below), the blocked oracle
# passes. check at N = 16384 under 3 GiB: S alone was 2 GiB of doubles, and P as much. generate at
# N = 8192, d = 8 under 1.5 GiB: it runs the backward (P, dP, dS of 512 MiB each) and both
# baselines. Two threads and two malloc arenas, so the cap measures the oracle and not the
# per-thread reservations of a many-core machine.
set(FL_MEMCAP ${CMAKE_CURRENT_SOURCE_DIR}/with_memory_limit.sh)
add_test(NAME cli.oracle_memory_check COMMAND ${CMAKE_COMMAND} -DCMD=${FL_MEMCAP}
         "-DARGS=3145728;$<TARGET_FILE:flashladder>;check;-N;16384;-B;1;-H;1;--steps;02"
         "-DRC=0" "-DEXPECT=02_cpu_online_softmax: pass.*all checks passed" -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake)
add_test(NAME cli.oracle_memory_generate COMMAND ${CMAKE_COMMAND} -DCMD=${FL_MEMCAP}
         "-DARGS=1572864;$<TARGET_FILE:flashladder>;oracle;generate;--out;${G}/long;-N;8192;-B;1;-H;1;-d;8"
         "-DRC=0" "-DEXPECT=wrote 9 tensors and manifest.json" -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake)
set_tests_properties(cli.oracle_memory_check cli.oracle_memory_generate PROPERTIES TIMEOUT 900
                     ENVIRONMENT "OMP_NUM_THREADS=2;MALLOC_ARENA_MAX=2")

# --- Row 2: 0 is not "unset" ----------------------------------------------------------------------
fl_cli_exit(nq_zero 2 "--nq 0 is not allowed: the query length Nq must be at least 1" check --steps 01 -N 16 --nq 0)
fl_cli_exit(nk_zero 2 "--nk 0 is not allowed: the key length Nk must be at least 1" check --steps 01 -N 16 --nk 0)
fl_cli_exit(heads_kv_zero 2 "--heads-kv 0 is not allowed: the key/value heads H_kv must be at least 1"
            check --steps 01 -N 16 --heads-kv 0)
fl_cli_exit(ladder_nq_zero 2 "--nq 0 is not allowed" --steps 01 -N 16 --nq 0)
fl_cli_exit(generate_nq_zero 2 "--nq 0 is not allowed" oracle generate --out ${G}/unused -N 16 --nq 0)
fl_cli_exit(generate_heads_kv_zero 2 "--heads-kv 0 is not allowed" oracle generate --out ${G}/unused -N 16 --heads-kv 0)

# --- Row 4 (the command line half): --seed -1 is not 2^64 - 1 -------------------------------------
fl_cli_exit(seed_negative 2 "seed '-1' is not allowed: it must be an integer from 0 to 2\\^64 - 1" check --steps 01 -N 16 --seed -1)
fl_cli_exit(generate_seed_float 2 "seed '1.5' is not allowed" oracle generate --out ${G}/unused -N 16 --seed 1.5)

# --- The command line reads decimal: CLI11 took a leading 0 for octal (-N 010 ran N = 8; 08 was refused)
fl_cli_exit(decimal_not_octal 0 "problem: B=1 H=2 H_kv=1 Nq=10 Nk=8 d=16 "
            --steps 01 -B 01 -H 02 --heads-kv 01 --nq 010 --nk 08 -d 016 --reps 1 --warmup 0)
fl_cli_exit(varlen_decimal 0 "Nq=10 Nk=12 d=16 .*varlen" check --steps 01 -H 1 -d 16 --cu-seqlens-q 0,010 --cu-seqlens-k 0,012)
fl_cli_exit(steps_head_dim_decimal 0 "08k_persistent" steps --head-dim 0128)
# Variable length's offsets are int32: the message says so (it was "Could not convert").
fl_cli_exit(cu_seqlens_int32 2 "--cu-seqlens-k: 3000000000 is not allowed: the offsets must fit in int32 \\(<= 2\\^31 - 1"
            check --steps 01 -H 1 -d 16 --cu-seqlens-q 0,10 --cu-seqlens-k 0,10,3000000000)

# --- Row 3: records that cannot be written end the run with the file named ------------------------
if(EXISTS /dev/full)
  fl_cli_exit(json_disk_full 2 "writing a record to '/dev/full' failed: No space left on device"
              --steps 01 -B 1 -H 1 -N 16 -d 8 --reps 1 --warmup 0 --json /dev/full)
endif()

# --- Rows 4 to 6: broken golden sets (tests/break_golden.py), refused whatever the candidate ------
if(FL_TESTS_PYTHON3)
  add_test(NAME cli.golden_broken_setup COMMAND ${FL_TESTS_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/break_golden.py
           ${G}/golden ${G}/broken)
  set_tests_properties(cli.golden_broken_setup PROPERTIES FIXTURES_REQUIRED fl_golden FIXTURES_SETUP fl_golden_broken)
  function(fl_broken name variant candidate expect_regex)
    fl_cli_exit(golden_${name} 2 "${expect_regex}" oracle check --golden ${G}/broken/${variant} --candidate ${candidate})
    set_tests_properties(cli.golden_${name} PROPERTIES FIXTURES_REQUIRED "fl_golden;fl_golden_broken;fl_run01")
  endfunction()
  fl_broken(b_float b_float ${G}/run01 "field 'B' = 1.9 is not allowed: it must be an integer from 1 to")
  fl_broken(b_huge b_huge ${G}/run01 "field 'B' = 1e300 is not allowed")
  fl_broken(b_negative b_negative ${G}/run01 "field 'B' = -1 is out of range")
  fl_broken(version_float version_float ${G}/run01 "field 'format_version' = 1.9 is not allowed")
  fl_broken(seed_negative seed_negative ${G}/run01 "field 'seed' = -1 is out of range: it must be an integer from 0 to 18446744073709551615")
  fl_broken(tol_inflated tol_inflated ${G}/run01 "tensors.o: tol = 1e300 disagrees with the manifest's own rule: 2 \\* baseline_err")
  # A NaN in the answers is the golden set's fault: exit 2 with a passing candidate (step 01's
  # outputs) and with the golden answers themselves as the candidate.
  fl_broken(o_nan o_nan ${G}/run01 "o.npy: the golden set is broken: entry 3 is nan")
  fl_broken(o_nan_self o_nan ${G}/golden "o.npy: the golden set is broken: entry 3 is nan")
  # A scale fp32 cannot hold ran `run` to outputs of NaN with exit 0: every step refuses it by the limit.
  fl_cli_exit(run_scale_over_fp32 2 "step 02_cpu_online_softmax: takes the softmax scale in fp32, which holds 1.18e-38 to 3.4e38, not 1e\\+308"
              run --step 02 --in ${G}/broken/scale_huge --out ${G}/scale_huge_out)
  set_tests_properties(cli.run_scale_over_fp32 PROPERTIES FIXTURES_REQUIRED "fl_golden;fl_golden_broken")
else()
  add_test(NAME cli.golden_broken_setup COMMAND ${CMAKE_COMMAND} -E echo "skipped: python3 not found")
  set_tests_properties(cli.golden_broken_setup PROPERTIES SKIP_REGULAR_EXPRESSION "skipped: python3 not found")
endif()

# --- The newcomer's path: steps that could not run are not failures ------------------------------
# Exit 0 with or without a GPU: without one the GPU steps are "not run: no GPU" and the CPU steps pass.
fl_cli_exit(check_newcomer 0 "01_cpu_standard: pass.*02_cpu_online_softmax: pass.*all checks passed" check -N 16 -B 1 -H 2 -d 64)
fl_cli_exit(ladder_no_check 0 "every step that ran completed \\(unchecked: --no-check\\)"
            -N 16 -B 1 -H 1 -d 64 --no-check --reps 1 --warmup 0)
# A baseline that overflows is the problem's fault (bad input), not the step's.
fl_cli_exit(scale_overflow 2 "no tolerance can be given for .*scale=1e\\+38.*baseline's O is not finite" check --steps 01 -N 16 --scale 1e38)
if(NOT FLASHLADDER_HAVE_CUDA)
  # Without CUDA every GPU step is "not run: no GPU"; a required GPU turns that into exit 1.
  fl_cli_exit(check_no_gpu_listed 0 "05_fa2_lse: not run: no GPU.*steps: 1 passed, 1 not run: no GPU" check -N 16 --steps 01,05)
  fl_cli_exit(check_require_gpu_env 1 "A GPU is required \\(--require-gpu or FLASHLADDER_REQUIRE_GPU\\): 1 GPU step" check -N 16 --steps 01,05)
  set_tests_properties(cli.check_require_gpu_env PROPERTIES ENVIRONMENT FLASHLADDER_REQUIRE_GPU=1)
  fl_cli_exit(check_require_gpu_flag 1 "A GPU is required" check -N 16 --steps 01,05 --require-gpu)
  fl_cli_exit(check_nothing_ran 1 "no step ran: nothing was checked" check -N 16 --steps 05)
endif()
# oracle check's table: a huge fraction of the tolerance still leaves its columns apart.
fl_cli_exit(oracle_check_columns 1 "o    FAIL +[0-9.e+-]+ +[0-9.e+-]+ +[0-9.e+]+% +0 +0  \\(0, 0,"
            oracle check --golden ${G}/golden --candidate ${G}/other)
set_tests_properties(cli.oracle_check_columns PROPERTIES FIXTURES_REQUIRED "fl_golden;fl_golden_other")

# --- The audit of 2026-11-29 (afternoon): sizes, windows, repetitions, sweeps, empty values ---------
# B · Nq wrapped int64 to 0 and passed the 2^40 limit; the oracle then read far out of bounds (exit 139).
fl_cli_exit(batch_times_n_wraps 2 "B = 4611686018427387904 is more than the limit 2\\^40"
            check --steps 01 -B 4611686018427387904 -N 4 -H 1 -d 1)
# diag ± window overflowed and masked visible keys in the oracle and the CPU steps alike: check passed.
fl_cli_exit(window_huge 2 "window_left = 9223372036854775807 is more than 2\\^40 keys, the limit: -1 is the unbounded window"
            check --steps 01 -B 1 -H 1 -N 8 -d 16 --window 9223372036854775807,0)
# warmup + reps wrapped negative: nothing was timed, and the row said 0 ms and inf TFLOP/s.
fl_cli_exit(warmup_too_many 2 "--warmup: Value 2147483647 not in range 0 to 1000000" --steps 01 -N 16 --reps 1 --warmup 2147483647)
fl_cli_exit(reps_zero 2 "--reps: Value 0 not in range 1 to 1000000" --steps 01 -N 16 --reps 0)
# Every sweep point is judged first; a packed batch or seqused_k cannot be swept (Nq = Nk = N).
fl_cli_exit(sweep_varlen 2 "--sweep sets Nq = Nk = N: it cannot sweep a problem with --cu-seqlens-q"
            --steps 01 -H 1 -d 8 --cu-seqlens-q 0,4,8 --cu-seqlens-k 0,4,8 --sweep 2,16 --reps 1 --warmup 0)
fl_cli_exit(sweep_point_too_big 2 "--sweep point N = 2000000000000: Nq = 2000000000000 is more than the limit 2\\^40"
            --steps 01 -B 1 -H 1 -d 8 --sweep 16,2000000000000 --reps 1 --warmup 0)
# An empty value is not a number (-B "" read as B = 0; --seqused-k "" as one 0, which masked every key):
# a script, since a CMake list cannot carry an empty argument.
add_test(NAME cli.empty_values COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/empty_values.sh $<TARGET_FILE:flashladder>)
# run --out on a golden folder replaced the oracle's o.npy, lse.npy with the step's.
fl_cli_exit(run_over_golden 2 "holds a golden set \\(manifest.json\\): the step's outputs would replace the oracle's"
            run --step 01 --in ${G}/golden --out ${G}/golden)
set_tests_properties(cli.run_over_golden PROPERTIES FIXTURES_REQUIRED fl_golden)
if(EXISTS /dev/full)
  fl_cli_exit(lab_new_not_a_folder 2 "/dev/full exists and is not a folder" lab new 02 /dev/full)
endif()
# The rest of that audit (lab check of a folder naming another step, --solution with --mutate, a fixture
# that is not a file, flashladder_launches' lost output, ring and bench names checked first): a script.
if(TARGET flashladder_launches)  # built where nvcc is (CI has it)
  set(FL_LAUNCHES_EXE $<TARGET_FILE:flashladder_launches>)
else()
  set(FL_LAUNCHES_EXE none)
endif()
add_test(NAME cli.refusals_with_files COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_refusals.sh $<TARGET_FILE:flashladder>
         ${FL_LAUNCHES_EXE} ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/cli_refusals
         $<TARGET_FILE:flashladder_ring_launcher>)

# --- The audit of 2026-12-06: the out-of-memory hint names only an option the command has ----------
# oracle generate was told "or --no-check", an option only the ladder has (CLI11 then refused it).
# 100000-long sequences under 1.5 GiB: the inputs alone do not fit, the error comes at once.
add_test(NAME cli.generate_out_of_memory_hint COMMAND ${CMAKE_COMMAND} -DCMD=${FL_MEMCAP}
         "-DARGS=1500000;$<TARGET_FILE:flashladder>;oracle;generate;-N;100000;-B;4;-H;16;--out;${G}/oom" -DRC=2
         "-DEXPECT=out of host memory: .*; choose a smaller problem\n" -DREJECT=--no-check
         -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake)
# The ladder has the option: a checked run is still pointed to it.
add_test(NAME cli.ladder_out_of_memory_hint COMMAND ${CMAKE_COMMAND} -DCMD=${FL_MEMCAP}
         "-DARGS=1500000;$<TARGET_FILE:flashladder>;--steps;02;-N;100000;-B;4;-H;16;--reps;1;--warmup;0" -DRC=2
         "-DEXPECT=out of host memory: .*; choose a smaller problem or --no-check\n"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake)
set_tests_properties(cli.generate_out_of_memory_hint cli.ladder_out_of_memory_hint PROPERTIES TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=2;MALLOC_ARENA_MAX=2")

# --- Integers beyond the option's type: the text as typed and the type's range ---------------------
# CLI11 saturated int64: -N 99999999999999999999 was "Nq = 9223372036854775807 is more than the limit
# 2^40", a number nobody typed (-N -99999999999999999999 as -9223372036854775808); beyond an int it said
# only "Could not convert: --timeout = 99999999999".
set(FL_INT64_RANGE "is not allowed: it must be an integer from -2\\^63 to 2\\^63 - 1 = 9223372036854775807")
fl_cli_exit(huge_n 2 "--seq: 99999999999999999999 ${FL_INT64_RANGE}" check --steps 01 -N 99999999999999999999)
fl_cli_exit(huge_negative_n 2 "--seq: -99999999999999999999 ${FL_INT64_RANGE}" check --steps 01 -N -99999999999999999999)
fl_cli_exit(huge_hex_n 2 "--seq: 0x10000000000000000 ${FL_INT64_RANGE}" check --steps 01 -N 0x10000000000000000)
fl_cli_exit(huge_batch 2 "--batch: 99999999999999999999 ${FL_INT64_RANGE}" check --steps 01 -B 99999999999999999999)
fl_cli_exit(huge_nq 2 "--nq: 99999999999999999999 ${FL_INT64_RANGE}" check --steps 01 --nq 99999999999999999999)
fl_cli_exit(huge_heads_kv 2 "--heads-kv: 99999999999999999999 ${FL_INT64_RANGE}" check --steps 01 --heads-kv 99999999999999999999)
fl_cli_exit(huge_window 2 "--window: 99999999999999999999 ${FL_INT64_RANGE}" check --steps 01 --window 99999999999999999999,0)
fl_cli_exit(huge_sweep 2 "--sweep: 99999999999999999999 ${FL_INT64_RANGE}" --steps 01 --sweep 16,99999999999999999999)
fl_cli_exit(huge_generate_n 2 "--seq: 99999999999999999999 ${FL_INT64_RANGE}" oracle generate --out ${G}/unused -N 99999999999999999999)
# The ring's options are ints (refused at parsing, so in every build).
set(FL_INT_RANGE "is not allowed: it must be an integer from -2\\^31 to 2\\^31 - 1 = 2147483647")
fl_cli_exit(huge_ring_timeout 2 "--timeout: 99999999999 ${FL_INT_RANGE}" ring --timeout 99999999999)
fl_cli_exit(huge_ring_gpus 2 "--gpus: 99999999999 ${FL_INT_RANGE}" ring --gpus 99999999999)
fl_cli_exit(huge_ring_nccl_ctas 2 "--nccl-ctas: -99999999999 ${FL_INT_RANGE}" ring --nccl-ctas -99999999999)
fl_cli_exit(huge_ring_check_kv_heads 2 "--check-kv-heads: 99999999999 ${FL_INT_RANGE}" ring --check-kv-heads 99999999999)
# Where an option has a range of its own, that range is named (not the type's).
fl_cli_exit(huge_reps 2 "--reps: Value 99999999999999999999 not in range 1 to 1000000" --steps 01 --reps 99999999999999999999)
# In range of the type, the value reaches the problem's own limit, quoted as typed.
fl_cli_exit(big_n 2 "Nq = 9223372036854775807 is more than the limit 2\\^40" check --steps 01 -N 9223372036854775807)

# --- bench times GPU steps: a CPU step named in its lists is refused (before the GPU is looked for) ----
# Only "all" was filtered: bench --steps 01 ran step 01 and recorded its CPU time under the GPU's
# environment, though the help says "GPU steps".
fl_cli_exit(bench_cpu_step 2 "--steps 01_cpu_standard runs on the CPU; the benchmark times GPU steps" bench --steps 05,01)
fl_cli_exit(bench_sweep_cpu_step 2 "--sweep-steps 02_cpu_online_softmax runs on the CPU; the benchmark times GPU steps"
            bench --sweep-steps 02)

# --- flashladder diff removes its temporary folder on every path out, a failed copy included ---------
add_test(NAME cli.diff_temp_folder COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/diff_temp_folder.sh $<TARGET_FILE:flashladder>
         ${CMAKE_CURRENT_BINARY_DIR}/diff_temp_folder)

# The audit of the program's files (a failed generate, run's stale outputs, lab new --force, .npy
# files larger than their header says): a script, since each case leaves files to look at.
add_test(NAME cli.files COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_files.sh $<TARGET_FILE:flashladder>
         ${CMAKE_CURRENT_BINARY_DIR}/cli_files)

# --- Issue 17's decode row: after the table of a run given no problem option and no --sweep ----------
# (and with --decode; not with a problem option or --no-decode). CPU steps: runs anywhere.
add_test(NAME cli.ladder_decode_row COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/ladder_decode_row.sh $<TARGET_FILE:flashladder>
         ${CMAKE_CURRENT_BINARY_DIR}/ladder_decode_row)
