"""Spark connector for minibroker: ``format("minibroker")`` through PySpark's Python Data Source
API (PySpark 4.2+, pyarrow).

    import spark_connector
    spark_connector.register(spark)
    df = (spark.read.format("minibroker")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())

Installed as a package, the ``pyspark_minibroker`` module registers the format by itself in every
SparkSession (PySpark looks up top-level ``pyspark_*`` modules defining ``DefaultSource``).
README.md in this directory documents the options, the row schema and the delivery guarantees.

Importing this package does not import pyspark (``options`` and ``planning`` are plain Python);
``MinibrokerDataSource`` and ``DataLossError`` load it on first use.
"""

from __future__ import annotations

from typing import Any

from spark_connector.options import FORMAT, OptionError
from spark_connector.planning import offsets_behind_latest

__all__ = [
    "FORMAT",
    "DataLossError",
    "MinibrokerDataSource",
    "OptionError",
    "offsets_behind_latest",
    "register",
]


def register(spark: Any) -> None:
    """Register ``format("minibroker")`` with ``spark`` (a SparkSession; lasts for its life)."""
    from spark_connector.source import MinibrokerDataSource

    spark.dataSource.register(MinibrokerDataSource)


def __getattr__(name: str) -> Any:
    if name == "MinibrokerDataSource":
        from spark_connector.source import MinibrokerDataSource

        return MinibrokerDataSource
    if name == "DataLossError":
        from spark_connector.reader import DataLossError

        return DataLossError
    raise AttributeError(f"module 'spark_connector' has no attribute {name!r}")
