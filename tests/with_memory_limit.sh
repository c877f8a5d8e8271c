#!/bin/sh
# with_memory_limit.sh KIB COMMAND [ARGS...]: runs COMMAND with its address space capped at KIB KiB
# (ulimit -v), so a test can show that a computation stays within a memory bound: past the cap the
# allocation fails (std::bad_alloc) instead of the machine swapping.
limit=$1
shift
ulimit -v "$limit" || { echo "with_memory_limit: cannot set ulimit -v $limit" >&2; exit 3; }
exec "$@"
