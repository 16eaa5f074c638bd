"""The server's socket wrapper: gather sends that complete at once or in parts, and receives."""

from __future__ import annotations

import socket

import trio

from broker.network.sockets import Socket


def _pair(buffer: int | None = None) -> tuple[Socket, trio.socket.SocketType]:
    ours, theirs = socket.socketpair()
    if buffer is not None:
        for s in (ours, theirs):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    ours.setblocking(False)
    return Socket(ours), trio.socket.from_stdlib_socket(theirs)


async def _read_exactly(peer: trio.socket.SocketType, n: int, chunk: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = await peer.recv(chunk)
        assert data
        got += data
        await trio.sleep(0.001)  # a slow reader: the sender's buffer fills up
    return bytes(got)


async def test_a_send_that_fits_leaves_at_once_without_on_sent() -> None:
    sock, peer = _pair()
    calls = []
    sock.on_sent = lambda: calls.append(1)
    await sock.send_chunks([b"\x00\x00\x00\x03", b"", bytearray(b"ab"), memoryview(b"c")])
    assert await peer.recv(100) == b"\x00\x00\x00\x03abc"
    assert calls == []  # a send that completes at once is the caller's to account for
    sock.close()
    peer.close()


async def test_partial_sends_deliver_every_byte_in_order() -> None:
    sock, peer = _pair(buffer=4096)
    calls = []
    sock.on_sent = lambda: calls.append(1)
    chunks: list = []
    for i in range(40):
        chunks += [b"", bytes([i]) * (1000 + 997 * i), memoryview(bytes([255 - i]) * 7), b""]
    expected = b"".join(bytes(c) for c in chunks)
    with trio.fail_after(30):  # a sender that resends bytes would wait for a reader that stopped
        async with trio.open_nursery() as nursery:
            result: list[bytes] = []

            async def read() -> None:
                result.append(await _read_exactly(peer, len(expected), 5000))

            nursery.start_soon(read)
            await sock.send_chunks(chunks)
    assert result[0] == expected
    assert calls  # the send waited for the peer, and its progress counted as activity
    sock.close()
    peer.close()


async def test_more_chunks_than_one_sendmsg_takes() -> None:
    sock, peer = _pair()
    chunks = [bytes([i % 256]) for i in range(2000)]  # over IOV_MAX
    expected = b"".join(chunks)
    async with trio.open_nursery() as nursery:
        result: list[bytes] = []

        async def read() -> None:
            result.append(await _read_exactly(peer, len(expected), 65536))

        nursery.start_soon(read)
        await sock.send_chunks(chunks)
    assert result[0] == expected
    sock.close()
    peer.close()


async def test_receive_after_wait_finds_bytes_already_there_and_later_ones() -> None:
    sock, peer = _pair()
    await peer.send(b"early")
    buffer = bytearray(100)
    with trio.fail_after(5):
        n = await sock.recv_into_after_wait(buffer)
    assert buffer[:n] == b"early"
    async with trio.open_nursery() as nursery:

        async def late() -> None:
            await trio.sleep(0.05)
            await peer.send(b"late")

        nursery.start_soon(late)
        with trio.fail_after(5):
            n = await sock.recv_into_after_wait(buffer)
    assert buffer[:n] == b"late"
    peer.close()
    with trio.fail_after(5):
        assert await sock.recv_into_after_wait(buffer) == 0
    sock.close()
