"""FrameDecoder: frames fed whole, byte by byte and in random chunks; size limits; large frames."""

from __future__ import annotations

import random
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import CorruptFrameError, FrameTooLargeError
from protocol.framing import NEED_DATA, FrameDecoder, encode_frame

LARGE = 64 * 1024  # frames at least this large get a buffer of their own


def _drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        frames.append(bytes(frame))
    return frames


def _feed_in_chunks(decoder: FrameDecoder, data: bytes, sizes) -> list[bytes]:
    """Feed ``data`` in chunks of the given sizes (cycled), draining frames after each chunk."""
    frames = []
    pos = 0
    sizes = list(sizes)
    i = 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        i += 1
        decoder.receive_data(data[pos : pos + n])
        pos += n
        frames += _drain(decoder)
    return frames


def _bodies(rng: random.Random) -> list[bytes]:
    sizes = [0, 1, 5, 100, 4096, LARGE - 1, LARGE, 300_000, 17, 3 * LARGE + 5, 2]
    return [rng.randbytes(n) for n in sizes]


BODIES = _bodies(random.Random(1))
STREAM = b"".join(encode_frame(b) for b in BODIES)


def test_encode_frame() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"


def test_fed_whole() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(STREAM)
    assert _drain(decoder) == BODIES
    assert decoder.buffered == 0


def test_fed_whole_without_draining_in_between() -> None:
    # Several large frames arrive before the consumer asks for any.
    decoder = FrameDecoder()
    for body in BODIES:
        decoder.receive_data(encode_frame(body))
    assert _drain(decoder) == BODIES


def test_fed_byte_by_byte() -> None:
    bodies = [b"", b"x", b"hello world", bytes(range(256)) * 300, b"tail"]  # 76,800 > LARGE
    decoder = FrameDecoder()
    assert _feed_in_chunks(decoder, b"".join(encode_frame(b) for b in bodies), [1]) == bodies
    assert decoder.buffered == 0


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 200_000), min_size=1, max_size=20))
def test_fed_in_random_chunks(sizes: list[int]) -> None:
    assert _feed_in_chunks(FrameDecoder(), STREAM, sizes) == BODIES


@settings(max_examples=100, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300), max_size=8),
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=10),
)
def test_small_frames_in_random_chunks(bodies: list[bytes], sizes: list[int]) -> None:
    stream = b"".join(encode_frame(b) for b in bodies)
    assert _feed_in_chunks(FrameDecoder(), stream, sizes) == bodies


@pytest.mark.parametrize("partial", [b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x05ab"])
def test_trailing_partial_frame_waits(partial: bytes) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"one") + encode_frame(b"two") + partial)
    assert _drain(decoder) == [b"one", b"two"]
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered == len(partial)


def test_trailing_partial_large_frame_completes_later() -> None:
    body = random.Random(2).randbytes(200_000)
    framed = encode_frame(body)
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"small") + framed[:70_000])
    assert _drain(decoder) == [b"small"]
    assert decoder.buffered == 70_000
    decoder.receive_data(framed[70_000:] + encode_frame(b"next"))
    assert _drain(decoder) == [body, b"next"]


def test_large_frame_returned_intact_and_writable() -> None:
    body = random.Random(3).randbytes(5 * 1024 * 1024)
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(body) + encode_frame(b"after"))
    frame = decoder.next_frame()
    assert isinstance(frame, bytearray)
    assert len(frame) == len(body) and frame == body
    frame[0:8] = b"\x00" * 8  # the broker patches offsets in place
    assert bytes(decoder.next_frame()) == b"after"


def test_frames_do_not_share_memory() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"aaaa") + encode_frame(b"bbbb"))
    first = decoder.next_frame()
    first[:] = b"zzzz"
    assert decoder.next_frame() == b"bbbb"


def test_zero_length_frame() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"\x00\x00\x00\x00")
    assert decoder.next_frame() == b""
    assert decoder.next_frame() is NEED_DATA


def test_frame_of_exactly_max_size_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_size=100_000)
    body = bytes(100_000)
    decoder.receive_data(encode_frame(body))
    assert decoder.next_frame() == body


@pytest.mark.parametrize("size", [1025, 2**31 - 1])
def test_over_max_size_raises_before_buffering(size: int) -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.receive_data(struct.pack(">i", size) + b"x" * 10)
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


def test_frame_too_large_is_a_corrupt_frame_error() -> None:
    assert issubclass(FrameTooLargeError, CorruptFrameError)


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_negative_size_raises(size: int) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(struct.pack(">i", size))
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


@pytest.mark.parametrize("drain_each_chunk", [True, False])
def test_over_max_size_never_allocates_the_announced_size(drain_each_chunk: bool) -> None:
    announced = 2**31 - 1
    chunk = bytes(64 * 1024)
    decoder = FrameDecoder(max_frame_size=50 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLargeError):
            decoder.receive_data(struct.pack(">i", announced))
            # A peer keeps sending: with or without next_frame() between chunks, the decoder
            # must stop long before it holds anything near the announced size.
            for _ in range(40):
                decoder.receive_data(chunk)
                if drain_each_chunk:
                    decoder.next_frame()
            decoder.next_frame()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024


def test_get_buffer_and_advance() -> None:
    """The socket path: receive straight into the decoder's buffer, as ``recv_into`` would."""
    rng = random.Random(4)
    source = memoryview(STREAM)
    decoder = FrameDecoder()
    frames = []
    pos = 0
    while pos < len(source):
        with decoder.get_buffer() as target:
            assert len(target) > 0
            n = min(len(target), rng.choice([1, 7, 1000, 65_536, 10**6]), len(source) - pos)
            target[:n] = source[pos : pos + n]
        decoder.advance(n)
        pos += n
        frames += _drain(decoder)
    assert frames == BODIES
    assert decoder.buffered == 0


def test_get_buffer_fills_a_large_frame_in_place() -> None:
    body = random.Random(5).randbytes(1_000_000)
    framed = encode_frame(body)
    decoder = FrameDecoder()
    decoder.receive_data(framed[:100_000])
    assert decoder.next_frame() is NEED_DATA
    # From now on the decoder hands out the frame's own buffer to receive into; it grows with
    # the bytes that arrive (doubling), never to what the prefix claims before they do.
    pos = 100_000
    while pos < len(framed):
        with decoder.get_buffer() as target:
            assert 0 < len(target) <= max(pos, 256 * 1024)
            n = min(len(target), len(framed) - pos)
            target[:n] = framed[pos : pos + n]
        decoder.advance(n)
        pos += n
    assert decoder.next_frame() == body


def test_memory_follows_received_bytes_not_the_announced_size() -> None:
    decoder = FrameDecoder()
    assert decoder.capacity <= 8 * 1024  # an idle connection
    decoder.receive_data(struct.pack(">i", 100 * 1024 * 1024) + bytes(100))
    assert decoder.next_frame() is NEED_DATA
    assert decoder.pending_frame_size == 100 * 1024 * 1024
    assert decoder.capacity <= 300 * 1024
    decoder.receive_data(bytes(1_000_000))
    assert decoder.capacity <= 2 * 1024 * 1024 + 300 * 1024


def test_receive_buffer_shrinks_when_the_connection_goes_quiet() -> None:
    decoder = FrameDecoder()
    for _ in range(10):
        decoder.receive_data(encode_frame(bytes(60_000)) * 3)
        assert len(_drain(decoder)) == 3
    assert decoder.capacity > 64 * 1024
    decoder.receive_data(encode_frame(b"x"))
    _drain(decoder)
    with decoder.get_buffer():
        pass
    assert decoder.capacity <= 8 * 1024
