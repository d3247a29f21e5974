"""Pod and Service addresses on the loopback network.

Linux routes all of 127.0.0.0/8 to ``lo``, so any 127.x.y.z address can be bound without
setup. Pods get addresses from ``127.0.0.0/17`` except ``127.0.0.x``
(127.0.1.1 - 127.0.127.254, skipping .0 and .255 host parts); Service ClusterIPs come from
``127.0.200.0/21`` (127.0.200.1 - 127.0.207.254). The two ranges never overlap, and neither
contains 127.0.0.1. Addresses are picked at random among the free ones, so several dev
clusters side by side rarely pick the same one; addresses on which any process of the
machine listens (another dev cluster's Pod or Service proxy, read from ``/proc/net/tcp``)
are treated as taken, so they never do for running clusters.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable
from pathlib import Path

POD_NETWORK = ipaddress.IPv4Network("127.0.0.0/17")
SERVICE_NETWORK = ipaddress.IPv4Network("127.0.200.0/21")


#: TCP socket state "listening" in /proc/net/tcp.
_LISTEN = "0A"


def parse_listening(proc_net_tcp: str) -> set[str]:
    """Return the IPv4 addresses with a listening TCP socket in a ``/proc/net/tcp`` text.

    Local addresses are little-endian hex (``0100007F:1F90`` is 127.0.0.1:8080).
    """
    out: set[str] = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != _LISTEN:
            continue
        addr = fields[1].split(":", 1)[0]
        try:
            out.add(str(ipaddress.IPv4Address(int(addr, 16).to_bytes(4, "little"))))
        except ValueError:
            continue
    return out


def listening_addresses(path: Path = Path("/proc/net/tcp")) -> set[str]:
    """The IPv4 addresses some process of this machine listens on (empty if unreadable).

    Reads a small in-memory procfs file (no disk I/O).
    """
    try:
        return parse_listening(path.read_text())
    except OSError:
        return set()


class AddressesExhaustedError(RuntimeError):
    """Every address of the range is in use."""


def _usable(network: ipaddress.IPv4Network) -> list[str]:
    out = []
    for addr in network.hosts():
        last = int(addr) & 0xFF
        third = (int(addr) >> 8) & 0xFF
        if last in (0, 255) or (network == POD_NETWORK and third == 0):
            continue
        out.append(str(addr))
    return out


_POD_ADDRESSES = _usable(POD_NETWORK)
_SERVICE_ADDRESSES = _usable(SERVICE_NETWORK)


def _pick(pool: list[str], used: Iterable[str], rng: random.Random, what: str) -> str:
    taken = set(used)
    for _ in range(64):
        choice = rng.choice(pool)
        if choice not in taken:
            return choice
    free = [a for a in pool if a not in taken]
    if not free:
        raise AddressesExhaustedError(f"all {len(pool)} {what} addresses are in use")
    return rng.choice(free)


def allocate_pod_ip(used: Iterable[str], rng: random.Random | None = None) -> str:
    """Return a free Pod address (127.0.1.1 - 127.0.127.254) not in ``used``.

    Raises:
        AddressesExhaustedError: if none is free.
    """
    return _pick(_POD_ADDRESSES, used, rng or random.Random(), "Pod")


def allocate_cluster_ip(used: Iterable[str], rng: random.Random | None = None) -> str:
    """Return a free Service ClusterIP (127.0.200.1 - 127.0.207.254) not in ``used``.

    Raises:
        AddressesExhaustedError: if none is free.
    """
    return _pick(_SERVICE_ADDRESSES, used, rng or random.Random(), "Service ClusterIP")
