"""Which kind of time a plan carries (``Plan.clock``) and how a person reads it
(:mod:`topology.building.times`)."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pyarrow as pa
import pytest

from topology import Stream
from topology.building.times import parse_tz, show_duration, show_time
from topology.planning.planner import plan


def _clock(stream: Stream) -> str:
    return plan(stream._node).clock


def test_the_plan_remembers_its_clock():
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert _clock(Stream.from_rows([{"ts": when}], start="ts")) == "timestamps"
    assert _clock(Stream.from_rows([{"ts": "2026-01-01T00:00:00Z"}], start="ts")) == "timestamps"
    assert _clock(Stream.from_rows([{"ts": 5}], start="ts")) == "ticks"
    assert _clock(Stream.from_rows([{"ts": 5}], start=lambda r: when)) == "timestamps"
    table = pa.table({"ts": pa.array([when], pa.timestamp("us", "UTC")), "v": [1]})
    assert _clock(Stream.from_arrow(table, start="ts").where(lambda r: True)) == "timestamps"
    assert _clock(Stream.from_arrow({"ts": [1, 2], "v": [1, 2]}, start="ts")) == "ticks"
    # a lazy Arrow stream tells by its schema when that is known before a batch is read: a
    # list of tables, a RecordBatchReader; a generator of batches does not tell
    assert _clock(Stream.from_arrow([table, table], start="ts")) == "timestamps"
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    assert _clock(Stream.from_arrow(reader, start="ts")) == "timestamps"
    assert _clock(Stream.from_arrow((t for t in [table]), start="ts")) == "ticks"
    # a join of a timestamp source with one that does not tell carries timestamps
    gen = Stream.from_rows((r for r in [{"ts": 1}]), start="ts")
    ts = Stream.from_rows([{"ts": when}], start="ts")
    assert _clock(gen.union(ts)) == "timestamps"
    assert _clock(gen) == "ticks"


def test_times_and_durations_read_as_people_read_them():
    t = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
    assert show_time(t, "timestamps") == "2026-01-01T00:00:00Z"
    assert show_time(t + 2_400_000, "timestamps") == "2026-01-01T00:00:02.400Z"
    assert show_time(t, "timestamps", "Europe/Paris") == "2026-01-01T01:00:00+01:00"
    assert show_time(t, "ticks") == str(t)
    assert show_time(2**63 - 1, "timestamps") == "∞"
    assert [show_duration(d, "timestamps") for d in
            (0, 7, 2_400_000, 300_000_000, 5_400_000_000, 250_000)] == \
        ["0 s", "7 µs", "2.4 s", "5 min", "1.5 h", "250 ms"]
    assert show_duration(2_400_000, "ticks") == "2400000"
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Base'"):
        parse_tz("Mars/Base")


def test_the_demo_report_and_its_traces_read_as_times(tmp_path):
    pytest.importorskip("matplotlib")
    from topology.app.demo import explain, generate

    written = explain(generate(4, 12), str(tmp_path))
    label = next(k for k in written if k.startswith("anomaly at "))
    # the anomalous reading's own time
    assert re.match(r"anomaly at 202[56]-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ", label), label
    cause = Path(written["anomaly root cause (text)"]).read_text(encoding="utf-8")
    assert re.search(r"\[20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ, ", cause), cause
    assert "[17672" not in cause
    svg = Path(next(p for k, p in written.items() if k.endswith("5-minute windows"))
               ).read_text(encoding="utf-8")
    assert "time (UTC, 2026-01-01)" in svg and "<!-- kwh=" in svg


def test_a_point_reads_at_its_time_and_an_interval_as_its_span():
    from topology.building.times import show_span

    t = 1_767_225_600_000_000 + 24 * 60_000_000 + 7_603_172  # 00:24:07.603172
    assert show_span(t, t + 1, "timestamps") == "at 2026-01-01T00:24:07.603172Z"
    assert show_span(t, t + 1, "timestamps", "+01:00") == "at 2026-01-01T01:24:07.603172+01:00"
    assert show_span(t, t + 60_000_000, "timestamps") == \
        "[2026-01-01T00:24:07.603172Z, 2026-01-01T00:25:07.603172Z)"
    assert (show_span(3, 4, "ticks"), show_span(3, 9, "ticks")) == ("at 3", "[3, 9)")


def test_payload_fields_holding_times_of_their_event_read_as_times():
    from topology.building.times import show_times_in

    t0 = 1_767_225_600_000_000
    window = (t0, t0 + 300_000_000)  # a 5-minute window
    spike = "{'meter': 'm031', 'ts': 1767225720000000, 'kwh': 4.2, 'n': 1234567890123456789}"
    assert show_times_in(spike, *window, "timestamps") == \
        "{'meter': 'm031', 'ts': 2026-01-01T00:02:00Z, 'kwh': 4.2, 'n': 1234567890123456789}"
    assert show_times_in(spike, *window, "ticks") == spike  # plain ticks stay ticks
    # an integer outside its event's lifetime is no time of it; short ones are never times
    assert show_times_in("{'ts': 1767225720000000, 'k': 42}", t0, t0 + 1, "timestamps") == \
        "{'ts': 1767225720000000, 'k': 42}"


def test_a_running_query_is_on_timestamps_once_a_source_has_taken_one():
    from topology.building.times import TIMESTAMP_ROWS, running_clock

    steps = [{"step": "src", "source": {"received": 2, TIMESTAMP_ROWS: 0}},
             {"step": "sink", "cti": 5}]
    assert running_clock("ticks", steps) == "ticks"
    steps[0]["source"][TIMESTAMP_ROWS] = 2  # its rows' starts were datetimes
    assert running_clock("ticks", steps) == "timestamps"
    assert running_clock(None, [{"received": 1, TIMESTAMP_ROWS: 1}]) == "timestamps"
    assert running_clock("timestamps", []) == "timestamps"  # declared by the plan


def test_a_trace_of_a_generator_of_timestamps_says_its_clock(tmp_path):
    # a generator declares no clock when the plan is written; its rows say it as they come,
    # and plan.json is written anew, so cedar timeline and debug show times
    import datetime
    import json

    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    rows = ({"ts": t0 + datetime.timedelta(seconds=i), "v": i} for i in range(3))
    Stream.from_rows(rows, start="ts").collect(runtime="inline", trace=str(tmp_path))
    assert json.loads((tmp_path / "plan.json").read_text())["clock"] == "timestamps"
