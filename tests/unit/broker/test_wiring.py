"""broker/wiring.py and broker/app.py: the one place that joins the group and transaction
services, on a real broker built by the composition root."""

from __future__ import annotations

import pytest

from broker.app import build_broker
from broker.clock import ManualClock
from broker.config import build_config
from broker.log.topics import CONSUMER_OFFSETS_TOPIC, offsets_partition
from broker.wiring import CrossService
from protocol.errors import ErrorCode, KafkaError
from protocol.records import encode_batch

NOW = 1_700_000_000_000


class Groups:
    def __init__(self) -> None:
        self.markers: list[tuple[int, int, bool]] = []

    def on_txn_marker(self, index: int, producer_id: int, commit: bool) -> None:
        self.markers.append((index, producer_id, commit))

    def offsets_topic_partition(self, group_id: str) -> tuple[str, int]:
        return offsets_partition(group_id, 7)


def test_markers_reach_the_groups_only_for_offsets_partitions() -> None:
    cross = CrossService()
    groups = Groups()
    cross.attach(groups, None)  # type: ignore[arg-type]
    cross.markers_durable([("t", 0), (CONSUMER_OFFSETS_TOPIC, 3), ("t", 1),
                           (CONSUMER_OFFSETS_TOPIC, 5)], 42, True)
    assert groups.markers == [(3, 42, True), (5, 42, True)]
    assert cross.offsets_partition("g") == offsets_partition("g", 7)


def test_the_root_wires_both_services_to_one_cross_service(tmp_path) -> None:
    config = build_config({"offsets.topic.num.partitions": "4"}, data_dir=tmp_path / "d")
    broker = build_broker(config, clock=ManualClock(NOW))
    try:
        # AddOffsetsToTxn and TxnOffsetCommit agree on the group's partition: one mapping.
        assert broker.cross.offsets_partition("g") == offsets_partition("g", 4)
        assert broker.groups.offsets_topic_partition("g") == offsets_partition("g", 4)
        # TxnOffsetCommit's batch goes through the transaction coordinator's produce check.
        partition = broker.groups.offsets_partition("g", NOW)
        batch = bytearray(encode_batch([(b"k", b"v", (), NOW)], producer_id=9, producer_epoch=0,
                                       base_sequence=0, transactional=True))
        with pytest.raises(KafkaError) as err:
            broker.cross.verify_txn_produce(partition, batch, "nobody")
        assert err.value.code == ErrorCode.INVALID_PRODUCER_ID_MAPPING  # unknown id
        assert broker.transactions.recovery is not None  # the root ran recovery
    finally:
        broker.close()
