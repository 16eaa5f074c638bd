"""A test-only sink: the connector with a driver that dies in the middle of a micro-batch commit.

Spark's Python workers import this module (the data source class is pickled by reference), so it
imports nothing from pytest.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.datasource import DataSource

from spark_connector.options import check_options, parse_write_options
from spark_connector.source import MinibrokerDataSource
from spark_connector.writer import StreamWriter, TxnCommitMessage, end_transactions


class CrashingStreamWriter(StreamWriter):
    """Once (while ``crash_marker`` does not exist): commit the first open transaction of a
    micro-batch with at least two, then raise, as a driver dying in the middle of the commit."""

    def __init__(self, opts, schema, crash_marker: str) -> None:
        super().__init__(opts, schema)
        self.crash_marker = crash_marker

    def commit(self, messages, batchId):
        marker = Path(self.crash_marker)
        open_ones = [m for m in messages if isinstance(m, TxnCommitMessage) and m.handle is not None]
        if len(open_ones) >= 2 and not marker.exists():
            marker.write_text(str(batchId))
            end_transactions(self.opts, open_ones[:1], commit=True)
            raise RuntimeError(f"simulated crash in the middle of the commit of batch {batchId}")
        super().commit(messages, batchId)


class CrashingDataSource(MinibrokerDataSource):
    """``format("minibroker-crashing")``: the connector with ``CrashingStreamWriter`` as its sink
    (option ``crashMarker``: the file that records that the crash happened)."""

    def __init__(self, options) -> None:
        # The connector's own definition-time check, without the test-only option.
        DataSource.__init__(self, options)
        check_options({k: v for k, v in options.items() if k.lower() != "crashmarker"})

    @classmethod
    def name(cls) -> str:
        return "minibroker-crashing"

    def streamWriter(self, schema, overwrite):
        options = {k: v for k, v in self.options.items() if k.lower() != "crashmarker"}
        return CrashingStreamWriter(parse_write_options(options), schema, self.options["crashMarker"])
