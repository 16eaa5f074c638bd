"""Maximal strings in every string field of every API and version the broker serves (issue 36):
the broker answers or closes that one connection, and never exits."""

from __future__ import annotations

import random

import pytest

from protocol.api_keys import ApiKey
from tests.broker_process import BrokerProcess
from tests.fuzz.maximal import LONGEST, OVER, frames, string_fields, sweep
from tests.raw_client import RawConnection
from tests.secured import secured

_SASL_APIS = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


def test_every_served_version_with_a_string_field_is_covered():
    from protocol.messages._declare import APIS
    from protocol.messages.api_versions import IMPLEMENTED

    with_strings = {(k, v) for k, v in IMPLEMENTED if string_fields(APIS[k].request, v)}
    covered = {(k, v) for k, v, _, _ in frames(random.Random(0))}
    assert covered == {(int(k), v) for k, v in with_strings}
    assert len(covered) > 150


@pytest.mark.slow
def test_maximal_strings_never_end_the_broker(tmp_path):
    properties = "\n".join(secured("listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                                   "allow.everyone.if.no.acl.found=true",
                                   "connection.failed.authentication.delay.ms=0")) + "\n"
    with BrokerProcess.configured(tmp_path, properties) as proc:
        def alive() -> bool:
            return proc.proc is not None and proc.proc.poll() is None

        sizes = (LONGEST, *OVER)
        report = sweep(proc.port, alive, frames(random.Random(1), sizes), timeout=2.0)
        line = proc.wait_for_output("(SASL_PLAINTEXT) on")
        sasl_port = int(line.split(" on 127.0.0.1:")[1].split()[0])
        sasl = [item for item in frames(random.Random(2), sizes) if item[0] in _SASL_APIS]
        report = sweep(sasl_port, alive, iter(sasl), report, timeout=2.0)
        print(report)
        assert report.exits == 0 and report.slow == 0 and alive(), "".join(proc.output[-40:])
        assert report.requests > 500 and report.answered > report.requests // 2, report
        with RawConnection(proc.port) as conn:  # still serving
            assert conn.request(ApiKey.METADATA, 1, {"topics": []}).brokers
        assert "Traceback" not in "".join(proc.output), "".join(proc.output[-60:])
