"""Admin calls on producers and transactions: DescribeProducers per partition leader,
ListTransactions on every broker, DescribeTransactions at the transactional id's coordinator (admin
APIs of later Kafka versions, KIP-664; a broker that does not list them in ApiVersions answers
``UnsupportedVersionError`` here), hanging transactions, and ending a handed-over transaction.

``end_transaction(handle, commit)`` finishes a transaction that a producer left open with
``transaction_handle()`` (the Spark sink's pattern). EndTxn carries (transactional_id, producer_id,
producer_epoch), so any client may send it. Tolerance rules, as a Kafka coordinator applies them:

- EndTxn for a transaction that already ended *the same way* succeeds again (a retried commit);
- ending it the other way (abort after commit, or commit after abort) is ``InvalidTxnStateError``;
- if the transactional id was taken over (a newer ``init_transactions``) or the coordinator
  aborted the transaction at its timeout, the epoch is stale: ``ProducerFencedError``. The
  transaction was aborted then, so for ``commit=False`` this outcome is what was asked for, and
  ``end_transaction`` returns normally;
- a handle with ``empty=True`` names a transaction that never reached the coordinator: nothing
  to do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from client.aio.admin.topics import TopicsAdmin
from client.aio.cluster import TRANSACTION, is_coordinator_error
from client.errors import (
    CoordinatorLoadInProgressError,
    KafkaClientError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
    UnsupportedVersionError,
    error_for,
)
from client.retry import retry
from client.structs import (
    HangingTransaction,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionHandle,
    TransactionListing,
)
from protocol.api_keys import ApiKey

# The states in which a coordinator still ends a transaction itself (markers to write or to come).
IN_PROGRESS = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def runs(description: TransactionDescription, partition: TopicPartition,
         state: ProducerState) -> bool:
    """Whether the coordinator's ``description`` still runs the transaction ``state`` has open on
    ``partition``: in progress, the same producer id, an epoch no older (transaction version 2
    bumps it at EndTxn, before the markers), and the partition in it."""
    return (description.state in IN_PROGRESS and description.producer_id == state.producer_id
            and description.producer_epoch >= state.producer_epoch
            and partition in description.partitions)


def _raise_unless_loading(exc: KafkaClientError) -> None:
    if not isinstance(exc, CoordinatorLoadInProgressError):
        raise exc


class TransactionsAdmin(TopicsAdmin):
    async def describe_producers(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, list[ProducerState]]:
        """The active (idempotent or transactional) producers of each partition, from its
        leader. Raises the first partition's error."""
        cluster = self._cluster
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            leader = await self._leader(topic, partition)
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        result = {}
        for leader, topics in by_leader.items():
            conn = await cluster.connection(leader)
            response = await conn.request(ApiKey.DESCRIBE_PRODUCERS, {"topics": [
                {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for(p.error_code,
                                        p.error_message or f"{t.name}-{p.partition_index}")
                    result[TopicPartition(t.name, p.partition_index)] = [
                        ProducerState(a.producer_id, a.producer_epoch, a.last_sequence,
                                      a.last_timestamp, a.coordinator_epoch,
                                      a.current_txn_start_offset)
                        for a in p.active_producers
                    ]
        return result

    # -- transactions ----------------------------------------------------------------------------

    async def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int | None = None,
    ) -> list[TransactionListing]:
        """Transactional ids known to the coordinators, optionally filtered by state name
        (``Ongoing`` ...), producer id, or (``duration_ms``) only transactions running longer
        than that (ListTransactions v1; refused by a broker that only has v0)."""
        cluster = self._cluster
        await cluster.refresh_metadata([])
        result: dict[str, TransactionListing] = {}
        request = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                   "duration_filter": -1 if duration_ms is None else duration_ms}
        for node in sorted(cluster.brokers):

            async def attempt(node: int = node) -> Any:
                conn = await cluster.connection(node)
                if duration_ms is not None and conn.version(ApiKey.LIST_TRANSACTIONS) < 1:
                    raise UnsupportedVersionError(
                        f"broker {node} cannot filter transactions by duration "
                        "(ListTransactions v0)"
                    )
                response = await conn.request(ApiKey.LIST_TRANSACTIONS, request)
                if response.error_code:
                    raise error_for(response.error_code, f"ListTransactions on broker {node}")
                return response

            # A broker whose transaction coordinator is still loading its log (just started, or
            # just took over partitions of __transaction_state) answers
            # COORDINATOR_LOAD_IN_PROGRESS: retried after the backoff, as Kafka's admin client
            # does (ListTransactionsHandler). Anything else is raised at once, a broker that
            # cannot be reached included: the caller decides whether to ask again.
            response = await retry(attempt, backoff=cluster.backoff, timeout=self._timeout,
                                   what=f"ListTransactions on broker {node}",
                                   on_error=_raise_unless_loading)
            for t in response.transaction_states:
                result[t.transactional_id] = TransactionListing(
                    t.transactional_id, t.producer_id, t.transaction_state
                )
        return sorted(result.values())

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> list[TransactionDescription]:
        """State, producer id/epoch, timeout and partitions of each transactional id."""
        result = []
        for transactional_id in transactional_ids:

            async def attempt(transactional_id: str = transactional_id) -> Any:
                response = await self._cluster.coordinator_request(
                    TRANSACTION,
                    transactional_id,
                    ApiKey.DESCRIBE_TRANSACTIONS,
                    {"transactional_ids": [transactional_id]},
                )
                (state,) = response.transaction_states
                if state.error_code:
                    exc = self._cluster.coordinator_error(
                        TRANSACTION,
                        transactional_id,
                        state.error_code,
                        f"transactional id {transactional_id}",
                    )
                    raise exc
                return state

            state = await retry(
                attempt,
                backoff=self._cluster.backoff,
                timeout=self._timeout,
                what="DescribeTransactions",
            )
            result.append(
                TransactionDescription(
                    state.transactional_id,
                    state.transaction_state,
                    state.producer_id,
                    state.producer_epoch,
                    state.transaction_timeout_ms,
                    state.transaction_start_time_ms,
                    tuple(
                        TopicPartition(t.topic, p)
                        for t in state.topics
                        for p in sorted(t.partitions)
                    ),
                )
            )
        return result

    async def find_hanging_transactions(
        self,
        topics: Iterable[str] | None = None,
        max_transaction_timeout_ms: int = 900_000,
    ) -> list[HangingTransaction]:
        """Open transactions on partitions of ``topics`` (all topics when None) that hold the LSO
        back with no coordinator to end them, as Kafka's ``kafka-transactions.sh find-hanging``
        decides: the partition's producer last wrote longer than ``max_transaction_timeout_ms``
        ago (DescribeProducers), and no coordinator runs that transaction on that partition: its
        producer id has no transactional id (ListTransactions), or that id's transaction
        (DescribeTransactions) is not in progress, is another producer's or an older epoch's, or
        does not have the partition. A transaction its coordinator still runs is never listed,
        however old: the coordinator aborts it at its timeout."""
        names = await self.list_topics() if topics is None else list(topics)
        partitions = [
            (d.name, p.partition) for d in await self.describe_topics(names) for p in d.partitions
        ]
        now = self.clock.now_ns() // 1_000_000
        candidates = [
            (tp, state)
            for tp, states in (await self.describe_producers(partitions)).items()
            for state in states
            if state.current_txn_start_offset >= 0
            and now - state.last_timestamp > max_transaction_timeout_ms
        ]
        if not candidates:
            return []
        listings = await self.list_transactions(
            producer_ids=sorted({s.producer_id for _, s in candidates})
        )
        by_producer = {t.producer_id: t.transactional_id for t in listings}
        descriptions: dict[str, TransactionDescription] = {}
        for listed in sorted(set(by_producer.values())):
            try:
                (descriptions[listed],) = await self.describe_transactions([listed])
            except TransactionalIdNotFoundError:
                pass  # expired since it was listed: nobody runs it
        hanging = []
        for tp, state in candidates:
            transactional_id = by_producer.get(state.producer_id)
            description = descriptions.get(transactional_id) if transactional_id else None
            if description is not None and runs(description, tp, state):
                continue
            hanging.append(HangingTransaction(
                tp, state.producer_id, state.producer_epoch, state.coordinator_epoch,
                state.current_txn_start_offset, transactional_id, now - state.last_timestamp,
            ))
        return hanging

    async def abort_transaction(
        self, partition: tuple[str, int], producer_id: int, producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        """Abort a hanging transaction on one partition (Kafka's ``Admin.abortTransaction``): an
        ABORT marker through WriteTxnMarkers to the partition's leader, with the producer id and
        epoch ``describe_producers`` or ``find_hanging_transactions`` reported. The broker
        refuses it for a transaction its coordinator still runs (TRANSACTION_COORDINATOR_FENCED
        while Ongoing, CLUSTER_AUTHORIZATION_FAILED for any other marker it did not expect): end
        those through their transactional id."""
        topic, index = partition
        conn = await self._cluster.connection(await self._leader(topic, index))
        response = await conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "transaction_result": False, "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": topic, "partition_indexes": [index]}],
        }]})
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for(p.error_code, f"abort of producer {producer_id} "
                                                      f"on {t.name}-{p.partition_index}")

    async def end_transaction(
        self, handle: TransactionHandle, commit: bool, timeout: float | None = None
    ) -> None:
        """Commit or abort a transaction handed over by ``transaction_handle()`` (see the module
        docstring for what is tolerated)."""
        if handle.empty:
            return
        cluster = self._cluster
        transactional_id = handle.transactional_id

        async def attempt() -> None:
            node = await cluster.coordinator(TRANSACTION, transactional_id)
            conn = await cluster.connection(node)
            # Transaction version 2 when the coordinator finalizes it: EndTxn v5 bumps the
            # epoch, so a late copy of this request can never end a later transaction.
            tv2 = await conn.finalized_feature("transaction.version") >= 2
            response = await cluster.coordinator_request(
                TRANSACTION,
                transactional_id,
                ApiKey.END_TXN,
                {
                    "transactional_id": transactional_id,
                    "producer_id": handle.producer_id,
                    "producer_epoch": handle.producer_epoch,
                    "committed": commit,
                },
                max_version=5 if tv2 else 4,
            )
            if response.error_code:
                raise error_for(response.error_code, f"EndTxn {transactional_id}")

        def on_error(exc: KafkaClientError) -> None:
            if is_coordinator_error(exc):
                cluster.forget_coordinator(TRANSACTION, transactional_id)

        try:
            await retry(
                attempt,
                backoff=cluster.backoff,
                timeout=60.0 if timeout is None else timeout,
                what=f"EndTxn for {transactional_id}",
                on_error=on_error,
            )
        except ProducerFencedError:
            if not commit:
                return  # fenced means aborted: what was asked for
            raise
