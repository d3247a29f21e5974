"""krt.grpc.hpack_encoding: the same HPACK decisions as hpack's own encoder, faster."""

from __future__ import annotations

import itertools

import hpack
import pytest
from hpack.table import HeaderTable

from krt.grpc.hpack_encoding import (
    CachingHpackDecoder,
    IndexedHeaderTable,
    LiteralHpackEncoder,
    install_decoder,
)

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


# -- repeated blocks: the per-connection memory of the encoder and decoder ------------------

RESPONSE = [(":status", "200"), ("content-type", "application/grpc+proto")]
TRAILERS = [("grpc-status", "0")]


def _blocks(seed: int) -> list[list[tuple[str, str]]]:
    """A call-like mix: repeating blocks, changing literals, secrets, big values (evictions)."""
    import random

    rng = random.Random(seed)
    choices = [
        RESPONSE,
        TRAILERS,
        [("grpc-status", "5"), ("grpc-message", "not%20found")],
        [(":method", "POST"), (":path", "/a/B"), ("grpc-timeout", "{n}m")],
        [("authorization", "Bearer {n}"), ("x-kruntime-runtime", "python")],
        [("x-big", "v" * 1500 + "{n}")],  # forces evictions from the 4 KiB table
    ]
    return [
        [(name, value.replace("{n}", str(rng.randrange(5)))) for name, value in rng.choice(choices)]
        for _ in range(400)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_remembered_blocks_decode_exactly_as_hpack_would(seed: int) -> None:
    """Our encoder's blocks through hpack's decoder, and through ours, give the same headers
    in the same order as what went in, whatever the table did meanwhile (table resizes too)."""
    encoder, ours, reference = LiteralHpackEncoder(), CachingHpackDecoder(), hpack.Decoder()
    for index, headers in enumerate(_blocks(seed)):
        if index % 97 == 50:  # SETTINGS_HEADER_TABLE_SIZE changes (acknowledged by both)
            size = 1024 if index % 2 else 4096
            encoder.header_table_size = size
            for decoder in (ours, reference):
                decoder.max_allowed_table_size = size
        block = encoder.encode(headers)
        expected = [(name.encode(), value.encode()) for name, value in headers]
        assert reference.decode(block, raw=True) == expected
        assert ours.decode(block, raw=True) == expected
        assert ours.header_table.dynamic_entries == reference.header_table.dynamic_entries
    assert encoder.cache_hits > 10
    assert ours.cache_hits > 10


def test_a_repeated_response_is_encoded_and_decoded_from_memory() -> None:
    encoder, decoder = LiteralHpackEncoder(), CachingHpackDecoder()
    first = encoder.encode(RESPONSE)
    decoder.decode(first, raw=True)
    second = encoder.encode(RESPONSE)  # now indexed: b"\x88\xbe"
    assert decoder.decode(second, raw=True) == [
        (b":status", b"200"),
        (b"content-type", b"application/grpc+proto"),
    ]
    assert (encoder.cache_hits, decoder.cache_hits) == (0, 0)
    assert encoder.encode(RESPONSE) == second
    assert decoder.decode(second, raw=True) == decoder.decode(second, raw=True)
    assert (encoder.cache_hits, decoder.cache_hits) == (1, 2)


def test_a_changed_table_invalidates_a_remembered_block() -> None:
    encoder = LiteralHpackEncoder()
    encoder.encode(RESPONSE)
    indexed = encoder.encode(RESPONSE)
    encoder.encode([("x-new", "entry")])  # shifts every dynamic index by one
    assert encoder.encode(RESPONSE) != indexed
    assert encoder.cache_hits == 0


def test_credentials_are_never_remembered() -> None:
    secret = [("authorization", "Bearer abc"), (":status", "200")]
    encoder, decoder = LiteralHpackEncoder(), CachingHpackDecoder()
    for _ in range(3):
        decoder.decode(encoder.encode(secret), raw=True)
    assert (encoder.cache_hits, decoder.cache_hits) == (0, 0)
    assert not any(b"abc" in repr(key).encode() for key in decoder._blocks)


def test_a_decoder_limit_change_is_honoured_for_remembered_blocks() -> None:
    encoder, decoder = LiteralHpackEncoder(), CachingHpackDecoder()
    headers = [("x-long", "v" * 100)]
    decoder.decode(encoder.encode(headers), raw=True)
    block = encoder.encode(headers)
    decoder.decode(block, raw=True)
    decoder.max_header_list_size = 50
    with pytest.raises(hpack.OversizedHeaderListError):
        decoder.decode(block, raw=True)


def test_install_decoder_keeps_h2s_limits() -> None:
    import h2.config
    import h2.connection

    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    old = connection.decoder
    decoder = install_decoder(connection)
    assert connection.decoder is decoder
    assert decoder.max_header_list_size == old.max_header_list_size
    assert decoder.max_allowed_table_size == old.max_allowed_table_size
    assert decoder.header_table_size == old.header_table_size


def test_a_changing_deadline_leaves_the_table_and_the_other_fields_alone() -> None:
    """grpc-timeout is a never-indexed literal: the rest of a request stays indexed, and
    each field is encoded from memory (the bytes equal hpack's for the same decisions)."""
    encoder, decoder = LiteralHpackEncoder(), hpack.Decoder()
    request = [
        (":method", "POST"),
        (":path", "/executor.v1.FunctionRuntime/InvokeFunction"),
        ("grpc-timeout", "{}m"),
        ("content-type", "application/grpc+proto"),
        ("authorization", "Bearer secret-token"),
    ]
    sizes = []
    for millis in range(30000, 29900, -1):
        headers = [(n, v.format(millis)) for n, v in request]
        block = encoder.encode(headers)
        decoded = decoder.decode(block, raw=True)
        assert decoded == [(n.encode(), v.encode()) for n, v in headers]
        assert isinstance(decoded[2], hpack.NeverIndexedHeaderTuple)
        sizes.append(len(block))
    assert [name for name, _ in encoder.header_table.dynamic_entries] == [
        b"content-type",
        b":path",
    ]
    assert len(set(sizes[1:])) == 1  # every later block: indexed fields plus two literals
    assert not any(b"secret" in name + value for name, value, _ in encoder._fields)
    assert len(encoder._fields) >= 3
