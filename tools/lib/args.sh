# flashladder — tools/lib/args.sh: the arguments of the shell programs in tools/, in one place. Sourced
# (not run) before a program does anything:
#   . "$(dirname "$0")/lib/args.sh"; fl_no_args "$@"      a program that takes no arguments
#   . "$(dirname "$0")/lib/args.sh"; fl_help "$@"         one whose other arguments go on (tools/test)
# --help prints the program's header comment (line 2 up to the first line that is not a comment, '# '
# stripped) and exits 0; fl_no_args refuses anything else, naming it (exit 2). tests/test_tools_help.py
# checks every program in tools/, and .ci/run (which names itself by FL_NAME).
fl_header() { sed -n '2,/^[^#]/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
fl_help() {
  case "${1:-}" in -h|--help) fl_header; exit 0 ;; esac
}
fl_no_args() {
  fl_help "$@"
  [ $# -eq 0 ] || { echo "${FL_NAME:-tools/$(basename "$0")}: no arguments (got '$1'); --help says what it does" >&2; exit 2; }
}
