"""A step's metrics (actors/metrics.py): what it sets from its counters, and what Ray's own
Prometheus endpoint serves while a deployed query runs.

The end-to-end test starts a Ray of its own in a subprocess (the session's ``ray_session``
cannot choose the metrics port), with the metrics agent exporting on a free port, deploys a
small query, scrapes ``http://127.0.0.1:PORT/metrics`` with urllib and reads the values
back: the source's records in equal the rows fed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actors.metrics import METRICS, Reading, StepMetrics

REPO = Path(__file__).resolve().parents[2]
SECOND = 1_000_000  # ticks


class _Fake:
    """A Ray metric that remembers what it was told, by tags."""

    def __init__(self) -> None:
        self.values: dict[tuple[tuple[str, str], ...], float] = {}

    def inc(self, value: float, tags: dict[str, str]) -> None:
        key = tuple(sorted(tags.items()))
        self.values[key] = self.values.get(key, 0) + value

    def set(self, value: float, tags: dict[str, str]) -> None:
        self.values[tuple(sorted(tags.items()))] = value


def _one(fake: _Fake, **tags: str) -> float:
    hits = [v for k, v in fake.values.items() if all((t, tags[t]) in k for t in tags)]
    assert len(hits) == 1, (tags, fake.values)
    return hits[0]


def test_counters_go_out_as_increments_and_lag_per_input() -> None:
    #   input 0 CTI ──── 10 s        input 1 CTI ── 4 s
    #   output CTI  ─ 4 s  (held back by input 1)   lag: 6 s on input 0, 0 on input 1
    fakes = {m.name: _Fake() for m in METRICS}
    m = StepMetrics("q", "join#2", "Join", read=Reading)
    m._set(fakes, Reading(records_in=100, records_out=40, out_cti=4 * SECOND,
                          in_ctis=[10 * SECOND, 4 * SECOND], busy_s=0.25,
                          state_rows=7), now=m._last_t + 1.0)
    m._last = Reading(records_in=100, records_out=40, busy_s=0.25)
    m._set(fakes, Reading(records_in=150, records_out=40, out_cti=4 * SECOND,
                          in_ctis=[10 * SECOND, 4 * SECOND], busy_s=0.35,
                          backpressured_s=0.05, state_rows=9), now=m._last_t + 1.0)
    assert _one(fakes["cedar_num_records_in"]) == 150
    assert _one(fakes["cedar_num_records_out"]) == 40
    assert _one(fakes["cedar_cti_lag_seconds"], input="0") == 6.0
    assert _one(fakes["cedar_cti_lag_seconds"], input="1") == 0.0
    assert _one(fakes["cedar_current_input_watermark"], input="0") == 10.0
    assert _one(fakes["cedar_current_output_watermark"]) == 4.0
    assert _one(fakes["cedar_busy_time_ms_per_second"]) == pytest.approx(100.0)
    assert _one(fakes["cedar_backpressured_time_ms_per_second"]) == pytest.approx(50.0)
    assert _one(fakes["cedar_idle_time_ms_per_second"]) == pytest.approx(850.0)
    assert _one(fakes["cedar_state_rows"]) == 9
    assert _one(fakes["cedar_input_blocking"], input="1") == 1.0  # the join's slow side
    assert _one(fakes["cedar_input_blocking"], input="0") == 0.0
    # tags: query, step, operator, input — never a key
    for fake in fakes.values():
        for key in fake.values:
            assert {t for t, _ in key} <= {"query", "step", "operator", "input"}


def test_an_ended_input_blocks_nothing_and_collect_runs_share_their_series() -> None:
    fakes = {m.name: _Fake() for m in METRICS}
    m = StepMetrics("collect-1a2b3c4d", "union#2", "Union", read=Reading)
    m._set(fakes, Reading(in_ctis=[2 * SECOND, 9 * SECOND], in_ended=frozenset({0})),
           now=m._last_t + 1)
    assert _one(fakes["cedar_input_blocking"], input="0") == 0.0
    assert _one(fakes["cedar_input_blocking"], input="1", query="collect") == 1.0


def test_a_source_exports_its_late_accounting() -> None:
    fakes = {m.name: _Fake() for m in METRICS}
    m = StepMetrics("q", "from_rows#0", "RowsSource", read=Reading)
    m._set(fakes, Reading(source={"received": 10, "processed": 6, "dropped": 2,
                                  "adjusted": 1, "dead_lettered": 1}), now=m._last_t + 1)
    got = {what: _one(fakes[f"cedar_num_{name}"]) for what, name in [
        ("received", "records_received"), ("processed", "records_processed"),
        ("dropped", "late_records_dropped"), ("adjusted", "late_records_adjusted"),
        ("dead_lettered", "records_dead_lettered")]}
    assert got == {"received": 10, "processed": 6, "dropped": 2, "adjusted": 1,
                   "dead_lettered": 1}


# -- the real endpoint ------------------------------------------------------------------------
ROWS = 5000

_SCRIPT = textwrap.dedent("""
    import json, sys, time, urllib.request
    import ray
    from topology import AdvanceTime, Count, Stream

    port, rows = int(sys.argv[1]), int(sys.argv[2])
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="cedar",
             logging_level="ERROR", _metrics_export_port=port,
             _system_config={"metrics_report_interval_ms": 500})
    data = [{"ts": i * 1_000_000, "k": i % 7} for i in range(rows)]
    q = (Stream.from_rows(data, start="ts", name="readings", advance=AdvanceTime(every=100))
         .tumbling_window(60_000_000).aggregate(Count())).deploy("metered", fuse=False)
    assert q.wait(120) is True
    deadline, found = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                          timeout=5).read().decode()
        except OSError:
            time.sleep(0.5)
            continue
        found = {}
        for line in body.splitlines():
            if line.startswith("ray_cedar_"):
                name, _, rest = line.partition("{")
                labels, _, value = rest.rpartition("} ")
                tags = dict(kv.split("=", 1) for kv in labels.split(",") if "=" in kv)
                tags = {k: v.strip('"') for k, v in tags.items()
                        if k in ("query", "step", "operator", "input")}
                found.setdefault(name, []).append((tags, float(value)))
        ins = {t.get("step"): v for t, v in found.get("ray_cedar_num_records_in_total", [])}
        outs = {t.get("step"): v for t, v in found.get("ray_cedar_num_records_out_total", [])}
        if ins.get("readings") == rows and ins.get("sink") is not None and \
                ins["sink"] == sum(v for s, v in outs.items() if s not in ("readings", "sink")):
            break
        time.sleep(0.5)
    q.stop()
    print("METRICS " + json.dumps(found))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _has_metrics_agent() -> bool:
    """Ray serves metrics only with its ``ray[default]`` dependencies installed."""
    return all(importlib.util.find_spec(m) is not None
               for m in ("prometheus_client", "aiohttp", "opencensus"))


@pytest.mark.slow
@pytest.mark.skipif(not _has_metrics_agent(),
                    reason="Ray's metrics agent needs ray[default] (pip install 'ray[default]')")
def test_the_metrics_endpoint_serves_a_deployed_querys_counts(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(port), str(ROWS)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    lines = [x for x in done.stdout.splitlines() if x.startswith("METRICS ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    found: dict[str, list[tuple[dict[str, str], float]]] = json.loads(lines[-1][8:])

    def values(name: str, **tags: str) -> list[float]:
        return [v for t, v in found.get(name, [])
                if all(t.get(k) == want for k, want in tags.items())]

    # the source received every row fed, and processed all of them (none late)
    assert values("ray_cedar_num_records_in_total", query="metered",
                  step="readings") == [ROWS]
    assert values("ray_cedar_num_records_received_total", step="readings") == [ROWS]
    assert values("ray_cedar_num_late_records_dropped_total", step="readings") in ([], [0])
    # the window's input is the source's output, CTIs included
    out_src = values("ray_cedar_num_records_out_total", step="readings")
    win = [t for t, _ in found["ray_cedar_num_records_in_total"]
           if t["step"] not in ("readings", "sink")]
    assert len(win) == 1 and out_src == values("ray_cedar_num_records_in_total",
                                               step=win[0]["step"])
    # and the sink received all the window emitted
    assert values("ray_cedar_num_records_in_total", step="sink") == \
        values("ray_cedar_num_records_out_total", step=win[0]["step"])
    # the final CTI, as event-time seconds: past the last row (at ROWS - 1 seconds)
    assert values("ray_cedar_current_output_watermark", step="readings")[0] >= ROWS - 1
    # per-input series of the window: its input CTI and a lag that is not negative
    lag = values("ray_cedar_cti_lag_seconds", step=win[0]["step"], input="0")
    assert len(lag) == 1 and lag[0] >= 0
    assert values("ray_cedar_busy_time_ms_per_second", step="readings")
    assert values("ray_cedar_state_rows", step=win[0]["step"])
    # only the four tags of ours (Ray adds its own: node, worker, session)
    for samples in found.values():
        for tags, _ in samples:
            assert set(tags) <= {"query", "step", "operator", "input"}



# -- what a shell reads for its metrics (in-process, no Ray) ----------------------------------
def test_a_checkpointed_shell_reports_counts_busy_time_and_its_checkpoint(tmp_path: Path) -> None:
    from actors.shell import OperatorShell
    from actors.stage_config import StageCheckpoint, StageConfig
    from actors.wire import encode
    from operators.events import Cti, Insert
    from operators.publish import Publish

    shell = OperatorShell()
    shell.configure(StageConfig(step="sink", query="q", factory=lambda: Publish("sink"),
                                checkpoint=StageCheckpoint(str(tmp_path), "q", sink=True)))
    batch = [Insert(i, i * SECOND, i * SECOND + 1, {"v": i}) for i in range(50)]
    shell.push(0, encode([*batch, Cti(50 * SECOND)]))  # type: ignore[arg-type]
    shell.barrier(0, 1)
    r = shell._metrics_reading()
    assert (r.records_in, r.out_cti, r.checkpoints) == (51, 50 * SECOND, 1)
    assert r.checkpoint_bytes is not None and r.checkpoint_bytes > 0
    assert r.checkpoint_ms is not None and r.checkpoint_ms >= 0
    assert r.busy_s > 0 and r.state_rows is not None
    assert shell.metrics is not None and shell.metrics.tags == {
        "query": "q", "step": "sink", "operator": "Publish"}
    shell.reset()
    assert shell.metrics is None  # the step went: the publisher no longer reads it
