"""The per-connection bound on refusal lines (broker.handlers.authz.RefusalLog)."""

from __future__ import annotations

import logging

from broker.handlers.authz import REFUSAL_LINES_PER_SECOND, RefusalLog
from broker.security.acl import Operation, ResourceType


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "minibroker.security"]


def refuse(refusals: RefusalLog, n: int, now: float) -> None:
    for i in range(n):
        refusals.refused(Operation.READ, ResourceType.TOPIC, f"t{i}", now)


def test_a_bounded_number_of_lines_a_second_then_the_count(caplog):
    caplog.set_level(logging.INFO, "minibroker.security")
    refusals = RefusalLog("User:eve", "10.0.0.9")
    refuse(refusals, 25, now=100.0)
    assert len(lines(caplog)) == REFUSAL_LINES_PER_SECOND
    assert lines(caplog)[0] == "refused: User:eve from 10.0.0.9 may not READ TOPIC 't0'"
    refuse(refusals, 3, now=100.9)  # same window: counted only
    assert len(lines(caplog)) == REFUSAL_LINES_PER_SECOND
    refuse(refusals, 1, now=101.0)  # next window: the count, then the line
    assert lines(caplog)[-2:] == [
        f"refused: 18 more refusals of User:eve from 10.0.0.9 not logged (at most "
        f"{REFUSAL_LINES_PER_SECOND} lines a second per connection)",
        "refused: User:eve from 10.0.0.9 may not READ TOPIC 't0'"]


def test_the_count_is_logged_at_close_and_only_if_some_were_left_out(caplog):
    caplog.set_level(logging.INFO, "minibroker.security")
    quiet = RefusalLog("User:bob", "")
    refuse(quiet, 2, now=5.0)
    quiet.close()
    assert len(lines(caplog)) == 2
    caplog.clear()
    noisy = RefusalLog("User:eve", "10.0.0.9")
    refuse(noisy, REFUSAL_LINES_PER_SECOND + 4, now=5.0)
    noisy.close()
    assert lines(caplog)[-1].startswith("refused: 4 more refusals of User:eve from 10.0.0.9")
    noisy.close()  # nothing more to report
    assert len(lines(caplog)) == REFUSAL_LINES_PER_SECOND + 1
