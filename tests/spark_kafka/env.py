"""Spark's own Kafka connector's environment: its own venv and its jars, never the product's.

Maven Central serves ``org.apache.spark:spark-sql-kafka-0-10_2.13`` up to 4.2.0 while the project's
venv has PySpark 4.3; a connector must match its Spark. So the tests and the benchmark run
``format("kafka")`` in a venv of their own with ``pyspark==4.2.0`` and a pyarrow it supports,
built once under the cache dir (``build/spark_kafka/`` or ``$MINIBROKER_SPARK_KAFKA_CACHE``), and
pass the connector's jars (``pom.xml``, fetched by Maven into its local repository) with
``spark.jars``. The repository root goes on that venv's ``PYTHONPATH`` so that ``format("minibroker")``
can be measured side by side in the same Spark.

    python -m tests.spark_kafka.env          # build both once; print the python and the jars
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.kafka_ref.harness import file_lock

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
POM = HERE / "pom.xml"
SPARK_VERSION = "4.2.0"
# pyspark 4.2.0 asks for pyarrow >= 18; the product's venv runs 26 with PySpark 4.3.
REQUIREMENTS = [f"pyspark=={SPARK_VERSION}", "pyarrow==21.0.0"]


def cache_dir() -> Path:
    path = Path(os.environ.get("MINIBROKER_SPARK_KAFKA_CACHE") or REPO / "build" / "spark_kafka")
    path.mkdir(parents=True, exist_ok=True)
    return path


def unavailable() -> str | None:
    """Why Spark's Kafka connector cannot run here (no Java, no Maven), or None."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "no java on PATH (Spark needs Java 17 or later)"
    if shutil.which("mvn") is None:
        return "no mvn on PATH (Spark's Kafka connector jars are fetched from Maven Central with Maven)"
    return None




def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def python() -> Path:
    """The venv's interpreter (pyspark 4.2.0 + pyarrow); built on first use (about a minute)."""
    venv = cache_dir() / f"venv-{_key(sys.version, *REQUIREMENTS)}"
    interpreter = venv / "bin" / "python"
    with file_lock(cache_dir() / "venv.lock"):
        if not (venv / ".done").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            done = subprocess.run([str(interpreter), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"pip install {' '.join(REQUIREMENTS)} failed:\n"
                                   + (done.stdout + done.stderr)[-4000:])
            (venv / ".done").touch()
        # format("minibroker") runs in the same Spark: the product's own dependencies, the
        # product itself from the repository (PYTHONPATH, see environment()).
        deps = product_dependencies()
        stamp = venv / f".deps-{_key(*deps)}"
        if not stamp.exists():
            done = subprocess.run([str(interpreter), "-m", "pip", "install", "--quiet", *deps],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"pip install {' '.join(deps)} failed:\n"
                                   + (done.stdout + done.stderr)[-4000:])
            stamp.touch()
    return interpreter


def product_dependencies() -> list[str]:
    import tomllib

    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


def _pyspark_jars(interpreter: Path) -> set[str]:
    out = subprocess.run([str(interpreter), "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return {p.name for p in (Path(out) / "jars").glob("*.jar")}


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    name = Path(jar).name.removesuffix(".jar")
    parts = name.split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def jars(interpreter: Path | None = None) -> list[str]:
    """The connector and what it needs beyond PySpark's own jars (same artifact: PySpark's wins)."""
    interpreter = interpreter or python()
    out = cache_dir() / f"jars-{_key(POM.read_text())}.txt"
    with file_lock(cache_dir() / "mvn.lock"):
        if not out.exists():
            tmp = out.with_suffix(".tmp")
            done = subprocess.run(["mvn", "-B", "-q", "-f", str(POM), "dependency:build-classpath",
                                   "-DincludeScope=runtime", f"-Dmdep.outputFile={tmp}"],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError("fetching spark-sql-kafka's jars failed:\n"
                                   + (done.stdout + done.stderr)[-4000:])
            tmp.replace(out)
    have = {_artifact(j) for j in _pyspark_jars(interpreter)}
    return [j for j in out.read_text().strip().split(os.pathsep) if _artifact(j) not in have]


def environment(interpreter: Path) -> dict[str, str]:
    """What a job in the venv needs: its python for Spark's workers, loopback, the repository."""
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=str(interpreter), PYSPARK_DRIVER_PYTHON=str(interpreter),
               SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(REPO))
    env.pop("SPARK_HOME", None)
    return env


if __name__ == "__main__":
    interpreter = python()
    print(interpreter)
    print(",".join(jars(interpreter)))
