"""Makes PySpark register ``format("minibroker")`` by itself: at the first Python data source
lookup of a SparkSession, PySpark imports every top-level ``pyspark_*`` module it finds and
registers its ``DefaultSource``. Nothing else lives here; the connector is ``spark_connector``."""

from spark_connector.source import MinibrokerDataSource as DefaultSource

__all__ = ["DefaultSource"]
