#!/bin/sh
# flashladder — tests/diff_temp_folder.sh FLASHLADDER WORK_DIR: `flashladder diff` removes its temporary
# folder (TMPDIR/flashladder-diff-PID, the marks-free copies of the two sources) on every path out. It was
# removed only after diff ran: a copy that could not be written (TMPDIR on a full disk: exit 2, "cannot
# write …") left the folder behind. A copy's path taken by a folder stands in for the full disk: the
# shell writes it for its own PID, which the program keeps through exec.
F=$1; T=$2
rm -rf "$T" && mkdir -p "$T" || exit 1
fail=0
# run NAME RC REGEX [PRE-MADE COPY]: diff 05 in a fresh TMPDIR exits RC, prints REGEX and leaves TMPDIR empty.
run() {
  name=$1; want=$2; re=$3; copy=$4
  tmp="$T/$name"; mkdir -p "$tmp"
  out=$(TMPDIR="$tmp" timeout 60 sh -c '[ -z "$2" ] || mkdir -p "$1/flashladder-diff-$$/$2"; exec "$0" diff 05' "$F" "$tmp" "$copy" 2>&1)
  rc=$?
  if [ $rc -ne "$want" ] || ! printf '%s' "$out" | grep -Eq -- "$re"; then
    echo "FAILED ($name): diff 05 -> exit $rc (wanted $want and /$re/): $out" | head -c 600; echo; fail=1
  fi
  left=$(ls -A "$tmp")
  [ -z "$left" ] || { echo "FAILED ($name): diff 05 left $tmp/$left behind"; fail=1; }
}
run shown 0 "05_fa2_lse against 04_fa1_tiling"
run first_copy_fails 2 "cannot write .*05_fa2_lse_attention.cu" 05_fa2_lse_attention.cu
run second_copy_fails 2 "cannot write .*04_fa1_tiling_attention.cu" 04_fa1_tiling_attention.cu
# A TMPDIR that does not exist: refused naming it (it was C++'s "filesystem error: temp_directory_path").
out=$(TMPDIR="$T/none" timeout 60 "$F" diff 05 2>&1); rc=$?
if [ $rc -ne 2 ] || ! printf '%s' "$out" | grep -q "to a temporary folder, and there is none: TMPDIR = '$T/none'"; then
  echo "FAILED (no_tmpdir): diff 05 -> exit $rc (wanted 2, naming TMPDIR): $out" | head -c 600; echo; fail=1
fi
[ $fail -eq 0 ] && echo "diff left no temporary folder behind"
exit $fail
