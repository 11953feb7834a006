"""The ``cedar`` command line: help texts, ``run``, and ``status``/``inspect`` of a live
query (the demo itself runs in tests/spark/test_demo.py)."""

from __future__ import annotations

import pytest

from operators.events import Cti, Insert
from topology import Stream
from topology.app.cli import main


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for command in ("demo", "run", "status", "inspect"):
        assert command in text


@pytest.mark.parametrize("command", ["demo", "run", "status", "inspect"])
def test_each_command_explains_itself(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--address" in capsys.readouterr().out


def test_run_executes_a_topology_script(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "from topology import Stream\n"
        "from operators.events import Insert, Cti\n"
        "out = Stream.from_events([Insert(1, 0, 5, 2), Cti(5)]).select(lambda p: p * 21)"
        ".collect(runtime='inline')\n"
        "print('answer', out[0].payload, sys.argv[1:])\n")
    assert main(["run", str(script), "x"]) == 0
    assert "answer 42 ['x']" in capsys.readouterr().out


@pytest.mark.ray
def test_status_and_inspect_a_live_query(ray_session, capsys):
    q = Stream.from_events([Insert("a", 0, 50, 7), Cti(10)]).shift(1).deploy(
        "cli-inspect", history=True, detached=False)
    try:
        assert q.wait(timeout_s=30)
        assert main(["status"]) == 0
        assert "cli-inspect" in capsys.readouterr().out.split()
        assert main(["inspect", "cli-inspect"]) == 0
        text = capsys.readouterr().out
        assert "shift#1" in text and "[1, 51) 7" in text
        assert "the query's host (feeds it): node" in text
    finally:
        q.stop()


@pytest.mark.ray
def test_inspect_names_the_sources_the_deploying_process_feeds(ray_session, capsys):
    rows = ({"t": t} for t in range(10))  # a generator: only this process can read it
    q = Stream.from_rows(rows, start="t").deploy("cli-fed-here", detached=False)
    try:
        assert q.wait(timeout_s=30)
        assert "fed by the deploying process: from_rows#0" in q.explain()
        assert main(["inspect", "cli-fed-here"]) == 0
        assert "fed by the deploying process: from_rows#0" in capsys.readouterr().out
    finally:
        q.stop()


def test_run_takes_its_address_wherever_it_stands(monkeypatch, tmp_path, capsys):
    # `cedar run SCRIPT.py --address auto` (the README's form): the address is cedar's, the
    # other arguments the script's
    import topology.app.cli

    seen = []
    monkeypatch.setattr(topology.app.cli, "_connect", lambda command, address: seen.append(address)
                        or True)
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:])\n")
    assert main(["run", str(script), "x", "--address", "10.0.0.1:6379", "y"]) == 0
    assert main(["run", str(script), "--address=auto"]) == 0
    assert seen == ["10.0.0.1:6379", "auto"]
    out = capsys.readouterr().out
    assert "argv ['x', 'y']" in out and "argv []" in out


def test_the_demo_progress_ends_on_the_final_count(capsys):
    """The bar reaches 100 % when every reading was read, before the queries end; its last
    line still says that every query is done."""
    from topology.app.demo import Progress

    bar = Progress(10)
    bar.update(10, "4/5 queries done")
    bar.update(10, "4/5 queries done")
    bar.update(10, "5/5 queries done", last=True)
    lines = capsys.readouterr().err.strip().split("\n")
    assert "100%" in lines[-1] and "5/5 queries done" in lines[-1]
    assert sum("4/5" in line for line in lines) == 1


@pytest.mark.ray
def test_stop_frees_the_name_of_a_running_query(ray_session, capsys):
    """What a refused redeploy tells the user to run (issue 28)."""
    from topology.running.query import NameTaken

    q = Stream.from_events([Insert("a", 0, 50, 7), Cti(10)]).deploy("cli-stop")
    with pytest.raises(NameTaken, match="cedar stop cli-stop"):
        Stream.from_events([Cti(1)]).deploy("cli-stop")
    assert main(["stop", "cli-stop"]) == 0
    assert "stopped cli-stop" in capsys.readouterr().out
    Stream.from_events([Cti(1)]).deploy("cli-stop").stop()
    assert main(["stop", "cli-stop"]) == 1
    assert "no running query" in capsys.readouterr().err
    del q


@pytest.mark.ray
def test_inspect_and_status_show_times_where_the_source_had_timestamps(ray_session, capsys):
    import datetime

    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    rows = [{"ts": t0 + datetime.timedelta(seconds=i), "v": i} for i in range(3)]
    q = Stream.from_rows(rows, start="ts").deploy("cli-times", history=True, detached=False)
    try:
        assert q.wait(timeout_s=30)
        assert main(["inspect", "cli-times"]) == 0
        text = capsys.readouterr().out
        assert "at 2026-01-01T00:00:01Z {'ts'" in text  # a point: at its time
        assert main(["inspect", "cli-times", "--tz", "Europe/Paris"]) == 0
        assert "at 2026-01-01T01:00:02+01:00 " in capsys.readouterr().out
        assert main(["inspect", "cli-times", "--tz", "Mars/Base"]) == 2
        assert "unknown time zone 'Mars/Base'" in capsys.readouterr().err
        assert main(["status"]) == 0
        assert "cli-times  output CTI 2026-01-01T00:00:02.000001Z" in capsys.readouterr().out
    finally:
        q.stop()
    # a generator declares no clock: its rows say it as they come (the source counts them)
    q = Stream.from_rows((r for r in rows), start="ts").deploy("cli-gen", history=True,
                                                                 detached=False)
    try:
        assert q.wait(timeout_s=30)
        assert main(["inspect", "cli-gen"]) == 0
        assert "at 2026-01-01T00:00:02Z {'ts'" in capsys.readouterr().out
        assert main(["status"]) == 0
        assert "cli-gen  output CTI 2026-01-01T00:00:02.000001Z" in capsys.readouterr().out
    finally:
        q.stop()
    # plain integer time stays integers
    q = Stream.from_events([Insert("a", 0, 50, 7), Cti(10)]).deploy(
        "cli-ticks", history=True, detached=False)
    try:
        assert q.wait(timeout_s=30)
        assert main(["inspect", "cli-ticks"]) == 0
        assert "[0, 50) 7" in capsys.readouterr().out
        assert main(["status"]) == 0
        assert "cli-ticks  output CTI 10" in capsys.readouterr().out
    finally:
        q.stop()
