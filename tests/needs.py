"""What a test needs from the machine beyond pip's packages: missing, the test is skipped with what
to install, except under CI (``CI=true``, exported by .ci/run), where that is a failure, as for the
reference Kafka (tests/kafka_ref/fixtures.py). ``make test`` installs these programs first
(tests/system_programs.sh)."""

from __future__ import annotations

import os
import shutil

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip the test for ``reason``; fail it under CI."""
    if under_ci():
        pytest.fail(f"cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def program(name: str, package: str) -> str:
    """The path of the program ``name`` (Debian's package ``package``); skips or fails without it."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed (Debian's package {package}; `make test` installs it"
                    " when run as root)")
    assert path is not None
    return path
