"""krt.grpc.hpack_encoding: the same HPACK decisions as hpack's own encoder, faster."""

from __future__ import annotations

import itertools

import hpack
import pytest
from hpack.table import HeaderTable

from krt.grpc.hpack_encoding import IndexedHeaderTable, LiteralHpackEncoder

STATIC_NAMES = sorted({name for name, _ in HeaderTable.STATIC_TABLE})
VALUES = [b"", b"GET", b"POST", b"200", b"404", b"/", b"gzip, deflate", b"x", b"other"]
NAMES = [*STATIC_NAMES, b"x-kruntime-runtime", b"grpc-timeout", b"te", b"unknown"]


def _filled(table: HeaderTable) -> HeaderTable:
    for name, value in [(b"x-kruntime-runtime", b"py"), (b":path", b"/a/B"), (b"te", b"x")]:
        table.add(name, value)
    return table


@pytest.mark.parametrize("filled", [False, True])
def test_search_answers_exactly_as_hpacks_scan(filled: bool) -> None:
    """Every static name with many values, plus dynamic entries: identical results."""
    ours, theirs = IndexedHeaderTable(), HeaderTable()
    if filled:
        ours, theirs = _filled(ours), _filled(theirs)
    dynamic_values = [b"py", b"/a/B"]
    for name, value in itertools.product(NAMES, VALUES + dynamic_values):
        assert ours.search(name, value) == theirs.search(name, value), (name, value)


def test_the_encoder_produces_hpacks_bytes_without_huffman() -> None:
    headers = [
        (":method", "POST"),
        (":path", "/executor.v1.FunctionRuntime/InvokeFunction"),
        ("content-type", "application/grpc+proto"),
        ("x-kruntime-runtime", "python"),
    ]
    ours, theirs = LiteralHpackEncoder(), hpack.Encoder()
    for _ in range(3):  # the second and third blocks use the dynamic table
        assert ours.encode(headers) == theirs.encode(headers, huffman=False)


def test_credentials_are_never_indexed_and_round_trip() -> None:
    encoder, decoder = LiteralHpackEncoder(), hpack.Decoder()
    block = encoder.encode([("authorization", "Bearer abc"), ("x-a", "1")])
    decoded = decoder.decode(block, raw=True)
    assert decoded == [(b"authorization", b"Bearer abc"), (b"x-a", b"1")]
    assert isinstance(decoded[0], hpack.NeverIndexedHeaderTuple)
    assert [name for name, _ in encoder.header_table.dynamic_entries] == [b"x-a"]
