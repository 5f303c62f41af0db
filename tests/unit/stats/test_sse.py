"""SSEDecoder: split reads anywhere, every line-end style, the field rules we rely on."""

from __future__ import annotations

import pytest

from loadgen.errors import MALFORMED_CHUNK, RequestError
from loadgen.wire.sse import SSEDecoder

STREAM = (
    b": keep-alive comment\n"
    b'data: {"a": 1}\n\n'
    b"event: message\nid: 7\nretry: 100\n"
    b'data:{"b": 2}\n\n'
    b"data: line one\ndata: line two\n\n"
    b"id: only-an-id\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b'{"b": 2}', b"line one\nline two", b"[DONE]"]


def decode_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[bytes] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:cut])
        prev = cut
    return out + dec.flush()


def test_whole_stream_in_one_read():
    assert decode_in_pieces(STREAM, []) == EXPECTED


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_split_point_gives_the_same_events(eol):
    stream = STREAM.replace(b"\n", eol)
    for cut in range(len(stream) + 1):
        assert decode_in_pieces(stream, [cut]) == EXPECTED, (eol, cut)


def test_every_two_split_points_crlf():
    stream = STREAM.replace(b"\n", b"\r\n")
    n = len(stream)
    for a in range(0, n + 1, 3):
        for b in range(a, n + 1, 5):
            assert decode_in_pieces(stream, [a, b]) == EXPECTED, (a, b)


def test_byte_by_byte():
    stream = STREAM.replace(b"\n", b"\r\n")
    assert decode_in_pieces(stream, list(range(1, len(stream)))) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    dec = SSEDecoder()
    assert dec.feed(b"data: x\r") == []
    # the LF completes the CRLF of "data: x"; the next CRLF is the blank line
    assert dec.feed(b"\n\r") == [b"x"]
    assert dec.feed(b"\ndata: y\r\n\r\n") == [b"y"]
    assert dec.flush() == []


def test_lone_cr_then_blank_line_in_next_read():
    dec = SSEDecoder()
    assert dec.feed(b"data: x\r") == []
    assert dec.feed(b"\r") == [b"x"]  # CR CR: line end then blank line


def test_mixed_line_ends():
    assert decode_in_pieces(b"data: a\r\ndata: b\rdata: c\n\r\n", []) == [b"a\nb\nc"]


def test_data_with_and_without_space_and_extra_spaces_kept():
    assert decode_in_pieces(b"data:x\n\ndata: y\n\ndata:  z\n\n", []) == [b"x", b"y", b" z"]


def test_events_without_data_are_ignored():
    stream = b"event: ping\n\n: comment\n\nid: 3\nretry: 5\n\n\n\n"
    assert decode_in_pieces(stream, []) == []


def test_empty_data_is_not_returned_but_empty_lines_inside_data_are_kept():
    assert decode_in_pieces(b"data:\n\ndata\n\n", []) == []
    assert decode_in_pieces(b"data: a\ndata:\ndata: b\n\n", []) == [b"a\n\nb"]


def test_field_name_data_without_colon_is_an_empty_line():
    assert decode_in_pieces(b"data: a\ndata\n\n", []) == [b"a\n"]


def test_unknown_fields_and_lookalikes_are_skipped():
    assert decode_in_pieces(b"datum: no\ndata-x: no\nDATA: no\n\n", []) == []


def test_flush_returns_last_event_without_blank_line():
    dec = SSEDecoder()
    assert dec.feed(b"data: a\n\ndata: last") == [b"a"]
    assert dec.flush() == [b"last"]
    assert dec.flush() == []


def test_flush_after_complete_data_line_without_blank_line():
    dec = SSEDecoder()
    assert dec.feed(b"data: a\ndata: b\n") == []
    assert dec.flush() == [b"a\nb"]


def test_bom_at_stream_start_is_skipped_even_when_split():
    stream = b"\xef\xbb\xbfdata: a\n\ndata: b\n\n"
    for cut in range(len(stream) + 1):
        assert decode_in_pieces(stream, [cut]) == [b"a", b"b"], cut
    # only at the start: a BOM later in the stream is part of a line (here an unknown field)
    assert decode_in_pieces(b"data: a\n\n\xef\xbb\xbfdata: b\n\n", []) == [b"a"]


def test_many_events_in_one_read_and_empty_reads():
    dec = SSEDecoder()
    assert dec.feed(b"") == []
    assert dec.feed(b"".join(b"data: %d\n\n" % i for i in range(100))) == [b"%d" % i for i in range(100)]


def test_line_over_limit_raises_malformed_chunk_split_or_whole():
    dec = SSEDecoder(max_line_bytes=64)
    assert dec.feed(b"data: " + b"x" * 50) == []
    with pytest.raises(RequestError) as err:
        dec.feed(b"x" * 20)
    assert err.value.kind == MALFORMED_CHUNK
    assert "max_line_bytes=64" in err.value.message

    with pytest.raises(RequestError):
        SSEDecoder(max_line_bytes=64).feed(b"data: " + b"x" * 100 + b"\n\n")
    with pytest.raises(RequestError):
        SSEDecoder(max_line_bytes=64).feed(b"data: a\n" + b"y" * 100)


def test_event_data_over_limit_raises():
    dec = SSEDecoder(max_line_bytes=64)
    with pytest.raises(RequestError):
        for _ in range(10):
            dec.feed(b"data: " + b"z" * 20 + b"\n")


def test_many_empty_data_lines_are_bounded_too():
    dec = SSEDecoder(max_line_bytes=64)
    with pytest.raises(RequestError):
        dec.feed(b"data\n" * 100)


def test_multi_line_event_at_the_limit_is_fine():
    # joined size: 3 lines of 20 bytes + 2 separators = 62 <= 64
    dec = SSEDecoder(max_line_bytes=64)
    assert dec.feed(b"data: " + b"a" * 20 + b"\n") == []
    assert dec.feed(b"data: " + b"b" * 20 + b"\ndata: " + b"c" * 20 + b"\n\n") == [
        b"a" * 20 + b"\n" + b"b" * 20 + b"\n" + b"c" * 20
    ]
    assert dec.feed(b"data: ok\n\n") == [b"ok"]  # the size restarts with each event


def test_lines_at_the_limit_are_fine():
    line = b"data: " + b"x" * 58  # exactly 64 bytes
    dec = SSEDecoder(max_line_bytes=64)
    assert dec.feed(line[:30]) == []
    assert dec.feed(line[30:] + b"\n\n") == [b"x" * 58]


def test_bad_limit_rejected():
    with pytest.raises(ValueError):
        SSEDecoder(max_line_bytes=0)


def reference_decode(stream: bytes) -> list[bytes]:
    """The event-stream rules applied to a whole stream at once: the obvious, slow way."""
    if stream.startswith(b"\xef\xbb\xbf"):
        stream = stream[3:]
    lines = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    out, data = [], []
    for line in [*lines, b""]:  # end of stream acts as a blank line (flush)
        if line == b"":
            payload = b"\n".join(data)
            if data and payload:
                out.append(payload)
            data = []
            continue
        name, sep, value = line.partition(b":")
        if name == b"data":
            data.append(value[1:] if value.startswith(b" ") else value)
    return out


def test_random_streams_match_the_reference_for_random_splits():
    import random

    rnd = random.Random(1234)
    vocab = [b"data: {\"x\": 1}", b"data:[DONE]", b"data", b"data:", b"data:  two", b": ping", b"event: e",
             b"id: 9", b"retry: 1", b"", b"", b"", b"junk", b"data: \xc3\xa9"]  # fmt: skip
    for _ in range(2000):
        parts = [rnd.choice(vocab) + rnd.choice([b"\n", b"\r", b"\r\n"]) for _ in range(rnd.randint(0, 12))]
        stream = b"".join(parts)
        if rnd.random() < 0.3:  # sometimes no final line end
            stream += rnd.choice(vocab)
        cuts = sorted(rnd.randint(0, len(stream)) for _ in range(rnd.randint(0, 6)))
        assert decode_in_pieces(stream, cuts) == reference_decode(stream), (stream, cuts)
