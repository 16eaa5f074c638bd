"""``minibroker users add``: where the password comes from (issue 28 item 8). Piped: the first
line of stdin, without its line end; on a terminal: typed twice, hidden. The Admin client is
replaced by a recorder: what is checked is the password it would be given."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import client.cli.security as cli_security
from client.cli import main


class RecordingAdmin:
    calls: list = []

    def __init__(self, conf) -> None:
        pass

    def __enter__(self) -> RecordingAdmin:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def alter_user_scram_credentials(self, upsertions=(), deletions=()) -> None:
        RecordingAdmin.calls.append(list(upsertions))


@pytest.fixture
def recorded(monkeypatch):
    RecordingAdmin.calls = []
    monkeypatch.setattr(cli_security, "Admin", RecordingAdmin)
    return RecordingAdmin.calls


def add(input: str | None, *extra: str):
    return CliRunner().invoke(main, ["users", "add", "alice", "--bootstrap-server",
                                     "127.0.0.1:1", *extra], input=input)


@pytest.mark.parametrize("piped", ["s3cret\n", "s3cret\r\n", "s3cret", "s3cret\nignored\n"])
def test_a_piped_password_is_one_line(recorded, piped):
    result = add(piped)
    assert result.exit_code == 0, result.output
    assert "Aborted" not in result.output
    assert recorded == [[("alice", "SCRAM-SHA-512", "s3cret", 8192)]]


def test_an_empty_stdin_is_refused(recorded):
    result = add("")
    assert result.exit_code == 2 and "stdin is empty" in result.output
    assert recorded == []


def test_the_option_needs_no_stdin(recorded):
    assert add(None, "--password", "given").exit_code == 0
    assert recorded == [[("alice", "SCRAM-SHA-512", "given", 8192)]]


def test_a_terminal_asks_twice(recorded, monkeypatch):
    monkeypatch.setattr(cli_security, "_stdin_is_a_terminal", lambda: True)
    result = add("one\ntwo\ns3cret\ns3cret\n")
    assert result.exit_code == 0, result.output
    assert "do not match" in result.output  # the confirmation is kept
    assert recorded == [[("alice", "SCRAM-SHA-512", "s3cret", 8192)]]
