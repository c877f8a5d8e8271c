#!/bin/sh
# flashladder — tests/cli_files.sh FLASHLADDER WORK_DIR: the audit of the program's files (golden sets,
# run's outputs, lab folders, .npy files), each case an exit status and a message, and what must be
# left on disk afterwards. CPU only: every case runs without a GPU.
F=$1; T=$2
rm -rf "$T" && mkdir -p "$T" || exit 1
. "$(dirname "$0")/cli_expect.sh"  # fail=0; expect RC REGEX COMMAND...
# A generate refused for its tolerance had replaced the inputs of the set in --out under the old
# manifest and answers, and a correct step then failed its check.
"$F" oracle generate -B 1 -H 1 -N 8 -d 4 --out "$T/gx" > /dev/null || { echo "oracle generate failed"; exit 1; }
expect 2 "the baseline of o is not finite" "$F" oracle generate -B 1 -H 1 -N 8 -d 4 --seed 5 --scale 1e300 --out "$T/gx"
"$F" run --step 01 --in "$T/gx" --out "$T/gx_run" > /dev/null || { echo "run --step 01 failed"; exit 1; }
expect 0 "oracle check: PASS" "$F" oracle check --golden "$T/gx" --candidate "$T/gx_run"
# run --out on a folder holding an earlier run's gradients wrote o and lse beside them, and oracle check
# then passed "5 tensors": the folder is refused, naming the files, before the step runs.
mkdir -p "$T/cs" && cp "$T/gx/dq.npy" "$T/gx/dk.npy" "$T/gx/dv.npy" "$T/cs/" || exit 1
expect 2 "cs holds dq.npy, dk.npy, dv.npy from an earlier run" "$F" run --step 01 --in "$T/gx" --out "$T/cs"
[ -e "$T/cs/o.npy" ] && { echo "FAILED: run wrote $T/cs/o.npy beside the stale gradients"; fail=1; }
# lab new --force removed DIR/build whatever it held: only a lab build (its CMakeCache.txt names a
# flashladder_lab_ project, as cmake/lab.cmake's project() writes it) is removed; anything else there
# is refused, and nothing is written.
mkdir -p "$T/proj/build/important" && echo data > "$T/proj/build/important/file" || exit 1
expect 2 "proj/build is not a lab build" "$F" lab new 02 "$T/proj" --force
[ -f "$T/proj/build/important/file" ] || { echo "FAILED: lab new --force removed $T/proj/build"; fail=1; }
[ -e "$T/proj/attention.cpp" ] && { echo "FAILED: lab new --force wrote into $T/proj before refusing"; fail=1; }
mkdir -p "$T/ex/build/CMakeFiles" && echo "CMAKE_PROJECT_NAME:STATIC=flashladder_lab_05" > "$T/ex/build/CMakeCache.txt" || exit 1
expect 0 "wrote .*ex: attention.cpp" "$F" lab new 02 "$T/ex" --force
[ -e "$T/ex/build" ] && { echo "FAILED: lab new --force kept the old lab build $T/ex/build"; fail=1; }
# A .npy file was read whole before its first bytes were looked at: an 8 GiB o.npy of zeros (sparse)
# was refused after 6 s and 8.5 GB. Under a 1 GiB address-space cap it is refused for what its first
# bytes say, and one with a real header for the size it has beyond the data that header describes.
mkdir -p "$T/cbig" && truncate -s 8G "$T/cbig/o.npy" || exit 1
capped='ulimit -v 1048576 && exec "$0" "$@"'
expect 2 "cbig/o.npy: not a .npy file" sh -c "$capped" "$F" oracle check --golden "$T/gx" --candidate "$T/cbig"
cp "$T/gx/o.npy" "$T/cbig/o.npy" && truncate -s 8G "$T/cbig/o.npy" || exit 1
expect 2 "cbig/o.npy: [0-9]+ bytes follow the data .*: the file is 8589934592 bytes; its header describes 384" \
  sh -c "$capped" "$F" oracle check --golden "$T/gx" --candidate "$T/cbig"
rm -rf "$T/cbig"
[ $fail -eq 0 ] && echo "every case named its problem and left its files as they should be"
exit $fail
