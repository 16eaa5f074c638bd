"""Topic configs: validation, durable overrides applied at once, CreatePartitions, DeleteRecords,
LogAppendTime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.config import build_config
from broker.log.manager import TOPICS_FILE, LogConfig
from broker.log.topic_config import (
    AlterOp,
    apply_alter_ops,
    apply_overrides,
    incremental_overrides,
    normalize_overrides,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.records import batch_crc_ok, decode_batches_untrusted, parse_header_untrusted
from tests.unit.broker.log.test_log import NOW, batch, crash, make

# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "-2"),
        ("retention.ms", "soon"),
        ("segment.bytes", "13"),
        ("segment.bytes", str(1 << 31)),
        ("max.message.bytes", "-1"),
        ("cleanup.policy", "shred"),
        ("cleanup.policy", ""),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("delete.retention.ms", "-1"),
        ("min.compaction.lag.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("message.timestamp.type", "BrokerTime"),
        ("no.such.key", "1"),
        ("retention.ms", None),
    ],
)
def test_invalid_values_are_invalid_config(key: str, value: str | None) -> None:
    with pytest.raises(KafkaError) as info:
        apply_overrides(LogConfig(), {key: value})
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert key in info.value.message


def test_valid_values_parse_to_typed_fields() -> None:
    config = apply_overrides(LogConfig(), {
        "cleanup.policy": "compact, delete", "min.cleanable.dirty.ratio": "0.25",
        "message.timestamp.type": "LogAppendTime", "retention.bytes": "-1",
        "max.compaction.lag.ms": "60000", "preallocate": "FALSE",
    })
    assert config.cleanup_policy == ("compact", "delete")
    assert config.compact and config.delete and config.log_append_time
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.max_compaction_lag_ms == 60000
    assert config.preallocate is False


def test_min_compaction_lag_above_max_is_refused() -> None:
    with pytest.raises(KafkaError) as info:
        apply_overrides(LogConfig(), {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert info.value.code == ErrorCode.INVALID_CONFIG


def test_incremental_ops() -> None:
    defaults = LogConfig()
    current = {"retention.ms": "1000", "segment.ms": "5000"}
    result = incremental_overrides(current, defaults, [
        ("retention.ms", AlterOp.DELETE, None),
        ("max.message.bytes", AlterOp.SET, "2048"),
        ("cleanup.policy", AlterOp.APPEND, "compact"),
    ])
    assert result == {"segment.ms": "5000", "max.message.bytes": "2048",
                      "cleanup.policy": "delete,compact"}
    result = incremental_overrides(result, defaults, [("cleanup.policy", AlterOp.SUBTRACT, "delete")])
    assert result["cleanup.policy"] == "compact"
    for ops, code in [
        ([("retention.ms", AlterOp.APPEND, "5")], ErrorCode.INVALID_CONFIG),
        ([("retention.ms", 9, "5")], ErrorCode.INVALID_REQUEST),
        ([("retention.ms", AlterOp.SET, "1"), ("retention.ms", AlterOp.SET, "2")],
         ErrorCode.INVALID_REQUEST),
        ([("cleanup.policy", AlterOp.SUBTRACT, "delete")], ErrorCode.INVALID_CONFIG),  # empty
        ([("bogus", AlterOp.DELETE, None)], ErrorCode.INVALID_CONFIG),
    ]:
        with pytest.raises(KafkaError) as info:
            incremental_overrides(current, defaults, ops)
        assert info.value.code == code, ops
    assert current == {"retention.ms": "1000", "segment.ms": "5000"}  # never mutated


def _ops(current: dict[str, str], ops: list[tuple[str, int, str | None]], **rules) -> dict:
    """``apply_alter_ops`` with one list key ``l`` and the plainest rules."""
    return apply_alter_ops(current, ops, is_list=lambda key: key == "l",
                           refusal=lambda key, op: f"{op.name} {key}", **rules)


def test_alter_ops_set_delete_append_subtract() -> None:
    current = {"l": "a,b", "x": "1"}
    assert _ops(current, [("x", AlterOp.DELETE, None), ("y", AlterOp.SET, " 2 "),
                          ("l", AlterOp.APPEND, "b, c,,a"), ("l", AlterOp.SUBTRACT, "a,zz")]
                ) == {"l": "b,c", "y": " 2 "}
    assert current == {"l": "a,b", "x": "1"}
    assert _ops({}, [("l", AlterOp.SUBTRACT, "a")]) == {"l": ""}
    assert _ops({"l": "a"}, [("l", AlterOp.APPEND, None)]) == {"l": "a"}


@pytest.mark.parametrize(("ops", "code", "message"), [
    ([("k", AlterOp.SET, None)], ErrorCode.INVALID_REQUEST, "Null value not supported for : k"),
    ([("k", 4, "v")], ErrorCode.INVALID_REQUEST, "Unknown alter config operation 4"),
    ([("k", AlterOp.APPEND, "v")], ErrorCode.INVALID_CONFIG, "APPEND k"),
    ([("k", AlterOp.SUBTRACT, "v")], ErrorCode.INVALID_CONFIG, "SUBTRACT k"),
])
def test_alter_ops_refusals(ops, code: ErrorCode, message: str) -> None:
    with pytest.raises(KafkaError) as caught:
        _ops({}, ops)
    assert (caught.value.code, caught.value.message) == (code, message)


def test_alter_ops_take_each_types_rules() -> None:
    """What a caller passes: how lists split (given and stored), the list of a key not set, a
    check of every key before its operation and of every new value, a list's too."""
    assert _ops({"l": " a ,, b"}, [("l", AlterOp.APPEND, "c")],
                split=lambda text: text.split(","),
                split_stored=lambda text: [t for t in text.split(",") if t]) == {"l": " a , b,c"}
    assert _ops({}, [("l", AlterOp.APPEND, "c")],
                default_items=lambda key: ["d"]) == {"l": "d,c"}
    seen: list[tuple[str, str | None]] = []

    def check_value(key: str, value: str | None) -> str:
        seen.append((key, value))
        return f"<{value}>"

    assert _ops({"l": "a"}, [("k", AlterOp.SET, "1"), ("l", AlterOp.APPEND, "b")],
                check_value=check_value) == {"k": "<1>", "l": "<a,b>"}
    assert seen == [("k", "1"), ("l", "a,b")]

    def refuse_k(key: str) -> None:
        if key == "k":
            raise KafkaError(ErrorCode.INVALID_CONFIG, "no k")

    with pytest.raises(KafkaError) as caught:
        _ops({}, [("l", AlterOp.SET, "a"), ("k", 9, None)], check_key=refuse_k)
    assert caught.value.message == "no k"  # the key is checked before its operation


def test_broker_properties_set_defaults_and_are_checked() -> None:
    config = build_config({"log.cleanup.policy": "compact", "log.message.timestamp.type":
                           "LogAppendTime"})
    assert config.log.cleanup_policy == ("compact",)
    assert config.log.log_append_time
    assert {"log.cleanup.policy", "log.message.timestamp.type"} <= config.static_keys
    with pytest.raises(ValueError, match="log.cleaner.min.cleanable.ratio"):
        build_config({"log.cleaner.min.cleanable.ratio": "2"})


# -- the store ------------------------------------------------------------------------------


def test_alter_is_durable_and_applied_to_live_partitions(tmp_path: Path) -> None:
    mgr = make(tmp_path)
    mgr.create_topic("t", 2, {"retention.ms": "1000"})
    assert mgr.partition("t", 1).config.retention_ms == 1000
    mgr.alter_topic_config("t", {"max.message.bytes": "200", "cleanup.policy": "compact"})
    for i in range(2):
        config = mgr.partition("t", i).config
        assert config.max_message_bytes == 200
        assert config.retention_ms == LogConfig().retention_ms  # the dropped override is gone
        assert config.cleanup_policy == ("compact",)
    with pytest.raises(KafkaError) as info:
        mgr.partition("t", 0).append_untrusted(batch(1, value_size=400), NOW)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    doc = json.loads((tmp_path / "data" / TOPICS_FILE).read_text())
    assert doc["topics"]["t"]["config"] == {"max.message.bytes": "200", "cleanup.policy": "compact"}
    crash(mgr)  # kill -9: the overrides come back from topics.json
    again = make(tmp_path)
    assert again.topic_overrides("t") == {"max.message.bytes": "200", "cleanup.policy": "compact"}
    assert again.partition("t", 1).config.max_message_bytes == 200


def test_alter_validate_only_and_errors_change_nothing(tmp_path: Path) -> None:
    mgr = make(tmp_path)
    mgr.create_topic("t", 1, {"retention.ms": "1000"})
    mgr.alter_topic_config("t", {"retention.ms": "5"}, validate_only=True)
    with pytest.raises(KafkaError):
        mgr.alter_topic_config("t", {"retention.ms": "x"})
    with pytest.raises(KafkaError) as info:
        mgr.alter_topic_config("nope", {})
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert mgr.topic_overrides("t") == {"retention.ms": "1000"}
    assert mgr.partition("t", 0).config.retention_ms == 1000


def test_create_topic_stores_normalized_overrides(tmp_path: Path) -> None:
    mgr = make(tmp_path)
    mgr.create_topic("t", 1, {"cleanup.policy": " compact "})
    assert mgr.topic_overrides("t") == {"cleanup.policy": "compact"}
    assert normalize_overrides({"segment.ms": 5}) == {"segment.ms": "5"}
    with pytest.raises(KafkaError):
        mgr.create_topic("u", 1, {"cleanup.policy": "bad"})
    assert "u" not in mgr.topics()


def test_create_partitions_grows_durably(tmp_path: Path) -> None:
    mgr = make(tmp_path)
    mgr.create_topic("t", 2, {"retention.ms": "1000"})
    for count, code in [(2, ErrorCode.INVALID_PARTITIONS), (1, ErrorCode.INVALID_PARTITIONS)]:
        with pytest.raises(KafkaError) as info:
            mgr.create_partitions("t", count, NOW)
        assert info.value.code == code
    with pytest.raises(KafkaError) as info:
        mgr.create_partitions("nope", 3, NOW)
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    mgr.create_partitions("t", 5, NOW, validate_only=True)
    assert mgr.topics()["t"] == 2
    mgr.partition("t", 0).append_untrusted(batch(2), NOW)
    mgr.create_partitions("t", 5, NOW)
    assert mgr.topics()["t"] == 5
    assert mgr.partition("t", 4).config.retention_ms == 1000
    mgr.partition("t", 4).append_untrusted(batch(1), NOW)
    mgr.close()
    again = make(tmp_path)
    assert again.topics()["t"] == 5
    assert again.partition("t", 0).log_end_offset == 2
    assert again.partition("t", 4).log_end_offset == 1


# -- DeleteRecords --------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_durably(tmp_path: Path) -> None:
    mgr = make(tmp_path, segment_bytes=300)
    mgr.create_topic("t", 1)
    p = mgr.partition("t", 0)
    for i in range(10):
        p.append_untrusted(batch(2, tag=i), NOW)
    p.flush()
    segments = len(p.segments)
    assert segments > 2
    with pytest.raises(KafkaError) as info:
        p.delete_records(21)  # above the high watermark (20)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert p.delete_records(7) == 7
    assert p.log_start_offset == 7
    assert len(p.segments) < segments  # whole segments below 7 are gone
    assert p.segments[0].base_offset <= 7
    assert p.delete_records(3) == 7  # never backwards
    with pytest.raises(KafkaError) as info:
        p.read(6, 1 << 20, p.high_watermark)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert p.read(7, 1 << 20, p.high_watermark)
    crash(mgr)
    again = make(tmp_path, segment_bytes=300)
    assert again.partition("t", 0).log_start_offset == 7
    assert again.partition("t", 0).delete_records(-1) == 20  # -1: up to the high watermark
    again.close()
    assert make(tmp_path, segment_bytes=300).partition("t", 0).log_start_offset == 20


# -- LogAppendTime ----------------------------------------------------------------------------


def test_log_append_time_stamps_batches_with_the_broker_clock(tmp_path: Path) -> None:
    mgr = make(tmp_path)
    mgr.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    p = mgr.partition("t", 0)
    result = p.append_untrusted(batch(3, ts=5), NOW + 42)
    assert result.log_append_time == NOW + 42
    p.flush()
    data = p.read(0, 1 << 20, p.high_watermark)
    header = parse_header_untrusted(data, 0)
    assert header.timestamp_type == 1 and header.max_timestamp == NOW + 42
    assert batch_crc_ok(data, 0, header)
    assert [len(r) for _, r in decode_batches_untrusted(data)] == [3]
    mgr.alter_topic_config("t", {})  # back to CreateTime
    result = p.append_untrusted(batch(1, ts=5), NOW + 50)
    assert result.log_append_time == -1
    data = p.read(3, 1 << 20, p.log_end_offset + 1)
    assert parse_header_untrusted(data, 0).timestamp_type == 0


def test_compact_only_topics_are_not_deleted_by_retention(tmp_path: Path) -> None:
    mgr = make(tmp_path, segment_bytes=200)
    mgr.create_topic("t", 1, {"cleanup.policy": "compact", "retention.ms": "1"})
    p = mgr.partition("t", 0)
    for i in range(5):
        p.append_untrusted(batch(2, tag=i), NOW)
    p.flush()
    assert p.enforce_retention(NOW + 10_000) == 0
    mgr.alter_topic_config("t", {"cleanup.policy": "compact,delete", "retention.ms": "1"})
    assert p.enforce_retention(NOW + 10_000) > 0


def test_validate_topic_checks_what_create_checks_and_creates_nothing(tmp_path: Path) -> None:
    mgr = make(tmp_path)
    assert mgr.validate_topic("v", 2, {"retention.ms": " 5 "}) == {"retention.ms": "5"}
    assert "v" not in mgr.topics()
    mgr.create_topic("t", 1)
    for name, count, overrides, code in [
        ("t", 1, None, ErrorCode.TOPIC_ALREADY_EXISTS),
        ("bad/name", 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("v", 0, None, ErrorCode.INVALID_PARTITIONS),
        ("v", 1, {"retention.ms": "soon"}, ErrorCode.INVALID_CONFIG),
    ]:
        with pytest.raises(KafkaError) as err:
            mgr.validate_topic(name, count, overrides)
        assert err.value.code == code
    assert sorted(mgr.topics()) == ["t"]
