#!/bin/sh
# flashladder — tests/empty_values.sh PROGRAM: an empty value is not a number. -B "" read as B = 0,
# --seqused-k "" as one 0 (every key masked, and the check passed), --scale "" and --softcap "" were
# dropped without a word, --alibi "" ignored. Each must exit 2 naming the option.
prog=$1
fail=0
for opt in -B -H --nq -d --seqused-k --scale --softcap --alibi; do
  out=$("$prog" check --steps 01 -N 16 "$opt" "" 2>&1); rc=$?
  case $out in
    *"an empty value is not allowed"*) [ $rc -eq 2 ] || { echo "$opt '': exit $rc, not 2"; fail=1; } ;;
    *) echo "$opt '': exit $rc without the refusal: $out"; fail=1 ;;
  esac
done
# Nor is it a path or a list: --json "" wrote no records and exited 0, --steps "" ran every step, bench
# --steps "" every GPU step, ring --step "" its default; the rest failed later with a path of nothing
# (": cannot create the output folder"). refused NAME ARGS...: exit 2 and "NAME: an empty value is not allowed".
refused() {
  name=$1; shift
  out=$(timeout 60 "$prog" "$@" 2>&1); rc=$?
  case $out in
    *"$name: an empty value is not allowed"*) [ $rc -eq 2 ] || { echo "$*: exit $rc, not 2"; fail=1; } ;;
    *) echo "$* (an empty $name): exit $rc without the refusal: $out" | head -c 600; echo; fail=1 ;;
  esac
}
refused --json -N 16 -B 1 -H 1 --steps 02 --reps 1 --warmup 0 --json ""
refused --steps -N 16 -B 1 -H 1 --reps 1 --warmup 0 --steps ""
refused --dtype -N 16 -B 1 -H 1 --steps 01 --dtype ""
refused --steps check -N 16 -B 1 -H 1 --steps ""
refused --json bench --json ""
refused --steps bench --steps ""
refused --sweep-steps bench --sweep-steps ""
refused --headline-dtypes bench --headline-dtypes ""
refused --out oracle generate -N 4 --out ""
refused --golden oracle check --golden "" --candidate /nonexistent
refused --candidate oracle check --golden /nonexistent --candidate ""
refused --step run --step "" --in /nonexistent --out /nonexistent
refused --in run --step 01 --in "" --out /nonexistent
refused --out run --step 01 --in /nonexistent --out ""
refused step diff ""
refused --json ring --json ""
refused --step ring --step ""
refused --bwd-step ring --bwd-step ""
refused --layout ring --layout ""
refused --check ring --check ""
refused step lab new "" /nonexistent/lab
refused dir lab new 02 ""
refused --mutate lab new 02 /nonexistent/lab --mutate ""
refused dir lab check ""
[ $fail -eq 0 ] && echo "every empty value refused"
exit $fail
