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
[ $fail -eq 0 ] && echo "every empty value refused"
exit $fail
