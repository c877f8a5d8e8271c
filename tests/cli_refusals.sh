#!/bin/sh
# flashladder — tests/cli_refusals.sh FLASHLADDER FLASHLADDER_LAUNCHES SOURCE_DIR WORK_DIR RING_LAUNCHER: the
# refusals of the audit of 2026-11-29 (afternoon) that need files or an empty argument, each an exit status
# and a message (no GPU needed: every refusal comes before one is asked for).
F=$1; L=$2; SRC=$3; T=$4; RL=$5
rm -rf "$T" && mkdir -p "$T" || exit 1
. "$(dirname "$0")/cli_expect.sh"  # fail=0; expect RC REGEX COMMAND...
# lab check judged the archive's step 01 (PASS) for a folder whose CMakeLists.txt was edited to name it.
"$F" lab new 02 "$T/ex" > /dev/null || { echo "lab new 02 failed"; exit 1; }
sed 's/FLASHLADDER_LAB_STEP 02/FLASHLADDER_LAB_STEP 01/' "$T/ex/CMakeLists.txt" > "$T/cml" && mv "$T/cml" "$T/ex/CMakeLists.txt"
expect 2 "names step 01_cpu_standard, which is not an exercise" "$F" lab check "$T/ex"
# The mutated code was handed out labelled as the solution; /dev/zero was read without end.
expect 2 "--solution and --mutate together" "$F" lab new 02 "$T/m" --solution --mutate "$SRC/tests/lab/02_no_rescale_O.txt"
expect 2 "fixture /dev/zero is not a regular file" "$F" lab new 02 "$T/z" --mutate /dev/zero
expect 2 "an empty value is not allowed" "$F" lab new 02 "$T/e" --mutate ""
# Output lost on a full disk was exit 0.
if [ "$L" != none ] && [ -e /dev/full ]; then  # none: a build without nvcc has no flashladder_launches
  expect 2 "writing to standard output failed" sh -c "\"$L\" --splits > /dev/full"
fi
# Names and records judged before any work (and before the GPUs are counted). Where step 11 is not in the
# program (a build without CUDA and NCCL says only that), through flashladder_ring_launcher: the same
# app/ring_cmd.cpp over fake ranks, built everywhere.
R=$F
"$F" ring --step nosuch 2>&1 | grep -q "is not in this build" && R=$RL
expect 2 "--step 'nosuch': unknown step" "$R" ring --step nosuch
expect 2 "--bwd-step 01_cpu_standard runs on the CPU" "$R" ring --backward --bwd-step 01
expect 2 "with --reps 0: nothing is timed" "$R" ring --json "$T/r.jsonl" --reps 0
expect 2 "unknown step 'nosuch'" "$F" bench --steps nosuch
expect 2 "unknown step 'nosuch'" "$F" bench --sweep-steps nosuch
[ $fail -eq 0 ] && echo "every refusal named its problem"
exit $fail
