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
