"""A task Run for the quick start: count the primes below N (a sieve), report them as outputs.

    krt run --runtime python --file examples/tasks/primes.py --wait -- 2000000

A task writes its results as KEY=VALUE lines to the file named by $KRUNTIME_OUTPUTS; they
become the Run's status.outputs, which `krt run --wait` prints. Its stdout is the Run's log
(`krt logs NAME`).
"""

import os
import sys
import time


def primes_below(n):
    """The primes below ``n`` (sieve of Eratosthenes)."""
    if n < 3:
        return []
    sieve = bytearray([1]) * n
    sieve[0:2] = b"\x00\x00"
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytes(len(range(i * i, n, i)))
    return [i for i in range(n) if sieve[i]]


def main(argv):
    n = int(argv[0]) if argv else 1_000_000
    started = time.perf_counter()
    primes = primes_below(n)
    seconds = time.perf_counter() - started
    print(f"{len(primes)} primes below {n}, the largest {primes[-1] if primes else '-'}")
    with open(os.environ["KRUNTIME_OUTPUTS"], "a") as outputs:
        outputs.write(f"below={n}\n")
        outputs.write(f"count={len(primes)}\n")
        outputs.write(f"largest={primes[-1] if primes else ''}\n")
        outputs.write(f"millis={seconds * 1000:.0f}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
