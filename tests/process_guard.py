"""Every process the suite starts, tracked by its own handle, and a session that fails if one outlives it.

Tests and fixtures start processes with :func:`popen` (``BrokerProcess`` does). When the session
ends, after every fixture's teardown, :func:`pytest_sessionfinish` looks at each tracked process by
its PID through its own ``Popen`` handle; any still running is killed (by that handle, never looked up
by name), named in the report, and the session's exit status becomes "tests failed".

The hook is imported into tests/conftest.py, which registers it for the suite.
"""

from __future__ import annotations

import subprocess

import pytest

_started: dict[int, tuple[subprocess.Popen, str]] = {}


def popen(args, *, what: str, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)``, remembered so the session can check it was stopped.

    ``what`` names the process in the report ("broker on data dir X", "dying producer").
    """
    proc = subprocess.Popen(args, **kwargs)
    _started[proc.pid] = (proc, what)
    return proc


def still_running() -> list[tuple[subprocess.Popen, str]]:
    """The tracked processes that have not exited (their exit status is collected as a side effect)."""
    return [(proc, what) for proc, what in _started.values() if proc.poll() is None]


@pytest.hookimpl(trylast=True)  # after the runner's teardown of session-scoped fixtures
def pytest_sessionfinish(session: pytest.Session) -> None:
    leftovers = still_running()
    if not leftovers:
        return
    lines = ["processes started by the suite were still running after the session ended:"]
    for proc, what in leftovers:
        lines.append(f"  pid {proc.pid}: {what} ({' '.join(map(str, proc.args))[:200]})")
        proc.kill()
        proc.wait()
    lines.append("they have now been killed; the fixture or test that started each must stop it")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True, bold=True)
        else:  # pragma: no cover - only without the terminal plugin (-p no:terminal)
            print(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
