# The warm Bash worker of one function registration (seed 002, "Built-in Runtime Requirements").
#
# A fixed script: nothing in it is ever built from a handler or a payload. It is started as
#     bash --noprofile --norc driver.sh HANDLER_FILE FUNCTION SCRATCH_DIR
# in the registered working directory, in its own session, by servers/bash/startup.py;
# servers/bash/worker.py documents the protocol. In short:
#   1. source HANDLER_FILE (an absolute path) once, check FUNCTION with `declare -F`, answer one
#      line on stdout: "ready", "source-failed STATUS" or "no-function";
#   2. loop: read "LENGTH\n" then exactly LENGTH bytes from stdin into a variable (the payload
#      crosses as data, never as shell source), call "$FUNCTION" "$payload" in a subshell with
#      stdout and stderr sent to SCRATCH_DIR/out.N and SCRATCH_DIR/err.N (N counts the calls
#      from 1: fresh files per call, so a background job a call leaves behind cannot write
#      into a later call's files), answer "done STATUS";
#   3. exit when stdin reaches end of file.
# Every name of our own starts with __krt_ and every builtin is called through `builtin`, so a
# handler file that defines functions named like builtins does not change the protocol.

__krt_file=$1
__krt_fn=$2
__krt_dir=$3
builtin shift 3

# The serving loop is defined before the handler file is sourced, so aliases or options the
# file sets cannot change how the loop itself is parsed.
__krt_serve() {
    __krt_n=0
    while :; do
        IFS= builtin read -r __krt_len || builtin return 0
        case $__krt_len in
        '' | *[!0-9]*) builtin return 70 ;;
        esac
        # LC_ALL=C makes -N count bytes, not characters; read fails on a short read (EOF).
        LC_ALL=C IFS= builtin read -r -N "$__krt_len" __krt_payload || builtin return 71
        ((__krt_n += 1))
        (
            [[ $__krt_opts == *e* ]] && builtin set -o errexit
            [[ $__krt_opts == *u* ]] && builtin set -o nounset
            [[ $__krt_opts == *p* ]] && builtin set -o pipefail
            [[ $__krt_opts == *x* ]] && builtin set -o xtrace
            "$__krt_fn" "$__krt_payload"
        ) </dev/null >|"$__krt_dir/out.$__krt_n" 2>|"$__krt_dir/err.$__krt_n"
        __krt_status=$?
        builtin unset __krt_payload
        builtin printf 'done %d\n' "$__krt_status"
    done
}

# Top-level output of the handler file goes to the worker's stderr (a log file), never to the
# protocol stream on stdout.
builtin source "$__krt_file" </dev/null >&2
__krt_status=$?
if ((__krt_status != 0)); then
    builtin printf 'source-failed %d\n' "$__krt_status"
    builtin exit 0
fi
if ! builtin declare -F -- "$__krt_fn" >/dev/null; then
    builtin printf 'no-function\n'
    builtin exit 0
fi

# Options the handler file turned on apply to each invocation, not to this loop.
__krt_opts=
[[ -o errexit ]] && __krt_opts+=e
[[ -o nounset ]] && __krt_opts+=u
[[ -o pipefail ]] && __krt_opts+=p
[[ -o xtrace ]] && __krt_opts+=x
builtin set +o errexit +o nounset +o pipefail +o xtrace

builtin printf 'ready\n'
__krt_serve
builtin exit "$?"
