"""Guards against tests that pass only on the machine they were written on (issue 8).

A fixed path under /tmp exists on the author's machine and nowhere else; a process a test leaves
running outlives the session. Both landed once; these tests keep them out.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# A quoted literal that starts with the temp directory or /var's, as in the test below. The pattern is
# assembled from pieces so that this file does not match itself.
_TMP = "tmp"
FIXED_TMP_PATH = re.compile(rf"""["'](/{_TMP}|/var/{_TMP})/""")
SCANNED_SUFFIXES = {".py", ".sh", ".cfg", ".toml", ".ini", ".yml", ".yaml", ".json", ".js", ".properties"}
SCANNED_NAMES = {"Makefile", "Dockerfile", "run"}


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True, timeout=30
        ).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.SubprocessError):  # not a git checkout (an sdist): walk the tree
        names = [
            str(p.relative_to(REPO_ROOT))
            for p in REPO_ROOT.rglob("*")
            if p.is_file() and ".venv" not in p.parts and ".git" not in p.parts
        ]
    return [REPO_ROOT / n for n in names]


def test_no_source_file_names_a_fixed_path_under_tmp():
    offenders = []
    for path in _tracked_files():
        if path.suffix not in SCANNED_SUFFIXES and path.name not in SCANNED_NAMES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if FIXED_TMP_PATH.search(line):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert not offenders, (
        "fixed paths under /tmp exist only on the machine that wrote them; use pytest's tmp_path /"
        " tmp_path_factory or tempfile:\n" + "\n".join(offenders)
    )


def test_the_scan_finds_a_fixed_tmp_path():
    assert FIXED_TMP_PATH.search(f'Path("/{_TMP}/probe/out.txt")')
    assert FIXED_TMP_PATH.search(f"x = '/var/{_TMP}/a'")
    assert not FIXED_TMP_PATH.search("tmp_path / 'data'")


def test_a_process_left_running_fails_the_session(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(
        test_leak=textwrap.dedent(
            """
            import sys
            from tests.process_guard import popen

            def test_starts_and_forgets():
                popen([sys.executable, "-c", "import time; time.sleep(60)"], what="forgotten sleeper")
            """
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "tests.process_guard", "-p", "no:cacheprovider", timeout=60,
    )
    result.stdout.fnmatch_lines(["*1 passed*"])
    result.stdout.fnmatch_lines(["*still running after the session ended*", "*forgotten sleeper*"])
    assert result.ret == 1


def test_a_process_stopped_by_its_test_passes(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(
        test_clean=textwrap.dedent(
            """
            import sys
            from tests.process_guard import popen

            def test_starts_and_stops():
                proc = popen([sys.executable, "-c", "import time; time.sleep(60)"], what="sleeper")
                proc.kill()
                proc.wait()
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "tests.process_guard", "-p", "no:cacheprovider", timeout=60)
    assert result.ret == 0
    assert "still running" not in result.stdout.str()

