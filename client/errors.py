"""Client exceptions: one class per Kafka error code, plus the client's own failures.

``protocol.errors.ErrorCode`` is the one table of codes; this module gives each code an exception
class (``for_code``) carrying three flags that tell the caller what to do next:

- ``retriable``: the same request may simply be sent again (after a backoff, maybe after a metadata
  refresh or coordinator rediscovery). Taken from ``protocol.errors.RETRIABLE``.
- ``fatal``: the producer instance cannot go on (fenced, out-of-order sequence, authorization,
  unsupported version...). Every later call raises ``IllegalStateError``; close the producer.
- ``abortable``: inside a transaction, the transaction cannot commit but ``abort_transaction()``
  brings the producer back to a usable state. Every error that is not fatal is abortable.

Client-side conditions (bad configuration, a call in the wrong state, timeouts, lost connections)
have their own classes below, named after their Java counterparts (``ConfigException`` ->
``ConfigError``, ``IllegalStateException`` -> ``IllegalStateError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from protocol.errors import RETRIABLE, ErrorCode, error_name

if TYPE_CHECKING:
    from client.structs import TopicPartition

# Codes after which a producer cannot continue (Kafka's "fatal" transaction-manager errors).
FATAL: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.PRODUCER_FENCED,
    }
)


class KafkaClientError(Exception):
    """Base class of every exception this client raises."""

    retriable: ClassVar[bool] = False
    fatal: ClassVar[bool] = False
    abortable: ClassVar[bool] = True


# -- client-side conditions -----------------------------------------------------------------------


class ConfigError(KafkaClientError, ValueError):
    """A configuration that cannot work (Java's ``ConfigException``)."""

    abortable = False


class IllegalStateError(KafkaClientError, RuntimeError):
    """A method called in a state that does not allow it (Java's ``IllegalStateException``)."""

    abortable = False


class KafkaTimeoutError(KafkaClientError, TimeoutError):
    """An operation did not finish in time (request, delivery, metadata or block timeout)."""

    retriable = True


class BrokerConnectionError(KafkaClientError, ConnectionError):
    """A connection could not be opened, or broke with requests in flight."""

    retriable = True


class CorruptResponseError(KafkaClientError):
    """A broker sent bytes that do not decode, or answered out of order."""

    retriable = True


class TransactionAbortedError(KafkaClientError):
    """A record was dropped unsent because its transaction was aborted."""


class TransactionAbortableError(KafkaClientError):
    """The current transaction cannot commit; call ``abort_transaction()`` and go on.

    ``__cause__`` is the error that made the transaction abortable.
    """

    abortable = True


class CommitFailedError(KafkaClientError):
    """An offset commit failed because the group rebalanced; the partitions may be elsewhere now."""


class NoOffsetForPartitionError(KafkaClientError):
    """No committed offset and ``auto.offset.reset`` is ``none``."""


# -- one class per broker error code --------------------------------------------------------------

_BY_CODE: dict[ErrorCode, type[BrokerResponseError]] = {}


class BrokerResponseError(KafkaClientError):
    """A broker answered with a non-zero error code. Subclasses exist for each known code."""

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    default_message: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("code")
        if code is None:
            return
        if "retriable" not in cls.__dict__:
            cls.retriable = code in RETRIABLE
        if "fatal" not in cls.__dict__:
            cls.fatal = code in FATAL
        if "abortable" not in cls.__dict__:
            cls.abortable = not cls.fatal
        _BY_CODE.setdefault(code, cls)

    def __init__(self, message: str = "", *, code: int | None = None) -> None:
        # ``code`` is only passed for codes this client has no class for.
        self.wire_code = int(self.code if code is None else code)
        self.message = message or self.default_message
        name = error_name(self.wire_code)
        super().__init__(f"[{name}] {self.message}" if self.message else name)


class UnknownServerError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(BrokerResponseError):
    """A fetch position outside the log and ``auto.offset.reset`` is ``none`` (Java's
    ``OffsetOutOfRangeException``). ``partitions`` maps each such ``TopicPartition`` to its
    fetch offset; those partitions are not fetched again until the application seeks."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(
        self, message: str = "", *, partitions: Mapping[TopicPartition, int] | None = None
    ) -> None:
        super().__init__(message)
        self.partitions: dict[TopicPartition, int] = dict(partitions or {})


class CorruptMessageError(BrokerResponseError):
    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    default_message = "This server does not host this topic-partition."


class InvalidFetchSizeError(BrokerResponseError):
    code = ErrorCode.INVALID_FETCH_SIZE


class LeaderNotAvailableError(BrokerResponseError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(BrokerResponseError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(BrokerResponseError):
    code = ErrorCode.REQUEST_TIMED_OUT


class BrokerNotAvailableError(BrokerResponseError):
    code = ErrorCode.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(BrokerResponseError):
    code = ErrorCode.REPLICA_NOT_AVAILABLE


class MessageTooLargeError(BrokerResponseError):
    code = ErrorCode.MESSAGE_TOO_LARGE
    default_message = (
        "The request included a message larger than the max message size the server will accept."
    )


class StaleControllerEpochError(BrokerResponseError):
    code = ErrorCode.STALE_CONTROLLER_EPOCH


class OffsetMetadataTooLargeError(BrokerResponseError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class NetworkExceptionError(BrokerResponseError):
    code = ErrorCode.NETWORK_EXCEPTION


class CoordinatorLoadInProgressError(BrokerResponseError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class CoordinatorNotAvailableError(BrokerResponseError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(BrokerResponseError):
    code = ErrorCode.NOT_COORDINATOR


class InvalidTopicError(BrokerResponseError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(BrokerResponseError):
    code = ErrorCode.RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(BrokerResponseError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class InvalidRequiredAcksError(BrokerResponseError):
    code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGenerationError(BrokerResponseError):
    code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(BrokerResponseError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(BrokerResponseError):
    code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(BrokerResponseError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(BrokerResponseError):
    code = ErrorCode.REBALANCE_IN_PROGRESS


class InvalidCommitOffsetSizeError(BrokerResponseError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE


class TopicAuthorizationFailedError(BrokerResponseError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(BrokerResponseError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(BrokerResponseError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class InvalidTimestampError(BrokerResponseError):
    code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedSaslMechanismError(BrokerResponseError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(BrokerResponseError):
    code = ErrorCode.ILLEGAL_SASL_STATE


class UnsupportedVersionError(BrokerResponseError):
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(BrokerResponseError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(BrokerResponseError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(BrokerResponseError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(BrokerResponseError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(BrokerResponseError):
    code = ErrorCode.INVALID_CONFIG


class NotControllerError(BrokerResponseError):
    code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(BrokerResponseError):
    code = ErrorCode.INVALID_REQUEST


class UnsupportedForMessageFormatError(BrokerResponseError):
    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class PolicyViolationError(BrokerResponseError):
    code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceNumberError(BrokerResponseError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    default_message = "The broker received an out of order sequence number."


OutOfOrderSequenceError = OutOfOrderSequenceNumberError  # Java's OutOfOrderSequenceException


class DuplicateSequenceNumberError(BrokerResponseError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class ProducerFencedError(BrokerResponseError):
    """Another producer with the same transactional.id (a newer epoch) exists, or the
    transaction timed out and the coordinator bumped the epoch."""

    code = ErrorCode.PRODUCER_FENCED
    default_message = (
        "Producer attempted an operation with an old epoch. Either there is a newer producer with "
        "the same transactionalId, or the producer's transaction has been expired by the broker."
    )


class InvalidProducerEpochError(ProducerFencedError):
    """Code 47: what brokers send for a stale epoch on the pinned (old) versions; a fencing."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(BrokerResponseError):
    code = ErrorCode.INVALID_TXN_STATE
    default_message = "The producer attempted a transactional operation in an invalid state."


class InvalidProducerIdMappingError(BrokerResponseError):
    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(BrokerResponseError):
    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT
    default_message = (
        "The transaction timeout is larger than the maximum value allowed by the broker "
        "(as configured by transaction.max.timeout.ms)."
    )


class ConcurrentTransactionsError(BrokerResponseError):
    code = ErrorCode.CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(BrokerResponseError):
    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class TransactionalIdAuthorizationFailedError(BrokerResponseError):
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabledError(BrokerResponseError):
    code = ErrorCode.SECURITY_DISABLED


class OperationNotAttemptedError(BrokerResponseError):
    code = ErrorCode.OPERATION_NOT_ATTEMPTED


class KafkaStorageError(BrokerResponseError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class LogDirNotFoundError(BrokerResponseError):
    code = ErrorCode.LOG_DIR_NOT_FOUND


class SaslAuthenticationFailedError(BrokerResponseError):
    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class UnknownProducerIdError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class ReassignmentInProgressError(BrokerResponseError):
    code = ErrorCode.REASSIGNMENT_IN_PROGRESS


class NonEmptyGroupError(BrokerResponseError):
    code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(BrokerResponseError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


class GroupSubscribedToTopicError(BrokerResponseError):
    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


class MismatchedEndpointTypeError(BrokerResponseError):
    code = ErrorCode.MISMATCHED_ENDPOINT_TYPE


class InvalidRecordError(BrokerResponseError):
    code = ErrorCode.INVALID_RECORD


class UnstableOffsetCommitError(BrokerResponseError):
    code = ErrorCode.UNSTABLE_OFFSET_COMMIT


class TransactionalIdNotFoundError(BrokerResponseError):
    code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


class MemberIdRequiredError(BrokerResponseError):
    """JoinGroup v4+: the coordinator gave this member its id (in the response); join again
    with it (KIP-394). The consumer does so itself."""

    code = ErrorCode.MEMBER_ID_REQUIRED


class FencedInstanceIdError(BrokerResponseError):
    """Another member joined with the same ``group.instance.id`` (static membership)."""

    code = ErrorCode.FENCED_INSTANCE_ID


class GroupMaxSizeReachedError(BrokerResponseError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


def _class_name(code: ErrorCode) -> str:
    name = "".join(part.capitalize() for part in code.name.split("_"))
    name = name.removesuffix("Exception") + "Error"
    # A client-side class of the same name exists (TransactionAbortableError).
    return name if name not in globals() else name.removesuffix("Error") + "ResponseError"


def _define_remaining_classes() -> None:
    """One class for every code the classes above do not cover, named after the code
    (``ELECTION_NOT_NEEDED`` -> ``ElectionNotNeededError``), so that every code Kafka defines has
    its name, its retriable flag and a class to catch."""
    for code in ErrorCode:
        if code is ErrorCode.NONE or code in _BY_CODE:
            continue
        name = _class_name(code)
        globals()[name] = type(name, (BrokerResponseError,), {"code": code, "__module__": __name__})


_define_remaining_classes()


def for_code(code: int) -> type[BrokerResponseError]:
    """The exception class for a wire error code (``BrokerResponseError`` for unknown codes)."""
    try:
        return _BY_CODE[ErrorCode(code)]
    except (ValueError, KeyError):
        return BrokerResponseError


def error_for(code: int, message: str | None = None) -> BrokerResponseError:
    """An exception instance for a non-zero wire error code."""
    cls = for_code(code)
    if cls is BrokerResponseError:
        return BrokerResponseError(message or "", code=code)
    return cls(message or "")
