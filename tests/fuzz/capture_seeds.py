"""Regenerate the fuzzer's seed frames: ``python -m tests.fuzz.capture_seeds``.

Starts a broker, puts a recording TCP proxy in front of it and runs short confluent-kafka and
kafka-python sessions through the proxy (topics, idempotent and compressed produce, transactions,
group consume, offsets). Every request frame a client sends is written to
``tests/fuzz/seeds/<client>-<nnn>-<api_key>-v<version>.bin`` (size prefix excluded), at most a few
per (api, version). The seeds are committed; rerun this when clients or APIs change.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import threading
from pathlib import Path

from protocol.framing import FrameDecoder
from protocol.headers import parse_request_header_untrusted

SEEDS = Path(__file__).parent / "seeds"
PER_API_VERSION = 3
PER_PRODUCE_VERSION = 12  # every codec's batches


class RecordingProxy:
    def __init__(self, upstream_port: int = 0) -> None:
        self.upstream_port = upstream_port
        self.frames: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump_requests, args=(client, upstream),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _pump_requests(self, src: socket.socket, dst: socket.socket) -> None:
        decoder = FrameDecoder()  # frames cut as the broker cuts them
        try:
            while True:
                with decoder.get_buffer() as buffer:
                    n = src.recv_into(buffer)
                    dst.sendall(buffer[:n])
                if n == 0:
                    break
                decoder.advance(n)
                while isinstance(frame := decoder.next_frame(), bytearray):
                    self.frames.append(bytes(frame))
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        self.listener.close()


def confluent_session(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("seed-c", 2, 1)]).values():
        f.result(15)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "compression.type": codec, "linger.ms": 5})
        for i in range(50):
            producer.produce("seed-c", key=b"k%d" % i, value=b"v" * (i * 7),
                             headers=[("h", b"x")] if i % 5 == 0 else None)
        producer.flush(15)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "seed-tx",
                    "metadata.recovery.strategy": "none"})
    txn.init_transactions(15)
    txn.begin_transaction()
    txn.produce("seed-c", b"in-txn")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "seed-g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe(["seed-c"])
    got = 0
    for _ in range(60):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
        if got >= 50:
            break
    txn.send_offsets_to_transaction([TopicPartition("seed-c", 0, 1)],
                                    consumer.consumer_group_metadata(), 15)
    txn.commit_transaction(15)
    consumer.commit(asynchronous=False)
    consumer.close()


def kafka_python_session(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("seed-k", 1, 1)])
    admin.close()
    for codec in (None, "gzip"):
        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec,
                                 enable_idempotence=True, acks="all")
        for i in range(30):
            producer.send("seed-k", key=b"k", value=b"w" * i)
        producer.flush(15)
        producer.close()
    consumer = KafkaConsumer("seed-k", bootstrap_servers=bootstrap, group_id="seed-kg",
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()


def main() -> None:
    from tests.broker_process import BrokerProcess

    work = Path(tempfile.mkdtemp(prefix="seeds-"))
    if SEEDS.exists():
        shutil.rmtree(SEEDS)
    SEEDS.mkdir()
    for client, session in (("confluent", confluent_session),
                            ("kafka-python", kafka_python_session)):
        # The broker advertises the proxy, so every connection of the client passes through it.
        proxy = RecordingProxy()
        broker = BrokerProcess(work / client, "--advertised-port", str(proxy.port)).start()
        proxy.upstream_port = broker.port
        try:
            session(f"127.0.0.1:{proxy.port}")
        finally:
            proxy.close()
            broker.stop()
        counts: dict[tuple[int, int], int] = {}
        written = 0
        for frame in proxy.frames:
            header, _ = parse_request_header_untrusted(bytearray(frame))
            api_key, version = header.api_key, header.api_version
            n = counts.get((api_key, version), 0)
            if n >= (PER_PRODUCE_VERSION if api_key == 0 else PER_API_VERSION):
                continue
            counts[(api_key, version)] = n + 1
            name = f"{client}-{written:03d}-{api_key}-v{version}.bin"
            (SEEDS / name).write_bytes(frame)
            written += 1
        print(f"{client}: {written} seeds of {len(proxy.frames)} frames", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
