"""pytest fixtures for the reference Kafka (imported into tests/conftest.py, so every test sees them).

- ``kafka_ref``: the checked environment (Java 17+, javac, Maven; jars fetched, test programs
  compiled). Without Java or Maven the test is skipped with the reason, except under CI
  (``CI=true``), where that is a failure.
- ``kafka_one``: a one-node KRaft Kafka for the whole session (a :class:`KafkaCluster`;
  ``.bootstrap`` is its address).
- ``kafka_three``: a three-node KRaft cluster (replication 3, min ISR 2) for the whole session.

Tests that use them are marked with an xdist group so that ``make test``'s workers
(``--dist loadgroup``) run them on one worker and one Kafka serves them all: ``kafka_three``'s
tests (tests/kafka_road, tests/spark/test_on_kafka.py) are ``xdist_group("kafka_three")``, the
others (``kafka_one``, the modules' own clusters, the Java clients against minibroker)
``xdist_group("kafka_ref")``. The two groups run side by side on two workers, and neither
cluster is started twice (a test that needs both would have to be in one group). The group is also
what makes a test a ``reference`` one (``pytest_collection_modifyitems`` below): ``make test``
leaves those out and ``make test-reference`` runs them; CI (.ci/run) runs both. When such a
test fails, the tail of each Kafka node's log is added to its report; the logs stay under the
session's pytest tmp dir.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.kafka_ref.harness import KafkaCluster, programs_classpath, unavailable

# Fewer internal-topic partitions than Kafka's 50: the first group or transaction creates them.
SMALL_INTERNAL_TOPICS = {
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "share.coordinator.state.topic.num.partitions": 1,
}

_clusters: list[KafkaCluster] = []


def _under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def kafka_ref() -> str:
    """Java and Maven checked, Kafka's jars fetched, the test programs compiled: the classpath."""
    reason = unavailable()
    if reason is not None:
        if _under_ci():
            pytest.fail(f"the reference Kafka cannot run under CI: {reason}", pytrace=False)
        pytest.skip(f"reference Kafka unavailable: {reason}")
    return programs_classpath()


def _cluster(tmp_path_factory: pytest.TempPathFactory, nodes: int) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(tmp_path_factory.mktemp(f"kafka{nodes}"), nodes,
                           config=SMALL_INTERNAL_TOPICS)
    cluster.start()
    _clusters.append(cluster)
    try:
        yield cluster
    finally:
        _clusters.remove(cluster)
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_one(kafka_ref: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from _cluster(tmp_path_factory, 1)


@pytest.fixture(scope="session")
def kafka_three(kafka_ref: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    yield from _cluster(tmp_path_factory, 3)


REFERENCE_GROUPS = ("kafka_ref", "kafka_three")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks ``reference`` every test of a reference Kafka's xdist group (one source for the fact
    that a test starts a JVM Kafka, so ``-m reference`` selects exactly the suites above)."""
    for item in items:
        group = item.get_closest_marker("xdist_group")
        if group is not None and group.args and group.args[0] in REFERENCE_GROUPS:
            item.add_marker(pytest.mark.reference)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and _clusters:
        for cluster in _clusters:
            report.sections.append((f"reference Kafka log ({cluster.workdir})", cluster.log_tail()))
