"""The connector over SASL_SSL (issue 14): the client's security settings pass through as
``kafka.*`` options, for a transactional batch write and a batch read."""

from __future__ import annotations

import re

import pytest
import trustme

from client import Admin
from tests.broker_process import BrokerProcess

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    d = tmp_path_factory.mktemp("spark-secure")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    proc = BrokerProcess.configured(d, "\n".join([
        "listeners=SASL_SSL://127.0.0.1:0",
        f"ssl.keystore.location={d / 'server.pem'}",
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
        'PlainLoginModule required user_spark="spark-secret";',
        "num.partitions=2",
    ]) + "\n").start()
    try:
        yield proc, {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                     "kafka.sasl.username": "spark", "kafka.sasl.password": "spark-secret",
                     "kafka.ssl.ca.location": str(d / "ca.pem")}
    finally:
        proc.stop()


def test_transactional_write_and_read_over_sasl_ssl(spark, secure, name):
    proc, options = secure
    client = {k.removeprefix("kafka."): v for k, v in options.items()}
    with Admin({"bootstrap.servers": proc.bootstrap, **client}) as admin:
        admin.create_topic(name, 2)
    df = spark.createDataFrame([(f"v{i}",) for i in range(100)], "value string").repartition(2)
    writer = df.write.format("minibroker").option("bootstrap.servers", proc.bootstrap) \
        .option("topic", name)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()
    reader = spark.read.format("minibroker").option("bootstrap.servers", proc.bootstrap) \
        .option("subscribe", name)
    for key, value in options.items():
        reader = reader.option(key, value)
    back = reader.load().selectExpr("cast(value as string) v").collect()
    assert sorted(r.v for r in back) == sorted(f"v{i}" for i in range(100))
    # Without the credentials the read fails, naming the cause.
    bare = spark.read.format("minibroker").option("bootstrap.servers", proc.bootstrap) \
        .option("subscribe", name).option("kafka.security.protocol", "SASL_SSL") \
        .option("kafka.ssl.ca.location", options["kafka.ssl.ca.location"])
    with pytest.raises(Exception, match=re.escape("needs sasl.username and sasl.password")):
        bare.load().collect()
    assert "spark-secret" not in "".join(proc.output)
