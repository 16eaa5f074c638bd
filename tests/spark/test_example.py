"""The example pipeline's demo input is safe to produce again (rerunning the documented command
after a crash must not double the input)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.spark.helpers import consume_all

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "streaming_pipeline.py"


def load_example():
    spec = importlib.util.spec_from_file_location("streaming_pipeline", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_input_is_produced_once_however_often_the_command_runs(bootstrap, name):
    example = load_example()
    source, sink = name + "-orders", name + "-large"
    example.produce_demo_orders(bootstrap, source, sink, 500)
    example.produce_demo_orders(bootstrap, source, sink, 500)  # the rerun after a crash
    orders = consume_all(bootstrap, source)
    assert len(orders) == 500  # once, and the aborted ghost order never visible
    assert b"ghost" not in b"".join(r.value for r in orders)



def test_a_source_topic_of_other_records_is_refused_in_one_line(bootstrap, name):
    """The README tour's `orders` holds `alice:10` lines: the example says so instead of
    writing nothing (issue 27 item 4)."""
    import click
    import pytest

    from client import Admin, Producer

    example = load_example()
    source = name + "-tour"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(source, 1)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        producer.send(source, b"10", key=b"alice")
    with pytest.raises(click.ClickException, match="not JSON orders"):
        example.produce_demo_orders(bootstrap, source, name + "-sink", 10)
    assert example.main.params[1].default == "order-events"  # not the tour's topic
