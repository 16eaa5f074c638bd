"""The reference Apache Kafka 4.4 for tests and benchmarks: see ``tests/kafka_ref/harness.py``
(jars, KRaft clusters, tools), ``fixtures.py`` (pytest fixtures) and ``python -m tests.kafka_ref``."""
