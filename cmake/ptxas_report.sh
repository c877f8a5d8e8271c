#!/usr/bin/env bash
# flashladder — cmake/ptxas_report.sh: the CUDA compiler launcher of the step objects (CMakeLists.txt).
# Runs the build's own nvcc command with ptxas's -v report on and keeps that report beside the object
# (<object>.ptxas.txt): registers, spill bytes and static shared memory of every kernel, exactly as
# the build compiled it. scripts/resources_table.py writes the step pages' resources blocks from these
# files (and the docs.resources_table test checks them), so nothing is compiled a second time.
# Whatever else the compiler prints (warnings, errors) goes to the build's output as before; the
# report's lines do not.
set -u
obj="" prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && obj=$a
  prev=$a
done
[ -n "$obj" ] || exec "$@"
report="$obj.ptxas.txt"
"$@" -Xptxas=-v >"$report.tmp" 2>&1
rc=$?
grep -v -E '^ptxas info +: |^ +[0-9]+ bytes stack frame, ' "$report.tmp" >&2
mv -f "$report.tmp" "$report"
touch "$report"  # newer than its object: a report older than the object is from another compile
exit $rc
