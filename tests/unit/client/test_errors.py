"""One exception class per error code, with retriable / fatal / abortable flags."""

from __future__ import annotations

import pytest

from client import errors
from protocol.errors import RETRIABLE, ErrorCode


@pytest.mark.parametrize("code", [c for c in ErrorCode if c != ErrorCode.NONE])
def test_every_code_has_its_own_class(code):
    cls = errors.for_code(code)
    assert cls is not errors.BrokerResponseError
    assert cls.code == code
    exc = errors.error_for(code)
    assert exc.wire_code == code and code.name in str(exc)
    assert cls.retriable == (code in RETRIABLE)
    assert cls.fatal == (code in errors.FATAL)
    assert cls.abortable == (not cls.fatal)


def test_unknown_code_keeps_its_number():
    exc = errors.error_for(999, "strange")
    assert type(exc) is errors.BrokerResponseError
    assert exc.wire_code == 999 and "UNKNOWN_ERROR_CODE_999" in str(exc)


def test_named_classes_the_issue_mentions():
    assert errors.for_code(ErrorCode.PRODUCER_FENCED) is errors.ProducerFencedError
    assert errors.OutOfOrderSequenceError is errors.OutOfOrderSequenceNumberError
    assert errors.OutOfOrderSequenceError.fatal
    # A stale epoch (47) is reported as a fencing, as the Java client does.
    assert issubclass(errors.InvalidProducerEpochError, errors.ProducerFencedError)
    assert errors.ConcurrentTransactionsError.retriable
    assert errors.NotCoordinatorError.retriable and errors.CoordinatorNotAvailableError.retriable
    assert errors.InvalidTxnStateError.fatal


def test_client_side_errors():
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.IllegalStateError, RuntimeError)
    assert errors.BrokerConnectionError.retriable
    assert errors.KafkaTimeoutError.retriable
    assert errors.TransactionAbortableError.abortable
    assert not errors.ConfigError.abortable


def test_table_is_kafkas():
    """Spot checks against Kafka's Errors.java / protocol error table (name, code, retriable)."""
    assert len(ErrorCode) == 135  # -1 .. 133 (Kafka 4.4: SHARE_SESSION_LIMIT_REACHED, KIP-932)
    assert [c.value for c in ErrorCode] == list(range(-1, 134))
    expected = {
        "MEMBER_ID_REQUIRED": (79, False),
        "FENCED_INSTANCE_ID": (82, False),
        "REBALANCE_IN_PROGRESS": (27, False),
        "REPLICA_NOT_AVAILABLE": (9, True),
        "NOT_CONTROLLER": (41, True),
        "FETCH_SESSION_ID_NOT_FOUND": (70, True),
        "OFFSET_NOT_AVAILABLE": (78, True),
        "THROTTLING_QUOTA_EXCEEDED": (89, True),
        "UNKNOWN_TOPIC_ID": (100, True),
        "TRANSACTION_ABORTABLE": (120, False),
        "INVALID_REGULAR_EXPRESSION": (128, False),
        "STREAMS_TOPOLOGY_FENCED": (132, False),
        "SHARE_SESSION_LIMIT_REACHED": (133, False),
    }
    for name, (code, retriable) in expected.items():
        assert ErrorCode[name] == code
        assert (ErrorCode[name] in RETRIABLE) == retriable, name
    assert len(RETRIABLE) == 31


def test_newer_codes_have_named_classes():
    exc = errors.error_for(79, "JoinGroup")
    assert isinstance(exc, errors.MemberIdRequiredError)
    assert "MEMBER_ID_REQUIRED" in str(exc) and "UNKNOWN_ERROR_CODE" not in str(exc)
    assert errors.for_code(89).__name__ == "ThrottlingQuotaExceededError"
    assert errors.for_code(89).retriable
    # Kafka's TransactionAbortableException (120) beside the client's own TransactionAbortableError
    assert errors.for_code(120).__name__ == "TransactionAbortableResponseError"
    assert errors.for_code(120) is not errors.TransactionAbortableError
