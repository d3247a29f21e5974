"""One-pass HTTP/2 header checks for our gRPC connections (h2's rules, without its generators).

h2 3.2 (pinned for purerpc) checks every header block it receives, and normalizes and checks
every block it sends, as a chain of about seven generators per block, each re-reading every
header. Measured with callgrind on an in-process unary call (client and server, a JWT-sized
token): those chains are about 9% of the instructions of a call on both sides together
(2.81 -> 2.56 million instructions per call with them off). Each invoke crosses two of our
server connections and two of our client connections, so this is paid four times.

This module applies the same rules in one loop, and the connections switch h2's passes off
(``H2Configuration.validate_inbound_headers`` on the server side,
``validate_outbound_headers`` and ``normalize_outbound_headers`` on the client side; all
documented h2 settings):

* :func:`check_request_headers`: what h2's ``validate_headers`` requires of a request header
  block or request trailers received by a server (RFC 7540 section 8.1.2): lowercase names,
  no surrounding whitespace, ``te`` only ``trailers``, no connection-specific fields,
  pseudo-headers known, unique, first and absent from trailers, ``:method``, ``:scheme`` and
  a non-empty ``:path`` present, no ``:status``, ``:protocol`` only with CONNECT, and an
  ``:authority`` or ``Host`` (equal when both are sent).
* :func:`outbound_metadata`: what h2's outbound normalization and checks do to a client's
  custom metadata (names lowercased, names and values stripped, connection-specific fields
  dropped, ``te`` other than ``trailers`` and pseudo-header names refused, ``cookie`` never
  indexed). The fixed headers purerpc builds around the metadata are valid by construction.

Both raise :class:`h2.exceptions.ProtocolError`, as h2 does, so callers handle a failure
exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import hpack
from h2.exceptions import ProtocolError

__all__ = ["RequestHeaderChecks", "check_request_headers", "outbound_metadata"]

#: Connection-specific fields, forbidden in HTTP/2 (RFC 7540 section 8.1.2.2).
CONNECTION_HEADERS: Final = frozenset(
    {"connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade"}
)
_PSEUDO: Final = frozenset({":method", ":scheme", ":authority", ":path", ":status", ":protocol"})
_WHITESPACE: Final = frozenset(" \t\n\r\x0b\x0c")
_UPPER: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
#: Header blocks one connection remembers as checked (a unary connection repeats a few).
MAX_REMEMBERED_BLOCKS: Final = 64
#: Blocks carrying one of these are never remembered: a credential is not kept past its call.
_SECRET_NAMES: Final = frozenset({"authorization", "proxy-authorization", "cookie"})


def check_request_headers(headers: Sequence[tuple[str, str]], *, trailers: bool) -> None:
    """Check a request header block (or request trailers) a server received.

    Args:
        headers: ``(name, value)`` pairs as h2 decoded them (``str``, UTF-8).
        trailers: the block is the request's trailers (no pseudo-headers allowed).

    Raises:
        h2.exceptions.ProtocolError: the block breaks a rule of RFC 7540 section 8.1.2 (the
            message names the field), as h2's own inbound validation would.
    """
    seen_pseudo: set[str] = set()
    regular = False
    method = path = authority = host = None
    for name, value in headers:
        if not name:
            raise ProtocolError("Received an empty header name")
        if not _UPPER.isdisjoint(name):
            raise ProtocolError(f"Received uppercase header name {name}.")
        if name[0] in _WHITESPACE or name[-1] in _WHITESPACE:
            raise ProtocolError(f"Received header name surrounded by whitespace {name!r}")
        if value and (value[0] in _WHITESPACE or value[-1] in _WHITESPACE):
            raise ProtocolError(f"Received header value surrounded by whitespace {value!r}")
        if name[0] == ":":
            if name in seen_pseudo:
                raise ProtocolError(f"Received duplicate pseudo-header field {name}")
            seen_pseudo.add(name)
            if regular:
                raise ProtocolError(f"Received pseudo-header field out of sequence: {name}")
            if name not in _PSEUDO:
                raise ProtocolError(f"Received custom pseudo-header field {name}")
            if name == ":method":
                method = value
            elif name == ":path":
                path = value
            elif name == ":authority":
                authority = value
            continue
        regular = True
        if name == "te":
            if value.lower() != "trailers":
                raise ProtocolError(f"Invalid value for Transfer-Encoding header: {value}")
        elif name in CONNECTION_HEADERS:
            raise ProtocolError(f"Connection-specific header field present: {name}.")
        elif name == "host":
            host = value
    if trailers:
        if seen_pseudo:
            raise ProtocolError(f"Received pseudo-header in trailer {seen_pseudo}")
        return
    for required in (":path", ":method", ":scheme"):
        if required not in seen_pseudo:
            raise ProtocolError(f"Header block missing mandatory {required} header")
    if ":status" in seen_pseudo:
        raise ProtocolError("Encountered response-only headers {':status'}")
    if method != "CONNECT" and ":protocol" in seen_pseudo:
        raise ProtocolError("Encountered connect-request-only headers {':protocol'}")
    if authority is None and host is None:
        raise ProtocolError("Request header block does not have an :authority or Host header.")
    if authority is not None and host is not None and authority != host:
        raise ProtocolError(
            "Request header block has mismatched :authority and Host headers: "
            f"{authority!r} / {host!r}"
        )
    if not path:
        raise ProtocolError("An empty :path header is forbidden")


class RequestHeaderChecks:
    """:func:`check_request_headers` for one connection, remembering blocks that passed.

    A client sends the same request header block for every call of a method (the same
    path, authority, content type and user agent), and the check is a pure function of the
    block, so a block seen to pass passes again. Issue 6: checking cost ~6.5 µs per call,
    looking the block up ~0.2 µs. At most :data:`MAX_REMEMBERED_BLOCKS` blocks are kept
    (the set is emptied when full); blocks with a credential are checked every time and
    never kept.
    """

    def __init__(self) -> None:
        self._passed: set[tuple[bool, tuple[tuple[str, str], ...]]] = set()

    def check(self, headers: Sequence[tuple[str, str]], *, trailers: bool) -> None:
        """Check ``headers`` as :func:`check_request_headers` does (same arguments, errors)."""
        key = (trailers, tuple(headers))
        if key in self._passed:
            return
        check_request_headers(headers, trailers=trailers)
        if any(name in _SECRET_NAMES for name, _ in headers):
            return
        if len(self._passed) >= MAX_REMEMBERED_BLOCKS:
            self._passed.clear()
        self._passed.add(key)


def outbound_metadata(
    metadata: Iterable[tuple[str, str]], *, authority: str
) -> list[tuple[str, str]]:
    """Normalize and check a client's custom metadata as h2's outbound passes would.

    Args:
        metadata: ``(name, value)`` pairs (``str``) to send after purerpc's fixed headers.
        authority: the ``:authority`` the request carries (a ``host`` entry must match it).

    Returns:
        The pairs to send: names lowercased, names and values stripped, connection-specific
        fields dropped, ``cookie`` values marked never-indexed.

    Raises:
        h2.exceptions.ProtocolError: an empty or pseudo-header name (``:...``; it would
            follow regular fields), ``te`` other than ``trailers``, or a ``host`` that
            differs from ``authority``.
    """
    normalized: list[tuple[str, str]] = []
    for raw_name, raw_value in metadata:
        name = raw_name.lower().strip()
        value = raw_value.strip()
        if not name:
            raise ProtocolError("Received an empty header name")
        if name[0] == ":":
            raise ProtocolError(f"Received pseudo-header field out of sequence: {name}")
        if name in CONNECTION_HEADERS:
            continue
        if name == "te" and value.lower() != "trailers":
            raise ProtocolError(f"Invalid value for Transfer-Encoding header: {value}")
        if name == "host" and value != authority:
            raise ProtocolError(
                "Request header block has mismatched :authority and Host headers: "
                f"{authority!r} / {value!r}"
            )
        if name == "cookie":
            normalized.append(hpack.NeverIndexedHeaderTuple(name, value))
        else:
            normalized.append((name, value))
    return normalized
