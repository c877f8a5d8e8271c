# flashladder — tests/cli_expect.sh: sourced by the shell tests of the program's refusals (cli_refusals.sh,
# cli_files.sh). Sets fail=0 and defines
#   expect RC REGEX COMMAND...   the command exits RC and prints REGEX (stdout or stderr, grep -E); else
#                                one FAILED line with what it did, and fail=1
# Each command gets 60 s: a refusal that hangs fails instead of holding the suite.
fail=0
expect() {
  want=$1; re=$2; shift 2
  out=$(timeout 60 "$@" 2>&1); rc=$?
  if [ $rc -ne "$want" ] || ! printf '%s' "$out" | grep -Eq -- "$re"; then
    echo "FAILED: $* -> exit $rc (wanted $want and /$re/): $out" | head -c 600; echo; fail=1
  fi
}
