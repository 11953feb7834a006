"""``ShellConfig`` (actors/config.py): the actor settings are typed, validated where the user
gives them (``collect()`` / ``deploy()``), naming the bad one, and their defaults are written
in that one module."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from actors.config import ShellConfig
from operators.cht import to_cht
from operators.events import Cti, Insert
from topology import Stream

REPO = Path(__file__).resolve().parents[2]

BAD = [
    ("batch_size", 0), ("batch_size", True), ("batch_size", "4096"), ("batch_size", 2.5),
    ("max_in_flight", 0), ("max_in_flight", 2.5), ("checkpoint_every", 0),
    ("checkpoint_every", -1), ("flush_ms", 0), ("flush_ms", -5), ("flush_ms", "20"),
    ("flush_ms", False),
]


def _stream() -> Stream:
    return Stream.from_events([Insert("a", 0, 5, {"x": 1}), Insert("b", 2, 7, {"x": 2}), Cti(9)])


def test_defaults_and_seconds():
    c = ShellConfig()
    assert (c.batch_size, c.max_in_flight, c.flush_ms, c.checkpoint_every) == (4096, 8, 20, 4)
    assert c.flush_s == pytest.approx(0.02) and c.trace is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.batch_size = 1  # type: ignore[misc]


def test_of_keeps_defaults_for_none_and_takes_numpy_ints():
    c = ShellConfig.of(batch_size=np.int64(100), max_in_flight=None, flush_ms=5)
    assert c == ShellConfig(batch_size=100, flush_ms=5)
    assert type(c.batch_size) is int
    with pytest.raises(TypeError, match=r"unknown actor setting\(s\) bach_size.*batch_size"):
        ShellConfig.of(bach_size=1)


@pytest.mark.parametrize(("name", "value"), BAD)
def test_a_bad_setting_is_named(name, value):
    with pytest.raises(ValueError, match=rf"^{name}="):
        ShellConfig(**{name: value})


@pytest.mark.parametrize(("name", "value"), BAD)
def test_collect_on_ray_refuses_a_bad_setting_when_called(name, value):
    # refused before any actor (or Ray itself) is started: no ray_session needed
    with pytest.raises(ValueError, match=rf"^{name}=") as err:
        _stream().collect(**{name: value})
    others = {n for n, _ in BAD} - {name}
    assert not any(o in str(err.value) for o in others), err.value


@pytest.mark.parametrize(("name", "value"), BAD)
def test_deploy_refuses_a_bad_setting_when_called(name, value):
    with pytest.raises(ValueError, match=rf"^{name}="):
        _stream().deploy("config-bad", **{name: value})


@pytest.mark.parametrize("value", [0, -1, True, "10"])
def test_inline_collect_refuses_a_bad_batch_size(value):
    with pytest.raises(ValueError, match=r"^batch_size="):
        _stream().collect(runtime="inline", batch_size=value)


@pytest.mark.slow
@pytest.mark.ray
def test_settings_reach_the_actors(ray_session):
    # tiny batches, one in flight, a short timer: the shells run with exactly these
    query = _stream().select(lambda p: p["x"] * 10).where(lambda v: v > 0)
    out = query.collect(batch_size=1, max_in_flight=1, flush_ms=1, fuse=False)
    assert to_cht(out) == [(0, 5, 10), (2, 7, 20)]


# the literal defaults, next to a setting's name (or alone, for the batch size)
_DEFAULTS = re.compile(
    r"\b4096\b"
    r"|(batch_size|max_in_flight|in_flight|flush_ms|flush_s|checkpoint_every|DEFAULT_\w+)"
    r"\b[^\n]{0,40}?(=|get\(|,)\s*[\"'\w]*?\s*(4096|8|20|0\.02|4)\b"
)


def test_the_defaults_are_written_once():
    hits = []
    for pkg in ("actors", "topology"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            if path == REPO / "actors" / "config.py":
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if _DEFAULTS.search(line.split("#")[0]):
                    hits.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert not hits, "actor defaults outside actors/config.py:\n" + "\n".join(hits)
    # and the pattern does find the definitions it guards against
    for line in ("batch_size = 4096", "DEFAULT_IN_FLIGHT = 8", "DEFAULT_FLUSH_MS = 20",
                 'self.flush_s = float(config.get("flush_s", 0.02))',
                 "checkpoint_every: int = 4"):
        assert _DEFAULTS.search(line), line
