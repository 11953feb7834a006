"""collect() on Ray: a query whose sources are all ``from_arrow`` tables has each source actor
read its table itself (the table travels once through the object store); the driver sends no
batch. The output is the inline run's, string columns (with nulls and repeats) included; a
query with a source of rows is still fed by the driver, one batch of each source in turn."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from operators.cht import check_equivalent
from operators.columns import expand
from topology import Stream
from topology.running import feeding

pytestmark = pytest.mark.ray

N = 5_000


def _table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    urls = [f"https://x/{i}/{j}" for i, j in zip(rng.integers(0, 40, N), rng.integers(0, 3, N))]
    return pa.table({
        "t": pa.array(np.sort(rng.integers(0, 50_000, N)), pa.timestamp("us", tz="UTC")),
        "k": rng.integers(0, 9, N),
        "url": pa.array([u if i % 13 else None for i, u in enumerate(urls)]),
        "extra": pa.array([""] * N),
    })


@pytest.fixture
def sent(monkeypatch):
    """The batches the driver sends to source actors (``feeding.Sender.send``)."""
    calls: list[int] = []
    send = feeding.Sender.send

    def counted(self, batch):  # type: ignore[no-untyped-def]
        calls.append(1)
        return send(self, batch)

    monkeypatch.setattr(feeding.Sender, "send", counted)
    return calls


def _keep(r):  # type: ignore[no-untyped-def]
    return r["k"] % 3 != 0


def test_a_tables_only_source_is_read_by_its_actor(ray_session, sent):
    s = Stream.from_arrow(_table(1), start="t", batch_rows=700).where(_keep)
    inline = s.collect(runtime="inline", columns=True)
    out = s.collect(columns=True)
    assert not sent, f"the driver sent {len(sent)} batches"
    check_equivalent(list(expand(out)), list(expand(inline)))
    rows = [m.payload for m in expand(out) if hasattr(m, "payload")]
    assert len(rows) == sum(1 for k in _table(1)["k"].to_pylist() if k % 3) and \
        None in [r["url"] for r in rows]


def test_several_table_sources_each_read_their_own(ray_session, sent):
    a = Stream.from_arrow(_table(2), start="t", batch_rows=1_000)
    b = Stream.from_arrow(_table(3), start="t", batch_rows=1_000)
    s = a.union(b)
    out = s.collect(columns=True)
    assert not sent, f"the driver sent {len(sent)} batches"
    check_equivalent(list(expand(out)), list(expand(s.collect(runtime="inline", columns=True))))


def test_a_source_of_rows_beside_a_table_is_fed_by_the_driver_with_it(ray_session, sent):
    rows = [{"t": t, "k": t % 9, "url": None, "extra": ""} for t in range(0, 50_000, 10)]
    a = Stream.from_arrow(_table(2), start="t", batch_rows=1_000).select(lambda r: r["k"])
    b = Stream.from_rows(rows, start="t").select(lambda r: r["k"])
    s = a.union(b)
    out = s.collect(columns=True)
    assert sent
    check_equivalent(list(expand(out)), list(expand(s.collect(runtime="inline", columns=True))))
