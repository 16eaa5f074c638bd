"""Produce throughput of minibroker beside its limits and two Rust Kafka-compatible peers.

    .venv/bin/python bench/produce.py            # everything (a few minutes)
    .venv/bin/python bench/produce.py --quick    # smoke run with small volumes
    .venv/bin/python bench/produce.py --only tansu --only noida

Steps (each figure is the median of --repeat runs; every run starts a fresh broker; in (e) and (f)
the brokers take turns, one run each per round):
  (a) loopback limit: a trio sink reads and discards what a client sends over loopback;
  (b) disk limit: sequential write + fdatasync of the same volume, in chunks the size of the record
      batches the durable run sent, in a temp dir beside the broker data dirs;
  (c) minibroker produce with confluent-kafka, 1 KiB values, 3 partitions, linger.ms=5, acks=all,
      idempotent, durable and `--flush never`;
  (d) minibroker's peak and final RSS after (c);
  (e) 100-byte values with default batching against minibroker (both modes), Tansu and noida-db;
  (f) as (e) with batch.size=4096: records/s and broker CPU per Produce request.
Prints markdown tables (for bench/README.md) with targets, and writes bench/results/produce-<ts>.json.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402  (bench/ is not a package)
from _common import BrokerSpec, DiskResult, LoopbackResult, Memory, ProduceRun  # noqa: E402

PARTITIONS = 3
KIB_VALUE_SIZE = 1024
SMALL_VALUE_SIZE = 100
SMALL_REQUESTS = {"batch.size": 4096}
FALLBACK_DISK_CHUNK = 256 * 1024  # used when minibroker's durable run gave no batch sizes
BROKER_CHOICES = ("minibroker", "tansu", "noida")
BUSY_LOAD_AVERAGE = 0.5  # 1-minute load average above which the report warns

DURABLE = "minibroker (durable)"
FLUSH_NEVER = "minibroker (flush never)"
TANSU = "tansu (memory)"
NOIDA = "noida-db"


def log(message: str) -> None:
    """Progress goes to stderr so that stdout holds only the tables."""
    click.echo(message, err=True)


# --------------------------------------------------------------------------------------------
# results


@dataclass
class BrokerResult:
    """All runs of one broker in one scenario (a fresh broker process per run)."""

    label: str
    scenario: str
    runs: list[ProduceRun] = field(default_factory=list)
    memory: list[Memory] = field(default_factory=list)  # after each run
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.runs)

    def median(self, attribute: str) -> float | None:
        values = [getattr(r, attribute) for r in self.runs if getattr(r, attribute) is not None]
        return common.median(values) if values else None

    def spread(self, attribute: str) -> tuple[float, float] | None:
        values = [getattr(r, attribute) for r in self.runs if getattr(r, attribute) is not None]
        return (min(values), max(values)) if values else None

    @property
    def peak_rss_mb(self) -> float | None:
        return max((m.hwm_mb for m in self.memory), default=None)

    @property
    def final_rss_mb(self) -> float | None:
        return self.memory[-1].rss_mb if self.memory else None


@dataclass
class BaselineResult:
    loopback: list[LoopbackResult] = field(default_factory=list)
    disk: list[DiskResult] = field(default_factory=list)
    disk_preallocated: list[DiskResult] = field(default_factory=list)
    disk_chunk_source: str = ""
    error: str | None = None


@dataclass(frozen=True)
class Check:
    target: str
    measured: str
    threshold: str
    status: str  # PASS, FAIL or n/a


@dataclass
class Settings:
    brokers: tuple[str, ...]
    kib_records: int
    records: int
    repeat: int
    disk_chunk_bytes: int | None
    keep_data: bool
    load_average_at_start: tuple[float, float, float] = field(default_factory=os.getloadavg)


# --------------------------------------------------------------------------------------------
# running


def run_broker(
    spec: BrokerSpec,
    scenario: str,
    work_dir: Path,
    settings: Settings,
    records: int,
    value_size: int,
    extra_config: dict | None = None,
) -> BrokerResult:
    """settings.repeat runs in a row, each on a fresh broker; the first failure ends the series."""
    result = BrokerResult(spec.label, scenario)
    for attempt in range(1, settings.repeat + 1):
        if not run_once(spec, result, attempt, work_dir, settings, records, value_size,
                        extra_config):
            break
    return result


def run_once(
    spec: BrokerSpec,
    result: BrokerResult,
    attempt: int,
    work_dir: Path,
    settings: Settings,
    records: int,
    value_size: int,
    extra_config: dict | None = None,
) -> bool:
    """One run on a fresh broker, added to ``result``; False (``result.error`` set) if it failed."""
    log(f"  {result.scenario}: {spec.label} run {attempt}/{settings.repeat} ...")
    broker = common.RunningBroker(spec, work_dir)
    try:
        with broker:
            common.create_topic(broker.bootstrap, "bench", PARTITIONS)
            run = common.produce_records(
                broker.bootstrap,
                "bench",
                records,
                value_size,
                PARTITIONS,
                extra_config,
                broker.cpu_seconds,
            )
            result.memory.append(broker.memory())
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        tail = broker.log_tail(3)
        if tail and tail not in result.error:
            result.error += f" [log: {tail}]"
        log(f"    failed: {result.error}")
        return False
    result.runs.append(run)
    log(
        f"    {run.records_per_s:,.0f} records/s, {run.mb_per_s:.1f} MB/s, "
        f"{run.produce_requests} requests{', ' + run.note if run.note else ''}"
    )
    return True


def unavailable(name: str, scenario: str, reason: str) -> BrokerResult:
    """A placeholder row: the broker could not even be tried (one row, even for minibroker)."""
    return BrokerResult(name, scenario, error=f"not available ({reason})")


def run_baselines(
    settings: Settings, work_dir: Path, durable: BrokerResult | None
) -> BaselineResult:
    """(a) and (b) for the volume of the 1 KiB runs."""
    volume = settings.kib_records * KIB_VALUE_SIZE
    result = BaselineResult()
    chunk, result.disk_chunk_source = disk_chunk(settings, durable)
    try:
        for attempt in range(1, settings.repeat + 1):
            log(f"  baselines run {attempt}/{settings.repeat}: loopback, disk ({chunk} B chunks)")
            result.loopback.append(common.loopback_limit(volume))
            result.disk.append(common.disk_limit(work_dir, volume, chunk))
            result.disk_preallocated.append(
                common.disk_limit(work_dir, volume, chunk, preallocate=True)
            )
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        log(f"    failed: {result.error}")
    return result


def disk_chunk(settings: Settings, durable: BrokerResult | None) -> tuple[int, str]:
    """The chunk size for (b): what the broker would write per batch, and where it came from."""
    if settings.disk_chunk_bytes:
        return settings.disk_chunk_bytes, "--disk-chunk-kb"
    mean_batch = durable.median("mean_batch_bytes") if durable and durable.ok else None
    if mean_batch:
        return int(mean_batch), "mean record batch of the durable 1 KiB run (librdkafka stats)"
    return FALLBACK_DISK_CHUNK, "fallback (no durable minibroker run to take batch sizes from)"


def minibroker_specs() -> list[BrokerSpec]:
    return [common.minibroker_spec(flush_never=False), common.minibroker_spec(flush_never=True)]


def select_specs(settings: Settings) -> tuple[list[BrokerSpec], dict[str, str]]:
    """Broker specs to run for (e)/(f), and {name: reason} for those that cannot run."""
    specs: list[BrokerSpec] = []
    missing: dict[str, str] = {}
    if "minibroker" in settings.brokers:
        reason = common.minibroker_unavailable_reason()
        if reason is None:
            specs += minibroker_specs()
        else:
            missing["minibroker"] = reason
    if {"tansu", "noida"} & set(settings.brokers):
        try:
            peers = common.ensure_peers(log)
        except Exception as exc:
            peers = None
            missing.update(
                {
                    name: f"install failed: {exc}"
                    for name, key in (("tansu", "tansu"), ("noida-db", "noida"))
                    if key in settings.brokers
                }
            )
        if peers is not None:
            if "tansu" in settings.brokers:
                specs.append(common.tansu_spec(peers.tansu))
            if "noida" in settings.brokers:
                specs.append(common.noida_spec(peers.noida))
    return specs, missing


def run_scenario(
    scenario: str,
    specs: Sequence[BrokerSpec],
    missing: dict[str, str],
    settings: Settings,
    run: Callable[[BrokerSpec, BrokerResult, int], bool],
) -> list[BrokerResult]:
    """settings.repeat rounds, each running every broker once: a slow stretch of the machine
    then touches every broker alike instead of one broker's whole series (on this VM runs of
    one broker spread by 20-30%). A broker whose run failed is not run again."""
    results = [BrokerResult(spec.label, scenario) for spec in specs]
    for attempt in range(1, settings.repeat + 1):
        for spec, result in zip(specs, results, strict=True):
            if result.error is None:
                run(spec, result, attempt)
    return [unavailable(label, scenario, reason) for label, reason in missing.items()] + results


# --------------------------------------------------------------------------------------------
# formatting


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def fmt_mb(value: float | None) -> str:
    return fmt(value, 1 if value is not None and value < 100 else 0)


def failed_row(result: BrokerResult, width: int, max_chars: int = 110) -> list[str]:
    """The whole row is the error (shortened; the JSON file has it in full)."""
    message = f"{result.label}: {result.error}"
    if len(message) > max_chars:
        message = message[: max_chars - 3] + "..."
    return [message] + ["-"] * (width - 1)


def baseline_rows(base: BaselineResult, kib: Sequence[BrokerResult]) -> list[list[str]]:
    def median_of(items: Sequence[LoopbackResult | DiskResult]) -> float | None:
        return common.median([i.mb_per_s for i in items]) if items else None

    chunk = base.disk[0].chunk_bytes if base.disk else None
    sync_ms = common.median([d.fdatasync_ms for d in base.disk]) if base.disk else None
    rows = [
        [
            "(a) loopback limit (trio sink)",
            fmt_mb(median_of(base.loopback)),
            "-",
            f"{common.SINK_RECEIVE_BYTES // 1024} KiB receives",
        ],
        [
            "(b) disk limit (write + fdatasync)",
            fmt_mb(median_of(base.disk)),
            "-",
            f"{fmt(chunk)} B chunks, {fmt(sync_ms, 2)} ms each",
        ],
        [
            "(b') same, preallocated file (info)",
            fmt_mb(median_of(base.disk_preallocated)),
            "-",
            "zero-filled first, overwritten in place",
        ],
    ]
    if base.error:
        rows.append([f"baselines failed: {base.error}", "-", "-", "-"])
    for result in kib:
        if not result.ok:
            rows.append(failed_row(result, 4))
            continue
        rows.append(
            [
                f"(c) {result.label}",
                fmt_mb(result.median("mb_per_s")),
                fmt(result.median("records_per_s")),
                f"mean batch {fmt(result.median('mean_batch_bytes'))} B",
            ]
        )
    for result in kib:
        if result.ok:
            rows.append(
                [
                    f"(d) {result.label} RSS",
                    "-",
                    "-",
                    f"peak {fmt_mb(result.peak_rss_mb)} MB, after run "
                    f"{fmt_mb(result.final_rss_mb)} MB",
                ]
            )
    return rows


def default_batch_rows(results: Sequence[BrokerResult]) -> list[list[str]]:
    rows = []
    for r in results:
        if not r.ok:
            rows.append(failed_row(r, 7))
            continue
        requests = r.median("produce_requests")
        rows.append(
            [
                r.label,
                fmt(r.median("records_per_s")),
                fmt_mb(r.median("mb_per_s")),
                fmt(requests),
                fmt(r.runs[0].records / requests if requests else None),
                fmt(r.median("broker_cpu_s"), 2),
                fmt_mb(r.peak_rss_mb),
            ]
        )
    return rows


def small_request_rows(results: Sequence[BrokerResult]) -> list[list[str]]:
    rows = []
    for r in results:
        if not r.ok:
            rows.append(failed_row(r, 6))
            continue
        low, high = r.spread("records_per_s") or (None, None)
        rows.append(
            [
                r.label,
                fmt(r.median("records_per_s")),
                f"{fmt(low)} - {fmt(high)}",
                fmt(r.median("produce_requests")),
                f"{fmt(r.median('broker_cpu_s'), 2)} ({fmt(r.median('broker_cpu_window_s'), 2)})",
                fmt(r.median("cpu_us_per_request"), 1),
            ]
        )
    return rows


# --------------------------------------------------------------------------------------------
# targets


def check(
    target: str,
    measured: float | None,
    threshold: float | None,
    at_least: bool,
    unit: str,
    digits: int = 0,
) -> Check:
    sign = ">=" if at_least else "<="
    measured_text = "-" if measured is None else f"{fmt(measured, digits)} {unit}"
    threshold_text = "-" if threshold is None else f"{sign} {fmt(threshold, digits)} {unit}"
    if measured is None or threshold is None:
        return Check(target, measured_text, threshold_text, "n/a")
    passed = measured >= threshold if at_least else measured <= threshold
    return Check(target, measured_text, threshold_text, "PASS" if passed else "FAIL")


def by_label(results: Sequence[BrokerResult], label: str) -> BrokerResult | None:
    return next((r for r in results if r.label == label and r.ok), None)


def scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def evaluate(
    base: BaselineResult | None,
    kib: Sequence[BrokerResult],
    default: Sequence[BrokerResult],
    small: Sequence[BrokerResult],
) -> list[Check]:
    checks: list[Check] = []
    if base is not None:
        loopback = common.median([r.mb_per_s for r in base.loopback]) if base.loopback else None
        disk = common.median([r.mb_per_s for r in base.disk]) if base.disk else None
        durable, never = by_label(kib, DURABLE), by_label(kib, FLUSH_NEVER)
        checks += [
            check(
                "(c) durable >= 60% of disk limit (b)",
                durable and durable.median("mb_per_s"),
                scaled(disk, 0.6),
                True,
                "MB/s",
                1,
            ),
            check(
                "(c) flush never >= 25% of loopback limit (a)",
                never and never.median("mb_per_s"),
                scaled(loopback, 0.25),
                True,
                "MB/s",
                1,
            ),
        ]
        for label in (DURABLE, FLUSH_NEVER):
            result = by_label(kib, label)
            checks.append(
                check(f"(d) {label} peak RSS", result and result.peak_rss_mb, 200.0, False, "MB")
            )
    if not any(r.label.startswith("minibroker") for r in [*kib, *default, *small]):
        return checks  # only peers were run: nothing of ours to judge
    durable = by_label(default, DURABLE)
    for peer in (TANSU, NOIDA):
        if any(r.label == peer for r in default):
            other = by_label(default, peer)
            checks.append(
                check(
                    f"(e) durable records/s >= {peer}",
                    durable and durable.median("records_per_s"),
                    other and other.median("records_per_s"),
                    True,
                    "rec/s",
                )
            )
    if small:
        never, durable = by_label(small, FLUSH_NEVER), by_label(small, DURABLE)
        noida = by_label(small, NOIDA)
        checks += [
            check(
                "(f) flush never: broker CPU per Produce request",
                never and never.median("cpu_us_per_request"),
                60.0,
                False,
                "us",
                1,
            ),
            check(
                "(f) flush never records/s >= 1.3x noida-db",
                never and never.median("records_per_s"),
                scaled(noida and noida.median("records_per_s"), 1.3),
                True,
                "rec/s",
            ),
            check(
                "(f) durable records/s",
                durable and durable.median("records_per_s"),
                100_000.0,
                True,
                "rec/s",
            ),
        ]
    return checks


# --------------------------------------------------------------------------------------------
# report


def report(
    settings: Settings,
    base: BaselineResult | None,
    kib: list[BrokerResult],
    default: list[BrokerResult],
    small: list[BrokerResult],
    checks: list[Check],
) -> str:
    median_note = f"median of {settings.repeat}" if settings.repeat > 1 else "1 run"
    parts = []
    if base is not None:
        parts += [
            f"### Produce, 1 KiB values, {settings.kib_records:,} records ({median_note})",
            "",
            common.markdown_table(["step", "MB/s", "records/s", "notes"], baseline_rows(base, kib)),
            "",
        ]
    if default:
        parts += [
            f"### (e) 100-byte values, default batching, {settings.records:,} records "
            f"({median_note})",
            "",
            common.markdown_table(
                [
                    "broker",
                    "records/s",
                    "MB/s",
                    "Produce requests",
                    "records/request",
                    "broker CPU s",
                    "peak RSS MB",
                ],
                default_batch_rows(default),
            ),
            "",
        ]
    if small:
        parts += [
            f"### (f) 100-byte values, batch.size=4096, {settings.records:,} records "
            f"({median_note})",
            "",
            common.markdown_table(
                [
                    "broker",
                    "records/s",
                    "range (records/s)",
                    "Produce requests",
                    "broker CPU s (in timed part)",
                    "us CPU / request",
                ],
                small_request_rows(small),
            ),
            "",
        ]
    if checks:
        parts += [
            "### Targets",
            "",
            common.markdown_table(
                ["target", "measured", "target value", "result"],
                [[c.target, c.measured, c.threshold, c.status] for c in checks],
            ),
            "",
        ]
    parts += notes(settings, base, [*kib, *default, *small])
    return "\n".join(parts)


def busy_warning(settings: Settings) -> str:
    """Other work on the machine skews every figure here (2 cores): say so beside them."""
    load = settings.load_average_at_start[0]
    if load < BUSY_LOAD_AVERAGE:
        return ""
    return (
        f"WARNING: load average {load:.2f} when the benchmark started: other processes "
        "were using the CPU, figures are unreliable."
    )


def notes(
    settings: Settings, base: BaselineResult | None, results: Sequence[BrokerResult]
) -> list[str]:
    lines = [
        "Notes: MB = 10^6 bytes of record values. Producer: confluent-kafka "
        f"{_client_versions()}, linger.ms=5, acks=all, enable.idempotence=true, "
        f"{PARTITIONS} partitions; only produce() + flush() are timed, after a warm-up.",
        f"Produce requests are counted from {common.REQUEST_COUNT_SOURCE}.",
        "Broker CPU = utime+stime from /proc/PID/stat, from the start of the timed part until the "
        "broker is idle again (noida-db keeps working after the last acknowledgement); in "
        "parentheses the part spent inside the timed part.",
    ]
    if any(r.label in (TANSU, NOIDA) for r in results):
        lines.append("Tansu runs with memory storage; neither peer fsyncs.")
    if base is not None:
        lines.append(f"Disk chunk size: {base.disk_chunk_source}.")
    if busy_warning(settings):
        lines.append(busy_warning(settings))
    lines += [watermark_note(r) for r in results if any(run.note for run in r.runs)]
    if any(r.label == TANSU and any(run.note for run in r.runs) for r in results):
        lines.append(
            "(Tansu answers ListOffsets(latest) with the last batch's base offset + 1, "
            "so its watermarks lag; its records are all stored and can be consumed.)"
        )
    return lines


def watermark_note(result: BrokerResult) -> str:
    """One line for a broker whose high watermarks did not grow by the records sent."""
    grown = " / ".join(fmt(run.stored_records) for run in result.runs)
    return (
        f"Watermark check, {result.label} ({result.scenario}): high watermarks grew by "
        f"{grown} for {fmt(result.runs[0].records)} records sent per run."
    )


def _client_versions() -> str:
    import confluent_kafka

    version = confluent_kafka.version()  # a string in 2.16, a (string, int) tuple before
    version = version[0] if isinstance(version, tuple) else version
    return f"{version} (librdkafka {confluent_kafka.libversion()[0]})"


def environment(settings: Settings) -> dict:
    return {
        "settings": asdict(settings),
        "python": platform.python_version(),
        "client": _client_versions(),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "peers": list(common.PEER_PACKAGES),
        "load_average_at_start": settings.load_average_at_start,
        "load_average_at_end": os.getloadavg(),
    }


# --------------------------------------------------------------------------------------------
# main


def run_all(settings: Settings, work_dir: Path) -> dict:
    specs, missing = select_specs(settings)
    base, kib = None, []
    if "minibroker" in settings.brokers:
        log("(a)-(d): 1 KiB values")
        kib = [
            run_broker(s, "1KiB", work_dir, settings, settings.kib_records, KIB_VALUE_SIZE)
            for s in specs
            if s.name == "minibroker"
        ]
        kib += [
            unavailable(name, "1KiB", reason)
            for name, reason in missing.items()
            if name == "minibroker"
        ]
        base = run_baselines(settings, work_dir, by_label(kib, DURABLE))
    log("(e): 100-byte values, default batching")
    default = run_scenario(
        "default",
        specs,
        missing,
        settings,
        lambda s, result, attempt: run_once(
            s, result, attempt, work_dir, settings, settings.records, SMALL_VALUE_SIZE
        ),
    )
    log("(f): 100-byte values, batch.size=4096")
    small = run_scenario(
        "batch4096",
        specs,
        missing,
        settings,
        lambda s, result, attempt: run_once(
            s, result, attempt, work_dir, settings, settings.records, SMALL_VALUE_SIZE,
            SMALL_REQUESTS,
        ),
    )
    checks = evaluate(base, kib, default, small)
    return {"base": base, "kib": kib, "default": default, "small": small, "checks": checks}


@click.command()
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(BROKER_CHOICES),
    help="Run only these brokers (repeatable). (a)-(d) run when minibroker is selected.",
)
@click.option(
    "--records",
    type=int,
    default=None,
    help="Records per run for (e) and (f), 100-byte values [1,000,000; --quick 50,000].",
)
@click.option(
    "--kib-records",
    type=int,
    default=None,
    help="Records per run for (a)-(d), 1 KiB values [200,000; --quick 20,000].",
)
@click.option(
    "--repeat", type=int, default=None, help="Runs per figure, median reported [3; --quick 1]."
)
@click.option("--skip-peers", is_flag=True, help="Do not run Tansu and noida-db.")
@click.option("--quick", is_flag=True, help="Small volumes and one run: a smoke test.")
@click.option(
    "--disk-chunk-kb",
    type=int,
    default=None,
    help="Chunk size for (b) instead of the durable run's mean record batch.",
)
@click.option("--keep-data", is_flag=True, help="Keep broker data dirs and logs in bench/.cache/.")
def main(
    only: tuple[str, ...],
    records: int | None,
    kib_records: int | None,
    repeat: int | None,
    skip_peers: bool,
    quick: bool,
    disk_chunk_kb: int | None,
    keep_data: bool,
) -> None:
    """Produce throughput: minibroker against its loopback and disk limits and two peers."""
    brokers = only or BROKER_CHOICES
    if skip_peers:
        brokers = tuple(b for b in brokers if b == "minibroker")
    if not brokers:
        raise click.UsageError("nothing to run: --skip-peers removed every selected broker")
    settings = Settings(
        brokers=brokers,
        records=records or (50_000 if quick else 1_000_000),
        kib_records=kib_records or (20_000 if quick else 200_000),
        repeat=repeat or (1 if quick else 3),
        disk_chunk_bytes=disk_chunk_kb * 1024 if disk_chunk_kb else None,
        keep_data=keep_data,
    )
    if busy_warning(settings):
        log(busy_warning(settings))
    with common.work_directory("produce", keep=keep_data) as work_dir:
        results = run_all(settings, work_dir)
    click.echo(report(settings, **results))
    payload = {"environment": environment(settings)} | {
        key: [asdict(r) for r in value]
        if isinstance(value, list)
        else (asdict(value) if value is not None else None)
        for key, value in results.items()
    }
    log(f"results written to {common.write_results_json('produce', payload)}")


if __name__ == "__main__":
    main()
