"""The ``DataSource`` that Spark instantiates for ``format("minibroker")``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_connector.options import (
    FORMAT,
    OptionError,
    ReadOptions,
    check_options,
    parse_read_options,
    parse_write_options,
)
from spark_connector.reader import BatchReader, StreamReader
from spark_connector.writer import BatchWriter, StreamWriter

HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)
# Spark's Kafka source schema (its column names and types).
BASE_FIELDS = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
)
_KNOWN = {f.name: f.dataType for f in (*BASE_FIELDS, HEADERS_FIELD)}


def read_schema(include_headers: bool) -> StructType:
    return StructType([*BASE_FIELDS, HEADERS_FIELD] if include_headers else list(BASE_FIELDS))


def check_read_schema(schema: StructType) -> None:
    """A schema given with ``.schema(...)`` may pick and order the source's columns; it cannot
    invent new ones or change their types."""
    for f in schema.fields:
        known = _KNOWN.get(f.name)
        if known is None:
            raise OptionError(
                f"column {f.name!r} of the given schema is not one of the source's columns {list(_KNOWN)}"
            )
        if known.simpleString() != f.dataType.simpleString():
            raise OptionError(
                f"column {f.name!r} of the given schema must be {known.simpleString()}, "
                f"not {f.dataType.simpleString()}"
            )


class MinibrokerDataSource(DataSource):
    """Read from and write to minibroker (or any broker speaking the same Kafka protocol subset)
    with Spark; options as Spark's Kafka source and sink (``spark_connector/options.py``)."""

    def __init__(self, options: dict[str, str]) -> None:
        # Spark builds the data source when a query is defined: in load() (unless the user
        # gives .schema(...)), readStream...load() and save(). It does not yet say whether it
        # reads or writes, so the options must make sense for at least one of the three uses;
        # reader() / streamReader() / writer() check them again for their own direction.
        super().__init__(options)
        try:
            check_options(self.options)
        except OptionError as exc:
            raise short(exc) from None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        value = self.options.get("includeHeaders", "false")
        if value.strip().lower() not in ("true", "false"):
            raise OptionError(f"option 'includeHeaders' must be true or false, not {value!r}")
        return read_schema(value.strip().lower() == "true")

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(self._read_options(schema, streaming=False), schema)

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(self._read_options(schema, streaming=True), schema)

    def _read_options(self, schema: StructType, streaming: bool) -> ReadOptions:
        """The checked read options (a bad schema or option: one short line, not a trace)."""
        try:
            check_read_schema(schema)
            return parse_read_options(self.options, streaming=streaming)
        except OptionError as exc:
            raise short(exc) from None

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        # As Spark's Kafka sink: "overwrite" appends too (a topic cannot be truncated).
        try:
            options = parse_write_options(self.options)
        except OptionError as exc:
            raise short(exc) from None
        return BatchWriter(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        try:
            options = parse_write_options(self.options)
        except OptionError as exc:
            raise short(exc) from None
        return StreamWriter(options, schema)


def short(exc: OptionError) -> OptionError:
    """``exc`` without the frames of the option parsing: Spark puts the Python traceback into
    its error message, and for a wrong option the message is all there is to say. (Spark's
    spark.sql.execution.pyspark.udf.hideTraceback.enabled=true leaves only that line.)"""
    return exc.with_traceback(None)
