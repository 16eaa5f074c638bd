"""The producer's transactional calls (the network side of Kafka's ``TransactionManager``):
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, driven by the
state table of ``client/transaction_manager.py``.

Theory of operation
-------------------
``init_transactions`` gets the producer id and epoch for ``transactional.id`` from its coordinator
(fencing older producers with the same id) and decides the transaction version: 2 (KIP-890) when
the coordinator finalizes ``transaction.version`` >= 2 and speaks EndTxn v5 and Produce v12.

A partition's first record in a transaction queues it in the state (``add_partition``); the sender
calls ``add_pending_partitions`` when some are queued, which starts one task sending
AddPartitionsToTxn until none is left; the sender drains a partition only once it is added. (In
transaction version 2 partitions join with their first Produce and nothing is queued.)

``commit_transaction`` flushes, then sends EndTxn(commit); ``abort_transaction`` fails the batches
never sent, waits for the others, then sends EndTxn(abort). EndTxn is skipped for a transaction
that added nothing. Afterwards, if the sender found the broker's sequence state unknown (a batch
given up after it was sent, UNKNOWN_PRODUCER_ID) or an EndTxn v1 timed out once (its late copy
could end the next transaction: KAFKA-17754), the epoch is bumped with InitProducerId carrying the
current id and epoch (KIP-360) before the next transaction. EndTxn v5 bumps the epoch itself.

``transaction_handle`` flushes and hands the open transaction to another process
(``AsyncAdmin.end_transaction``).

Errors: a failed coordinator call makes the transaction abortable, or the producer fatal
(``TransactionManager.classify``). Retriable errors are retried until ``max.block.ms``
(``client/retry.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any, Protocol, TypeVar

import trio

from client.aio._tasks import EngineTasks
from client.aio.cluster import GROUP, TRANSACTION, Cluster
from client.config import ClientConfig
from client.errors import (
    InvalidTxnStateError,
    KafkaClientError,
    KafkaTimeoutError,
    TransactionAbortableError,
    error_for,
    for_code,
)
from client.retry import retry
from client.structs import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    TransactionHandle,
    offset_and_metadata,
)
from client.transaction_manager import TransactionManager, TxnState
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

log = logging.getLogger("client.producer")

T = TypeVar("T")


class BatchSender(Protocol):
    """What the transactional calls need of the sender (``client/aio/sender.py``)."""

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait until each batch is acknowledged or failed."""

    def abort_unsent(self) -> None:
        """Fail the batches never sent; those sent stay in flight."""

    def producer_changed(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: every partition's sequence restarts at 0."""

    def wake(self) -> None:
        """Look at the buffer now (a partition may have been added)."""


class Transactions:
    """The transactional calls of one producer (see the module docstring)."""

    def __init__(
        self,
        config: ClientConfig,
        cluster: Cluster,
        transaction_manager: TransactionManager,
        sender: BatchSender,
        tasks: EngineTasks,
    ) -> None:
        self._cluster = cluster
        self._tm = transaction_manager
        self._sender = sender
        self._tasks = tasks  # where the AddPartitionsToTxn task runs
        self._transaction_timeout_ms: int = config["transaction.timeout.ms"]
        self._max_block: float = config["max.block.ms"] / 1000
        self._adding_partitions: trio.Event | None = None  # set when the add task finishes

    @property
    def _transactional_id(self) -> str:
        return self._tm.require_transactional()

    async def _coordinator_call(self, attempt: Callable[[], Awaitable[T]], what: str) -> T:
        """A coordinator call, retried until max.block.ms."""
        return await retry(
            attempt, backoff=self._cluster.backoff, timeout=self._max_block, what=what
        )

    async def _coordinator_request(
        self, api_key: ApiKey, body: dict[str, Any], max_version: int | None = None
    ) -> Any:
        return await self._cluster.coordinator_request(
            TRANSACTION, self._transactional_id, api_key, body, max_version=max_version
        )

    # -- the producer id ---------------------------------------------------------------------------

    async def init_transactions(self) -> None:
        """Get the producer id and epoch for ``transactional.id``: fences older producers with the
        same id and makes the coordinator finish (abort) their open transaction."""
        self._tm.begin_init()
        await self._init_producer_id(bump=False)
        self._tm.tv2 = await self._coordinator_speaks_tv2()

    async def _init_producer_id(self, bump: bool) -> None:
        tm = self._tm
        transactional_id = self._transactional_id

        async def attempt() -> Any:
            response = await self._coordinator_request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": transactional_id,
                    "transaction_timeout_ms": self._transaction_timeout_ms,
                    "producer_id": tm.producer_id if bump else -1,
                    "producer_epoch": tm.producer_epoch if bump else -1,
                },
            )
            if response.error_code:
                raise error_for(response.error_code, f"InitProducerId for {transactional_id}")
            return response

        try:
            response = await self._coordinator_call(attempt, "InitProducerId")
        except KafkaClientError as exc:
            if not exc.retriable:
                tm.fatal_error(exc)
            raise
        tm.init_done(response.producer_id, response.producer_epoch)
        self._sender.producer_changed(response.producer_id, response.producer_epoch)

    async def _coordinator_speaks_tv2(self) -> bool:
        """Transaction version 2 when the coordinator finalizes ``transaction.version`` >= 2 and
        speaks EndTxn v5 and Produce v12 (as the Java client decides); version 1 otherwise."""
        try:
            node = await self._cluster.coordinator(TRANSACTION, self._transactional_id)
            conn = await self._cluster.connection(node)
            level = await conn.finalized_feature("transaction.version")
        except KafkaClientError as exc:
            log.debug("transaction version unknown (%s): using version 1", exc)
            return False
        return (level >= 2 and conn.supports_version(ApiKey.END_TXN, 5)
                and conn.supports_version(ApiKey.PRODUCE, 12))

    # -- within a transaction ----------------------------------------------------------------------

    def begin_transaction(self) -> None:
        """Start a transaction (local: the coordinator learns of it with the first partition)."""
        with self._tm.lock:
            self._tm.begin_transaction()

    def add_pending_partitions(self) -> None:
        """Start the AddPartitionsToTxn task for the partitions waiting (the sender calls this
        when some are; one task at a time)."""
        if self._tm.pending_partitions and self._adding_partitions is None:
            self._adding_partitions = trio.Event()
            self._tasks.start_soon(self._add_partitions_to_txn)

    async def _add_partitions_to_txn(self) -> None:
        tm = self._tm
        try:
            while tm.pending_partitions and tm.state in (
                TxnState.IN_TRANSACTION,
                TxnState.COMMITTING_TRANSACTION,
                TxnState.ABORTING_TRANSACTION,
            ):
                with tm.lock:
                    pending = sorted(tm.pending_partitions)
                topics: dict[str, list[int]] = {}
                for tp in pending:
                    topics.setdefault(tp.topic, []).append(tp.partition)
                try:
                    await self._coordinator_call(
                        partial(self._add_partitions, topics), "AddPartitionsToTxn"
                    )
                except KafkaClientError as exc:
                    with tm.lock:
                        tm.classify(exc)
                    self._sender.wake()
                    return
                with tm.lock:
                    tm.partitions_added(pending)
                self._sender.wake()
        finally:
            done, self._adding_partitions = self._adding_partitions, None
            if done is not None:
                done.set()

    async def _add_partitions(self, topics: dict[str, list[int]]) -> None:
        tm = self._tm
        response = await self._coordinator_request(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {
                "transactional_id": self._transactional_id,
                "producer_id": tm.producer_id,
                "producer_epoch": tm.producer_epoch,
                "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
            },
        )
        worst = worst_error(p.error_code for r in response.results for p in r.results)
        if worst:
            raise self._cluster.coordinator_error(
                TRANSACTION, self._transactional_id, worst, "AddPartitionsToTxn")

    async def _wait_for_added_partitions(self) -> None:
        while self._adding_partitions is not None:
            await self._adding_partitions.wait()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata],
        group: str | ConsumerGroupMetadata,
    ) -> None:
        """Commit consumer offsets as part of the transaction (AddOffsetsToTxn once per group,
        then TxnOffsetCommit to the group coordinator). Offsets are "next record to read"."""
        tm = self._tm
        transactional_id = tm.require_transactional()
        group_id = group if isinstance(group, str) else group.group_id
        if tm.add_group(group_id):

            async def add_offsets() -> None:
                response = await self._coordinator_request(
                    ApiKey.ADD_OFFSETS_TO_TXN,
                    {
                        "transactional_id": transactional_id,
                        "producer_id": tm.producer_id,
                        "producer_epoch": tm.producer_epoch,
                        "group_id": group_id,
                    },
                )
                if response.error_code:
                    raise error_for(response.error_code, "AddOffsetsToTxn")

            await self._txn_call(add_offsets, "AddOffsetsToTxn")
            tm.group_added(group_id)

        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), value in offsets.items():
            offset, metadata = offset_and_metadata(value)
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_metadata": metadata,
                }
            )

        async def commit_offsets() -> None:
            response = await self._cluster.coordinator_request(
                GROUP,
                group_id,
                ApiKey.TXN_OFFSET_COMMIT,
                {
                    "transactional_id": transactional_id,
                    "group_id": group_id,
                    "producer_id": tm.producer_id,
                    "producer_epoch": tm.producer_epoch,
                    "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
                },
            )
            worst = worst_error(p.error_code for t in response.topics for p in t.partitions)
            if worst:
                raise self._cluster.coordinator_error(GROUP, group_id, worst, "TxnOffsetCommit")

        await self._txn_call(commit_offsets, "TxnOffsetCommit")

    async def _txn_call(self, attempt: Callable[[], Awaitable[None]], what: str) -> None:
        """A coordinator call inside a transaction: errors make it abortable or fatal."""
        try:
            await self._coordinator_call(attempt, what)
        except KafkaClientError as exc:
            with self._tm.lock:
                self._tm.classify(exc)
            if self._tm.state is TxnState.ABORTABLE_ERROR:
                raise TransactionAbortableError(f"{what} failed: {exc}") from exc
            raise

    # -- ending it ---------------------------------------------------------------------------------

    async def _flush_transaction(self, what: str) -> None:
        """Wait until every record of the transaction is answered and every partition added;
        raises if the transaction can no longer commit."""
        tm = self._tm
        await self._wait_for_added_partitions()
        await self._sender.flush()
        await self._wait_for_added_partitions()
        if tm.state is TxnState.ABORTABLE_ERROR:
            raise TransactionAbortableError(what) from tm.last_error
        tm.raise_if_fatal()

    async def commit_transaction(self) -> None:
        """Flush, then commit: every record of the transaction becomes visible atomically."""
        with self._tm.lock:
            self._tm.begin_commit()
        await self._flush_transaction(
            "Cannot commit transaction since a previous operation failed; abort it."
        )
        await self._end_transaction(commit=True)

    async def abort_transaction(self) -> None:
        """Abort: records never sent are dropped, sent ones wait for their answer, then the
        coordinator writes ABORT markers. Records of the transaction stay invisible to
        read_committed consumers."""
        tm = self._tm
        with tm.lock:
            tm.begin_abort()
        self._sender.abort_unsent()
        await self._wait_for_added_partitions()
        await self._sender.flush()
        tm.raise_if_fatal()
        await self._end_transaction(commit=False)

    async def _end_transaction(self, commit: bool) -> None:
        """EndTxn (unless the transaction added nothing), then the epoch bump if one is due."""
        tm = self._tm
        if not tm.is_empty_transaction:
            await self._end_txn(commit)
        if tm.needs_epoch_bump:
            with tm.lock:
                tm.begin_epoch_bump()
            await self._init_producer_id(bump=True)
        else:
            with tm.lock:
                tm.transaction_completed()

    async def _end_txn(self, commit: bool) -> None:
        """EndTxn, retried until it is answered. Version 2 (v5): the answer carries the producer
        id and epoch of the next transaction; every sequence restarts at 0. Version 1: when an
        attempt timed out, the request may still arrive late and would act on the next
        transaction (same producer id and epoch: KAFKA-17754), so the epoch is bumped
        (InitProducerId, KIP-360) before the next transaction, which fences it - Jepsen's
        mitigation, built in."""
        tm = self._tm
        tv2 = tm.tv2
        timed_out = False

        async def attempt() -> Any:
            nonlocal timed_out
            try:
                response = await self._coordinator_request(
                    ApiKey.END_TXN,
                    {
                        "transactional_id": self._transactional_id,
                        "producer_id": tm.producer_id,
                        "producer_epoch": tm.producer_epoch,
                        "committed": commit,
                    },
                    max_version=5 if tv2 else 4,
                )
            except KafkaTimeoutError:
                timed_out = True
                raise
            if response.error_code:
                raise error_for(response.error_code, "EndTxn")
            return response

        try:
            response = await self._coordinator_call(attempt, "EndTxn")
        except KafkaClientError as exc:
            if exc.retriable:
                raise  # timed out: the call may be repeated
            with tm.lock:
                if exc.fatal or isinstance(exc, InvalidTxnStateError):
                    tm.fatal_error(exc)
                else:
                    tm.abortable_error(exc)
            raise
        if tv2 and response.producer_id >= 0:
            with tm.lock:
                tm.epoch_bumped(response.producer_id, response.producer_epoch)
            self._sender.producer_changed(response.producer_id, response.producer_epoch)
        elif timed_out:
            tm.needs_epoch_bump = True

    async def transaction_handle(self) -> TransactionHandle:
        """Flush and hand the open transaction over: the returned handle lets another process
        commit or abort it (``AsyncAdmin.end_transaction``). This producer can then only be
        closed; the transaction stays open until ended or until ``transaction.timeout.ms``."""
        tm = self._tm
        transactional_id = tm.require_transactional()
        if tm.state is not TxnState.IN_TRANSACTION:
            tm.check_send()  # raises the reason
        await self._flush_transaction("the transaction cannot commit; abort it")
        with tm.lock:
            handle = TransactionHandle(
                transactional_id, tm.producer_id, tm.producer_epoch, tm.is_empty_transaction
            )
            tm.handoff()
        return handle


def worst_error(codes: Iterable[int]) -> int:
    """The most severe error code: fatal, then abortable, then retriable ones; NONE and
    OPERATION_NOT_ATTEMPTED (another partition failed) count for nothing."""
    worst = 0
    rank = -1
    for code in codes:
        if code in (ErrorCode.NONE, ErrorCode.OPERATION_NOT_ATTEMPTED):
            continue
        cls = for_code(code)
        r = 3 if cls.fatal else (1 if cls.retriable else 2)
        if r > rank:
            worst, rank = code, r
    return worst

