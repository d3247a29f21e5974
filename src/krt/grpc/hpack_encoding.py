"""The HPACK encoder every krt.grpc connection sends its headers with.

Two per-call costs of pure-Python hpack 3.0 (the version h2 3.2, pinned for purerpc,
requires) are removed; the encoded bytes stay valid HPACK that every decoder reads:

* **No Huffman coding of literals.** h2 always sends ``authorization`` as a never-indexed
  literal (it must not enter the shared compression table), so with Huffman coding the
  caller's bearer token, a JWT of about 1 KiB, was Huffman-encoded in pure Python on every
  call and decoded on every call by the server: about a millisecond each on this project's
  machines. Plain literals are equally valid (RFC 7541 section 5.2: the H bit is the
  sender's choice); the price is about a quarter more bytes for literals, none for indexed
  headers.
* **An indexed static table.** hpack 3.0 looks every header up by scanning the 61-entry
  static table in Python (hpack 4 indexes it); a request has about ten headers, so that scan
  was about a tenth of the encoder's time. :class:`IndexedHeaderTable` answers the static
  part from two dicts built once, with exactly the results of hpack's scan (the first exact
  match, else the first entry with the name, static entries before dynamic ones).

Credentials (``authorization``, ``proxy-authorization``) are always sent never-indexed, as
h2's outbound normalization marks them, so a connection that switches that normalization off
(the server side of :mod:`krt.grpc.unary_server`) still never indexes one.
"""

from __future__ import annotations

from typing import Any, Final

import hpack
from hpack.table import HeaderTable

__all__ = ["IndexedHeaderTable", "LiteralHpackEncoder"]

#: Header names whose values must never enter an HPACK table (as h2's normalization does).
CREDENTIALS: Final = frozenset(
    {"authorization", "proxy-authorization", b"authorization", b"proxy-authorization"}
)

_STATIC: Final = HeaderTable.STATIC_TABLE
#: ``(name, value)`` -> 1-based index of its first static entry.
_STATIC_EXACT: Final[dict[tuple[bytes, bytes], int]] = {}
#: ``name`` -> 1-based index of the first static entry with that name.
_STATIC_NAME: Final[dict[bytes, int]] = {}
for _index, (_name, _value) in enumerate(_STATIC, start=1):
    _STATIC_EXACT.setdefault((_name, _value), _index)
    _STATIC_NAME.setdefault(_name, _index)


class IndexedHeaderTable(HeaderTable):  # type: ignore[misc]
    """hpack's header table with an O(1) static-table lookup (same results as hpack's scan)."""

    def search(self, name: bytes, value: bytes) -> tuple[int, bytes, bytes | None] | None:
        """Find ``(name, value)``: ``(index, name, value)``, ``(index, name, None)`` or ``None``.

        Args:
            name: header name (bytes, as hpack's encoder passes it).
            value: header value (bytes).

        Returns:
            A full match (``value`` set), else the first entry with ``name`` (value
            ``None``), else ``None``; indexes are 1-based, static entries first.
        """
        index = _STATIC_EXACT.get((name, value))
        if index is not None:
            return index, name, value
        static_name = _STATIC_NAME.get(name)
        partial = None if static_name is None else (static_name, name, None)
        offset = HeaderTable.STATIC_TABLE_LENGTH + 1
        for position, (entry_name, entry_value) in enumerate(self.dynamic_entries):
            if entry_name == name:
                if entry_value == value:
                    return position + offset, entry_name, entry_value
                if partial is None:
                    partial = (position + offset, entry_name, None)
        return partial


class LiteralHpackEncoder(hpack.Encoder):  # type: ignore[misc]
    """An HPACK encoder: literals never Huffman-coded, static table indexed, credentials secret."""

    def __init__(self) -> None:
        super().__init__()
        self.header_table = IndexedHeaderTable()

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        """Encode ``headers`` without Huffman coding (``huffman`` is ignored).

        Args:
            headers: ``(name, value)`` pairs with lowercase names (str or bytes);
                ``authorization`` and ``proxy-authorization`` are sent never-indexed.
        """
        marked = [
            hpack.NeverIndexedHeaderTuple(header[0], header[1])
            if header[0] in CREDENTIALS and not isinstance(header, hpack.NeverIndexedHeaderTuple)
            else header
            for header in headers
        ]
        return bytes(super().encode(marked, huffman=False))
