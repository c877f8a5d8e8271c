# flashladder — tests/variant_tests.cmake: the attention variants of issue 21 through the program: a
# golden set with every variant (window, softcap, ALiBi [B][H], varlen, seqused_k), step 01 run on its
# files and judged by `oracle check`, `check` of the CPU steps on a variant problem, and each malformed
# option refused with exit 2 and a message naming the field. Included from tests/CMakeLists.txt after
# oracle_tests.cmake (fl_cli_exit).
set(GV ${CMAKE_CURRENT_BINARY_DIR}/variant_cli)
fl_cli_exit(variant_generate 0 "window=\\(8,2\\) softcap=5 alibi=batch_heads varlen seqused_k.*alibi_slopes.npy.*wrote 10 tensors and manifest.json"
            oracle generate --out ${GV}/golden -H 4 --heads-kv 2 --cu-seqlens-q 0,9,30 --cu-seqlens-k 0,17,20
            --seqused-k 12,3 -d 16 --causal --window 8,2 --softcap 5 --alibi batch_heads --dtype bf16 --seed 3)
fl_cli_exit(variant_run01 0 "wrote .*o.npy" run --step 01 --in ${GV}/golden --out ${GV}/run01)
fl_cli_exit(variant_check01 0 "oracle check: PASS \\(2 tensors" oracle check --golden ${GV}/golden --candidate ${GV}/run01)
fl_cli_exit(variant_check_itself 0 "oracle check: PASS \\(5 tensors" oracle check --golden ${GV}/golden --candidate ${GV}/golden --backward)
set_tests_properties(cli.variant_generate PROPERTIES FIXTURES_SETUP fl_variant_golden)
set_tests_properties(cli.variant_run01 PROPERTIES FIXTURES_REQUIRED fl_variant_golden FIXTURES_SETUP fl_variant_run01)
set_tests_properties(cli.variant_check01 PROPERTIES FIXTURES_REQUIRED "fl_variant_golden;fl_variant_run01")
set_tests_properties(cli.variant_check_itself PROPERTIES FIXTURES_REQUIRED fl_variant_golden)
fl_cli_exit(variant_check_steps 0 "01_cpu_standard: pass \\(B=2 H=3 H_kv=3 Nq=20 Nk=33 d=8 causal=0 fp32 scale=0.35[0-9]* window=\\(3,-1\\) softcap=2 alibi=heads.*02_cpu_online_softmax: pass"
            check --steps 01,02 -B 2 -H 3 --nq 20 --nk 33 -d 8 --window 3,-1 --softcap 2 --alibi heads --dtype fp32)
fl_cli_exit(variant_check_varlen 0 "01_cpu_standard: pass \\(B=3 H=2 H_kv=1 Nq=25 Nk=30 .*varlen"
            check --steps 01 -H 2 --heads-kv 1 -d 8 --cu-seqlens-q 0,5,5,30 --cu-seqlens-k 0,7,37,40 --causal --dtype fp32)
# Bad input: exit 2, the field named.
fl_cli_exit(variant_bad_window 2 "window_left = -2 is not allowed: it must be -1 \\(unbounded\\) or a number of keys >= 0"
            check --steps 01 --window=-2,0)
fl_cli_exit(variant_bad_window_right 2 "window_right = -5 is not allowed" check --steps 01 --window 4,-5)
fl_cli_exit(variant_window_one_number 2 "--window" check --steps 01 --window 5)
fl_cli_exit(variant_bad_softcap 2 "softcap = 0 is not allowed: it must be finite and > 0" check --steps 01 --softcap 0)
fl_cli_exit(variant_nan_softcap 2 "softcap = nan is not allowed" check --steps 01 --softcap nan)
fl_cli_exit(variant_bad_alibi 2 "--alibi 'tails' is not allowed: use heads or batch_heads" check --steps 01 --alibi tails)
fl_cli_exit(variant_offsets_decrease 2 "cu_seqlens_q\\[2\\] = 3 is less than cu_seqlens_q\\[1\\] = 5: the offsets must not decrease"
            check --steps 01 --cu-seqlens-q 0,5,3 --cu-seqlens-k 0,2,4)
fl_cli_exit(variant_offsets_not_from_zero 2 "cu_seqlens_k\\[0\\] = 1 is not allowed: the offsets must start at 0"
            check --steps 01 --cu-seqlens-q 0,5,6 --cu-seqlens-k 1,2,4)
fl_cli_exit(variant_q_without_k 2 "cu_seqlens_q is given without cu_seqlens_k" check --steps 01 --cu-seqlens-q 0,5,9)
fl_cli_exit(variant_batch_disagrees 2 "-B 3 disagrees with --cu-seqlens-q, which gives 2 sequence" check --steps 01 -B 3 --cu-seqlens-q 0,5,9 --cu-seqlens-k 0,5,9)
fl_cli_exit(variant_sequence_too_long 2 "sequence 0 has 9 queries \\(cu_seqlens_q\\[1\\] - cu_seqlens_q\\[0\\]\\), more than Nq = 4"
            check --steps 01 --cu-seqlens-q 0,9 --cu-seqlens-k 0,3 --nq 4)
fl_cli_exit(variant_seqused_too_many 2 "seqused_k\\[1\\] = 9 is more than the 8 keys sequence 1 holds \\(Nk\\)" check --steps 01 -N 8 --seqused-k 3,9)
fl_cli_exit(variant_seqused_count 2 "seqused_k has 3 entries; it must have B = 2" check --steps 01 --seqused-k 1,2,3)
fl_cli_exit(variant_generate_bad 2 "softcap = -1 is not allowed" oracle generate --out ${GV}/bad --softcap -1)

# The C API's variant setters (CUDA builds: the C API exists only there), through ctypes.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET flashladder_capi AND Python3_Interpreter_FOUND)
  add_test(NAME capi.variants COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/capi_variants.py
           $<TARGET_FILE:flashladder_capi>)
  set_tests_properties(capi.variants PROPERTIES PASS_REGULAR_EXPRESSION "capi_variants: ok")
endif()
