"""The Spark suite: one SparkSession (local[2]) and one broker subprocess for the whole session.

Everything here is marked ``spark`` (select with ``-m spark``, leave out with ``-m "not spark"``).
Spark needs Java and the ``pyspark`` and ``pyarrow`` packages; without them the tests that need a
session are skipped, saying why (under CI, `CI=true`, they fail).

Settings Spark must see before its JVM starts (docs/spark.md): workers run this interpreter
(``PYSPARK_PYTHON``; the system python lacks pyarrow), bind loopback only (``SPARK_LOCAL_IP``),
and can import ``tests.spark.*`` helpers (the repository root on ``PYTHONPATH``).
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from tests import needs
from tests.broker_process import BrokerProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# Broker settings for the suite: short timed-out-transaction checks, so that a test which leaves
# a transaction to its timeout does not wait 10 s for the sweep.
BROKER_PROPERTIES = """\
num.partitions=2
transaction.abort.timed.out.transaction.cleanup.interval.ms=500
group.initial.rebalance.delay.ms=0
"""


def pytest_configure(config):
    # Also in pyproject's markers list; registered here too so the suite works on its own.
    config.addinivalue_line("markers", "spark: needs a SparkSession (PySpark, pyarrow, Java)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


def _missing_requirement() -> str | None:
    for module in ("pyspark", "pyarrow"):
        try:
            __import__(module)
        except ImportError:
            return f"the Spark suite needs the Python package {module} (pip install 'pyspark>=4.2' pyarrow)"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "the Spark suite needs Java (java on PATH or JAVA_HOME)"
    return None


class SparkSessions:
    """Hands out the one SparkSession, started with the master a test needs. ``local[2]`` never
    retries a task; ``local[2,3]`` gives each task 3 attempts. Switching stops the session and
    starts another (about 0.2 s: the JVM stays up)."""

    def __init__(self) -> None:
        self.session = None
        self.master: str | None = None

    def get(self, master: str):
        if self.session is not None and self.master == master:
            return self.session
        from pyspark.sql import SparkSession

        import spark_connector

        if self.session is not None:
            self.session.stop()
        session = (
            SparkSession.builder.master(master)
            .appName("minibroker-spark-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.sql.streaming.stopTimeout", "30s")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        spark_connector.register(session)
        self.session, self.master = session, master
        return session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None


@pytest.fixture(scope="session")
def spark_sessions():
    reason = _missing_requirement()
    if reason:
        needs.unavailable(reason)  # a failure under CI
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), path) if p)
    sessions = SparkSessions()
    try:
        yield sessions
    finally:
        sessions.stop()


@pytest.fixture
def spark(spark_sessions):
    """The SparkSession on local[2] (no task retries)."""
    return spark_sessions.get("local[2]")


@pytest.fixture
def spark_with_retries(spark_sessions):
    """The SparkSession on local[2,3]: a failed task is retried (up to 3 attempts)."""
    return spark_sessions.get("local[2,3]")


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory):
    """One broker subprocess for the suite; tests keep apart by using their own topic names."""
    base = tmp_path_factory.mktemp("spark-broker")
    with BrokerProcess.configured(base, BROKER_PROPERTIES, "--flush", "never") as proc:
        yield proc


@pytest.fixture
def bootstrap(spark_broker) -> str:
    proc = spark_broker.proc
    if proc is None or proc.poll() is not None:
        pytest.fail("the suite's broker is not running:\n" + "".join(spark_broker.output[-50:]))
    return spark_broker.bootstrap


@pytest.fixture
def name() -> str:
    """A fresh name for this test's topics, queries and transactional ids."""
    return "t" + uuid.uuid4().hex[:10]
