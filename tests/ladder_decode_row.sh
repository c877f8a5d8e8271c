#!/bin/sh
# flashladder — tests/ladder_decode_row.sh FLASHLADDER WORK_DIR: the ladder's decode row (issue 17: "the
# default ladder run includes one decode row so a reader sees why it exists"). A run given no problem
# option and no --sweep ends with it (B 1, H 32, H_kv 8, Nq 1, Nk 32768, d 128; K+V bytes per second in
# the table and in the JSON records); a problem option leaves it out, --decode brings it back, --no-decode
# drops it, and the two together are refused. CPU steps only: runs anywhere.
F=$1; T=$2
rm -rf "$T" && mkdir -p "$T" || exit 1
. "$(dirname "$0")/cli_expect.sh"  # fail=0; expect RC REGEX COMMAND...
head="decode: B=1 H=32 H_kv=8 Nq=1 Nk=32768 d=128 causal=0 fp16"
expect 0 "$head" "$F" --steps 02 --reps 1 --warmup 0 --json "$T/d.jsonl"
expect 0 "median ms   TFLOP/s K\+V TB/s" "$F" --steps 02 --reps 1 --warmup 0
# The record of the decode row: the problem, its K+V bytes (fp32 on the CPU: 2 x 8 x 32768 x 128 x 4) and
# its rate (K+V bytes over the median time, within 1e-6), checked. One JSON object per line, keys sorted.
dec=$(grep '"Nk":32768,"Nq":1,' "$T/d.jsonl")
n=$(printf '%s\n' "$dec" | grep -c .)
field() { printf '%s' "$dec" | sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
if [ "$n" -ne 1 ] || [ "$(field impl)" != '"02_cpu_online_softmax"' ] || [ "$(field B)" != 1 ] || [ "$(field H)" != 32 ] ||
   [ "$(field H_kv)" != 8 ] || [ "$(field d)" != 128 ] || [ "$(field kv_bytes)" != 268435456.0 ] ||
   [ "$(field pass_check)" != true ] ||
   ! awk -v r="$(field kv_bytes_per_s)" -v t="$(field median_ms)" 'BEGIN { x = r * t * 1e-3 / 268435456; exit !(x > 1 - 1e-6 && x < 1 + 1e-6) }'; then
  echo "FAILED: the decode row's record ($n of them): $dec" | head -c 600; echo; fail=1
fi
# Absent where a problem option or --no-decode is given; present again with --decode.
for args in "-N 64" "--sweep 32,64" "--dtype fp32" "--no-decode"; do
  out=$("$F" --steps 02 --reps 1 --warmup 0 $args 2>&1); rc=$?
  if [ $rc -ne 0 ] || printf '%s' "$out" | grep -q "^decode:"; then
    echo "FAILED: flashladder --steps 02 $args -> exit $rc, and a decode row where none was wanted: $out" | head -c 600; echo; fail=1
  fi
done
expect 0 "$head" "$F" --steps 02 --reps 1 --warmup 0 -N 64 --decode
expect 2 "--decode excludes --no-decode" "$F" --decode --no-decode
[ $fail -eq 0 ] && echo "the decode row is where it should be"
exit $fail
