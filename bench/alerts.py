"""Alert evaluation, line-protocol encoding and embedded-store ingestion, on one core.

    .venv/bin/python bench/alerts.py [--gpus 1000] [--hours 24] [--no-write]

1. The 15 default rules over GPUS x HOURS of 10 s samples in DuckDB (8.64 million rows per
   usage table at the defaults), one whole evaluation round through the real evaluator
   (query, rendering, state transitions): target under 150 ms.
2. Line-protocol encoding of tf_gpu_usage rows: target at least 300,000 points/s.
3. Ingestion into the DuckDB store: target at least 200,000 rows/s.

Prints the figures and rewrites its own section of docs/benchmarks.md (date and machine).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmark_doc import write_section
from tensorfusion.adapters.package_data import default_alert_rule_set
from tensorfusion.adapters.tsdb.duckdb_store import DuckDBMetricsStore, EmbeddedMetricsStore
from tensorfusion.alerting.evaluator import AlertEvaluator
from tensorfusion.alerting.event_sink import LogEventSink
from tensorfusion.alerting.state_store import MemoryStateStore
from tensorfusion.domain.alerting.alerts import AlertNotice
from tensorfusion.domain.metrics.line_protocol import encode_row
from tensorfusion.domain.metrics.rows import MetricRow

STEP_MS = 10_000


class _Sink:
    def __init__(self) -> None:
        self.sent = 0

    def submit(self, notices: Sequence[AlertNotice]) -> None:
        self.sent += len(notices)


def _pin_one_core() -> str:
    try:
        first = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {first})
        return f"pinned to CPU {first}"
    except (AttributeError, OSError):
        return "not pinned"


def _generate(store: DuckDBMetricsStore, gpus: int, samples: int, end_ms: int) -> None:
    """Usage and allocation tables in time order, made by DuckDB itself (no Python loop)."""
    start_ms = end_ms - (samples - 1) * STEP_MS
    nodes = max(1, gpus // 8)
    ts = f"epoch_ms({start_ms} + s * {STEP_MS})"
    # Hot GPUs (2%) overheat and fill VRAM and compute; idle GPUs (3%) do nothing.
    store.execute(
        f"""INSERT INTO tf_gpu_usage (node, pool, uuid, compute_percentage, compute_tflops,
            memory_bytes, memory_percentage, temperature, power_usage, ts)
        SELECT 'node-' || (g // 8), 'pool-' || (g % 4), 'gpu-' || g,
          CASE WHEN g % 50 = 0 THEN 99.0 WHEN g % 33 = 1 THEN 0.2 ELSE 30 + (g * 7 + s) % 50 END,
          0.0, 1024, CASE WHEN g % 50 = 0 THEN 98.5 WHEN g % 33 = 1 THEN 1.0 ELSE 40.0 END,
          CASE WHEN g % 50 = 0 THEN 93.0 ELSE 55 + (g + s) % 20 END, 300.0, {ts}
        FROM range({samples}) r(s), range({gpus}) q(g) ORDER BY s, g"""
    )
    store.execute(
        f"""INSERT INTO tf_worker_usage (workload, worker, pod_name, namespace, pool, node, uuid,
            compute_percentage, memory_bytes, compute_throttled_cnt, vram_freezed_cnt,
            vram_resumed_cnt, ts)
        SELECT 'wl-' || (g // 4), 'worker-' || g, 'worker-' || g, 'default', 'pool-' || (g % 4),
          'node-' || (g // 8), 'gpu-' || g, 20.0, 1024,
          CASE WHEN g % 100 = 0 THEN s ELSE 0 END, 0, CASE WHEN g % 200 = 1 THEN s // 6 ELSE 0 END,
          {ts}
        FROM range({samples}) r(s), range({gpus}) q(g) WHERE g // 8 <> {nodes - 1}
        ORDER BY s, g"""
    )
    store.execute(
        f"""INSERT INTO tf_node_metrics (node, pool, phase, allocated_tflops,
            allocated_tflops_percent, allocated_vram_bytes, allocated_vram_percent, gpu_count, ts)
        SELECT 'node-' || n, 'pool-' || (n % 4), 'Running', 0.0,
          CASE WHEN n % 10 = 0 THEN 96.0 ELSE 50.0 END, 0.0,
          CASE WHEN n % 10 = 0 THEN 93.0 ELSE 50.0 END, 8, {ts}
        FROM range({samples}) r(s), range({nodes}) q(n) ORDER BY s, n"""
    )
    store.execute(
        f"""INSERT INTO tf_system_metrics (pool, total_workers_cnt, total_allocation_fail_cnt, ts)
        SELECT 'pool-' || p, {gpus // 4}, CASE WHEN p = 0 THEN s // 2 ELSE 0 END, {ts}
        FROM range({samples}) r(s), range(4) q(p) ORDER BY s, p"""
    )


async def _rounds(store: DuckDBMetricsStore, rounds: int) -> tuple[list[float], int, int]:
    sink = _Sink()
    evaluator = AlertEvaluator(
        EmbeddedMetricsStore(store), sink, state_store=MemoryStateStore(), events=LogEventSink()
    )
    rules = default_alert_rule_set()
    await evaluator.start(rules, timers=False)
    names = [rule.name for rule in rules.rules]
    timings: list[float] = []
    try:
        for _ in range(rounds + 2):
            started = time.perf_counter()
            for name in names:
                await evaluator.evaluate(name)
            timings.append(time.perf_counter() - started)
    finally:
        await evaluator.stop()
    return timings[2:], len(evaluator.firing()), sink.sent


def _usage_rows(count: int, start_ms: int) -> list[MetricRow]:
    rng = random.Random(7)
    return [
        MetricRow(
            "tf_gpu_usage",
            start_ms + (i // 1000) * STEP_MS,
            {"node": f"node-{i % 1000 // 8}", "pool": "pool-a", "uuid": f"gpu-{i % 1000}"},
            {
                "compute_percentage": rng.uniform(0, 100),
                "compute_tflops": rng.uniform(0, 312),
                "memory_bytes": rng.randrange(1 << 36),
                "memory_percentage": rng.uniform(0, 100),
                "temperature": rng.uniform(30, 95),
                "power_usage": rng.uniform(50, 400),
                "rx": rng.uniform(0, 1e6),
                "tx": rng.uniform(0, 1e6),
                "graphics_clock_mhz": 1410.0,
                "sm_clock_mhz": 1410.0,
                "memory_clock_mhz": 1593.0,
                "video_clock_mhz": 1275.0,
                "nvlink_rx": 0.0,
                "nvlink_tx": 0.0,
            },
        )
        for i in range(count)
    ]


def main() -> None:
    """Run the three measurements and record them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--no-write", action="store_true", help="do not update the doc")
    args = parser.parse_args()
    pinned = _pin_one_core()
    samples = int(args.hours * 3600_000 / STEP_MS)
    end_ms = int(time.time() * 1000) // STEP_MS * STEP_MS

    store = DuckDBMetricsStore(threads=1)
    started = time.perf_counter()
    _generate(store, args.gpus, samples, end_ms)
    generated_s = time.perf_counter() - started
    usage_rows = store.query("SELECT count(*) FROM tf_gpu_usage").rows[0][0]
    timings, firing, sent = asyncio.run(_rounds(store, args.rounds))
    store.close()
    round_ms = statistics.median(timings) * 1000
    worst_ms = max(timings) * 1000

    rows = _usage_rows(200_000, end_ms)
    started = time.perf_counter()
    for row in rows:
        encode_row(row)
    encode_rate = len(rows) / (time.perf_counter() - started)

    ingest = DuckDBMetricsStore(threads=1)
    started = time.perf_counter()
    for offset in range(0, len(rows), 5000):
        ingest.insert_rows(rows[offset : offset + 5000])
    ingest_rate = len(rows) / (time.perf_counter() - started)
    ingest.close()

    verdict = {True: "meets", False: "MISSES"}
    lines = [
        "## Alert evaluation and metrics ingestion (`bench/alerts.py`)",
        "",
        f"One core ({pinned}), DuckDB `threads=1`.",
        "",
        "| measurement | result | target |",
        "|---|---|---|",
        f"| one evaluation round, 15 default rules, {args.gpus:,} GPUs x {args.hours:g} h of 10 s "
        f"samples ({usage_rows:,} rows per usage table), median of {len(timings)} "
        f"| {round_ms:.1f} ms (worst {worst_ms:.1f} ms; {firing} alerts firing, "
        f"{sent} notices) | < 150 ms, {verdict[round_ms < 150]} |",
        f"| line-protocol encoding, tf_gpu_usage rows (3 tags, 14 fields) "
        f"| {encode_rate:,.0f} points/s | >= 300,000, {verdict[encode_rate >= 300_000]} |",
        f"| ingestion into the DuckDB store, batches of 5,000 tf_gpu_usage rows "
        f"| {ingest_rate:,.0f} rows/s | >= 200,000, {verdict[ingest_rate >= 200_000]} |",
        "",
        f"Data generation (inside DuckDB, time-ordered) took {generated_s:.1f} s. A round runs "
        "the rules one after another through `AlertEvaluator.evaluate` (query in a worker "
        "thread, rendering, labels, state transitions, hand-off to the notifier), with the "
        "wall-clock `{{ .Conditions }}` form of the embedded store.",
    ]
    section = "\n".join(lines)
    print(section)
    if not args.no_write:
        write_section("alerts", section)


if __name__ == "__main__":
    main()
