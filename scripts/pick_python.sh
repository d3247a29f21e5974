#!/bin/sh
# Print the interpreter `make` builds the virtualenv from (Makefile: PYTHON ?= $(shell ...)).
#
# The first candidate that is CPython >= 3.11 and can create a virtualenv with pip wins:
#   1. the distribution's /usr/bin/python3 (Debian, Ubuntu and Fedora compile it with
#      profile-guided and link-time optimisation, as the python:3.11-slim images our
#      containers use are compiled);
#   2. python3 on PATH (pyenv's default build, for example, has neither: on the bench machine
#      it costs 10-17% more CPU per task Run, issue 6 / docs/benchmarks.md).
# Override with `make PYTHON=/path/to/python3 ...`.
for candidate in /usr/bin/python3 python3; do
    if "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.implementation.name != "cpython" or sys.version_info < (3, 11))' >/dev/null 2>&1; then
        command -v "$candidate"
        exit 0
    fi
done
echo python3
