"""IncrementalAlterConfigs' operations (SET, DELETE, APPEND, SUBTRACT) on the three resource
types that take them: topics (``broker/log/topic_config.py: incremental_overrides``), groups
(``group_configs.apply_ops``) and client metrics subscriptions
(``client_metrics_configs.apply_ops``). Each row pins one type's answer, value or error to the
byte, so that the types' differences (list splitting, refusal messages, SET validation, the
list an APPEND starts from) stay what they are."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest

from broker.config import client_metrics_configs, group_configs
from broker.log.topic_config import LogConfig, incremental_overrides
from protocol.errors import ErrorCode, KafkaError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
Ops = Sequence[tuple[str, int, str | None]]


def _topic(current: Mapping[str, str], ops: Ops) -> dict[str, str]:
    return incremental_overrides(current, LogConfig(), list(ops))


CALLERS: dict[str, Callable[[Mapping[str, str], Ops], dict[str, str]]] = {
    "topic": _topic,
    "group": group_configs.apply_ops,
    "client_metrics": client_metrics_configs.apply_ops,
}
TAGS = "streams.rack.aware.assignment.tags"  # the groups' one LIST key
LONG_NAME = "k" * 300

# (caller, current, ops, the overrides after them)
RESULTS: list[tuple[str, dict[str, str], Ops, dict[str, str]]] = [
    # APPEND adds the items not there yet, in order; SUBTRACT removes every copy of each.
    ("topic", {"cleanup.policy": "delete"}, [("cleanup.policy", APPEND, "delete,compact")],
     {"cleanup.policy": "delete,compact"}),
    ("group", {TAGS: "a,b"}, [(TAGS, APPEND, "b,c")], {TAGS: "a,b,c"}),
    ("client_metrics", {"metrics": "a.,b."}, [("metrics", APPEND, "b.,c.")],
     {"metrics": "a.,b.,c."}),
    ("group", {TAGS: "a,b,a"}, [(TAGS, SUBTRACT, "a")], {TAGS: "b"}),
    ("client_metrics", {"metrics": "a.,b.,a."}, [("metrics", SUBTRACT, "a.")], {"metrics": "b."}),
    # An item given twice is appended twice (the list does not dedupe what it is given).
    ("topic", {}, [("cleanup.policy", APPEND, "compact,compact")],
     {"cleanup.policy": "delete,compact,compact"}),
    ("group", {}, [(TAGS, APPEND, "a,a")], {TAGS: "a,a"}),
    ("client_metrics", {}, [("metrics", APPEND, "a.,a.")], {"metrics": "a.,a."}),
    # SUBTRACT of an item that is not there changes nothing.
    ("topic", {"cleanup.policy": "delete,compact"}, [("cleanup.policy", SUBTRACT, "nope")],
     {"cleanup.policy": "delete,compact"}),
    ("group", {TAGS: "a,b"}, [(TAGS, SUBTRACT, "x")], {TAGS: "a,b"}),
    ("client_metrics", {"metrics": "a."}, [("metrics", SUBTRACT, "x.")], {"metrics": "a."}),
    # The list an APPEND starts from when the key is not set: the broker default for a topic,
    # empty for the others.
    ("topic", {}, [("cleanup.policy", APPEND, "compact")], {"cleanup.policy": "delete,compact"}),
    ("topic", {}, [("cleanup.policy", SUBTRACT, "compact")], {"cleanup.policy": "delete"}),
    ("group", {}, [(TAGS, APPEND, "a")], {TAGS: "a"}),
    ("group", {}, [(TAGS, SUBTRACT, "a")], {TAGS: ""}),
    ("client_metrics", {}, [("metrics", APPEND, "a.")], {"metrics": "a."}),
    # Empty items: a topic and a group drop them; client metrics keeps those inside a list.
    ("topic", {"cleanup.policy": "delete,,"}, [("cleanup.policy", APPEND, ",compact,")],
     {"cleanup.policy": "delete,compact"}),
    ("group", {TAGS: "a,,b"}, [(TAGS, APPEND, ",c,")], {TAGS: "a,b,c"}),
    ("client_metrics", {"metrics": "a.,,b."}, [("metrics", APPEND, ",c.,")],
     {"metrics": "a.,,b.,c."}),
    ("client_metrics", {"metrics": "a.,,b."}, [("metrics", SUBTRACT, ",")], {"metrics": "a.,b."}),
    # Whitespace: a topic strips every item; a group strips the items given but not the stored
    # ones; client metrics strips both.
    ("topic", {"cleanup.policy": " delete "}, [("cleanup.policy", APPEND, " compact ")],
     {"cleanup.policy": "delete,compact"}),
    ("group", {TAGS: "a, b"}, [(TAGS, APPEND, " b , c")], {TAGS: "a, b,b,c"}),
    ("client_metrics", {"metrics": " a. , b. "}, [("metrics", APPEND, " b. ")],
     {"metrics": "a.,b."}),
    # A null APPEND / SUBTRACT value is an empty list.
    ("topic", {"cleanup.policy": "delete"}, [("cleanup.policy", APPEND, None)],
     {"cleanup.policy": "delete"}),
    ("group", {TAGS: "a"}, [(TAGS, SUBTRACT, None)], {TAGS: "a"}),
    ("client_metrics", {"metrics": "a."}, [("metrics", APPEND, None)], {"metrics": "a."}),
    # SET: a topic checks and strips the value; the others keep it as given (their stores
    # check and strip the whole set).
    ("topic", {}, [("retention.ms", SET, " 1000 ")], {"retention.ms": "1000"}),
    ("group", {}, [("consumer.session.timeout.ms", SET, " 50000 ")],
     {"consumer.session.timeout.ms": " 50000 "}),
    ("client_metrics", {}, [("interval.ms", SET, " 1000 ")], {"interval.ms": " 1000 "}),
    ("group", {}, [("no.such.key", SET, "1")], {"no.such.key": "1"}),  # the store refuses it
    # DELETE of a key not set changes nothing.
    ("topic", {"retention.ms": "1"}, [("segment.ms", DELETE, None)], {"retention.ms": "1"}),
    ("group", {TAGS: "a"}, [(TAGS, DELETE, None), ("x", DELETE, None)], {}),
    ("client_metrics", {"metrics": "a."}, [("interval.ms", DELETE, None)], {"metrics": "a."}),
    # The operations apply in order; a group and client metrics take a key twice.
    ("group", {}, [(TAGS, SET, "a"), (TAGS, APPEND, "b")], {TAGS: "a,b"}),
    ("client_metrics", {"metrics": "a."}, [("metrics", DELETE, None), ("metrics", APPEND, "b.")],
     {"metrics": "b."}),
]


@pytest.mark.parametrize(("caller", "current", "ops", "expected"), RESULTS)
def test_operations(caller: str, current: dict[str, str], ops: Ops,
                    expected: dict[str, str]) -> None:
    before = dict(current)
    assert CALLERS[caller](current, ops) == expected
    assert current == before  # never mutated


# (caller, current, ops, the error's code, its message)
ERRORS: list[tuple[str, dict[str, str], Ops, ErrorCode, str]] = [
    # A null SET value: Kafka's INVALID_REQUEST for a group and client metrics; a topic's value
    # check says INVALID_CONFIG.
    ("group", {}, [(TAGS, SET, None)], ErrorCode.INVALID_REQUEST,
     f"Null value not supported for : {TAGS}"),
    ("client_metrics", {}, [("metrics", SET, None)], ErrorCode.INVALID_REQUEST,
     "Null value not supported for : metrics"),
    ("topic", {}, [("retention.ms", SET, None)], ErrorCode.INVALID_CONFIG,
     "Null value not supported for retention.ms"),
    # An operation that does not exist (one message for the three: neither is Kafka's).
    ("topic", {}, [("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST,
     "Unknown alter config operation 9"),
    ("group", {}, [(TAGS, 9, "a")], ErrorCode.INVALID_REQUEST,
     "Unknown alter config operation 9"),
    ("client_metrics", {}, [("metrics", -1, "a.")], ErrorCode.INVALID_REQUEST,
     "Unknown alter config operation -1"),
    # APPEND / SUBTRACT on a key that is not a list, or not a key at all: each type's message.
    ("topic", {}, [("retention.ms", APPEND, "5")], ErrorCode.INVALID_CONFIG,
     "Config value append is not allowed for config key: retention.ms"),
    ("topic", {}, [("retention.ms", SUBTRACT, "5")], ErrorCode.INVALID_CONFIG,
     "Config value subtract is not allowed for config key: retention.ms"),
    ("group", {}, [("consumer.session.timeout.ms", APPEND, "5")], ErrorCode.INVALID_CONFIG,
     "Config value append is not allowed for config key: consumer.session.timeout.ms"),
    ("group", {}, [("no.such.key", SUBTRACT, "5")], ErrorCode.INVALID_CONFIG,
     "Config value subtract is not allowed for config key: no.such.key"),
    ("client_metrics", {}, [("interval.ms", APPEND, "5")], ErrorCode.INVALID_CONFIG,
     "Can't APPEND to key interval.ms because its type is not LIST."),
    ("client_metrics", {}, [("no.such.key", SUBTRACT, "5")], ErrorCode.INVALID_CONFIG,
     "Can't SUBTRACT to key no.such.key because its type is not LIST."),
    ("client_metrics", {}, [(LONG_NAME, APPEND, "5")], ErrorCode.INVALID_CONFIG,
     f"Can't APPEND to key {'k' * 256}...(44 more characters) because its type is not LIST."),
    # A topic checks every key (known, given once) before its operation, then every value.
    ("topic", {}, [("no.such.key", DELETE, None)], ErrorCode.INVALID_CONFIG,
     "Unknown topic config name: no.such.key"),
    ("topic", {}, [("no.such.key", APPEND, "a")], ErrorCode.INVALID_CONFIG,
     "Unknown topic config name: no.such.key"),
    ("topic", {}, [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
     ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys: retention.ms"),
    ("topic", {}, [("retention.ms", SET, "x"), ("retention.ms", SET, "1")],
     ErrorCode.INVALID_CONFIG,
     "Invalid value x for configuration retention.ms: Not a number of type LONG"),
    ("topic", {}, [("cleanup.policy", APPEND, "shred")], ErrorCode.INVALID_CONFIG,
     "Invalid value delete,shred for configuration cleanup.policy: String must be one of: "
     "compact, delete"),
    ("topic", {}, [("cleanup.policy", SUBTRACT, "delete")], ErrorCode.INVALID_CONFIG,
     "Invalid value  for configuration cleanup.policy: expected a list of compact, delete"),
]


@pytest.mark.parametrize(("caller", "current", "ops", "code", "message"), ERRORS)
def test_refusals(caller: str, current: dict[str, str], ops: Ops, code: ErrorCode,
                  message: str) -> None:
    with pytest.raises(KafkaError) as caught:
        CALLERS[caller](current, ops)
    assert (caught.value.code, caught.value.message) == (code, message)
