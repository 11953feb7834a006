"""Per-key progress at the source (``AdvanceTime(per_key=, low_watermark=)``, SPEC "Per-key
progress"): which rows are late is what a literal reading of the rule says (a reference
written here from the SPEC), whatever the batching; the stream is well formed, every key's
events respect its KeyCtis; a checkpoint restores mid-stream; and a ``group_apply`` told to
use the keys' CTIs finalizes a fast key's windows at its own CTI, not at the slow key's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.events import MIN_TIME, Cti, Insert, KeyCtis
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.windows import WindowPolicy, make_window, tumbling_window
from tests.kit import PROPERTY


def reference_accepted(rows, every, delay, lag):
    """The rows an ingress with per-key progress accepts, read literally from the SPEC: a
    row is late when its start is behind its key's CTI (the key's latest start − delay, set
    after every ``every`` accepted events of that key) or behind the low watermark (the
    largest start accepted − ``lag``; without a lag, the lowest CTI of the keys seen, each
    key starting at the low watermark of when it was first seen)."""
    key_cti, latest, count = {}, {}, {}
    top = None
    accepted = []
    for row in rows:
        k, s = row["k"], row["t"]
        if lag is not None:
            low = MIN_TIME if top is None else top - lag
        else:
            low = min(key_cti.values(), default=MIN_TIME)
        if s < max(low, key_cti.get(k, MIN_TIME)):
            continue
        accepted.append(row)
        top = s if top is None else max(top, s)
        if k not in key_cti:
            key_cti[k], latest[k], count[k] = low, s, 0
        latest[k] = max(latest[k], s)
        count[k] += 1
        if count[k] == every:
            count[k] = 0
            key_cti[k] = max(key_cti[k], latest[k] - delay)
    return accepted


@st.composite
def skewed_rows(draw):
    """Rows of up to 4 devices, each with a clock offset and its own disorder."""
    n_keys = draw(st.integers(1, 4))
    skew = [draw(st.integers(0, 60)) for _ in range(n_keys)]
    rows = []
    for i in range(draw(st.integers(0, 40))):
        k = draw(st.integers(0, n_keys - 1))
        t = max(0, 3 * i - skew[k] + draw(st.integers(-6, 6)))
        rows.append({"k": k, "t": t, "i": i})
    return rows


def _push(src, rows, cuts):
    out, at = [], 0
    for cut in [*sorted(cuts), len(rows)]:
        out += src.push(rows[at:cut])
        at = cut
    return out + src.end()


def _check_stream(out, key_of):
    """Events never start behind the stream's CTI nor behind their key's KeyCtis."""
    cti, keys = MIN_TIME, {}
    for m in out:
        if type(m) is Cti:
            assert m.time >= cti
            cti = m.time
        elif type(m) is KeyCtis:
            for k, t in m.times:
                assert t > cti
                keys[k] = max(keys.get(k, MIN_TIME), t)
        elif type(m) is Insert:
            assert m.start >= cti and m.start >= keys.get(key_of(m.payload), MIN_TIME), m


@PROPERTY
@given(rows=skewed_rows(), every=st.integers(1, 3), delay=st.integers(0, 8),
       lag=st.one_of(st.none(), st.integers(0, 80)), cuts=st.lists(st.integers(0, 40)))
def test_late_rows_are_the_references_whatever_the_batching(rows, every, delay, lag, cuts):
    adv = AdvanceTime(every=every, delay=delay, per_key="k", low_watermark=lag)
    src = Ingress(start="t", advance=adv)
    out = _push(src, rows, [c for c in cuts if c <= len(rows)])
    src._check()
    sent = [m.payload for m in out if type(m) is Insert]
    assert sent == reference_accepted(rows, every, delay, lag)
    s = src.stats
    assert s["received"] == len(rows) == s["processed"] + s["dropped"]
    assert len(src.late) == s["dropped"]
    _check_stream(out, lambda p: p["k"])


@PROPERTY
@given(rows=skewed_rows(), every=st.integers(1, 3), lag=st.one_of(st.none(), st.integers(0, 80)),
       cut=st.integers(0, 40))
def test_a_restored_ingress_goes_on_as_the_first_would_have(rows, every, lag, cut):
    adv = AdvanceTime(every=every, delay=2, per_key="k", low_watermark=lag)
    cut = min(cut, len(rows))
    first = Ingress(start="t", advance=adv)
    first.push(rows[:cut])
    snap = first.snapshot()
    resumed = Ingress(start="t", advance=adv)
    resumed.restore(snap)
    assert resumed.push(rows[cut:]) + resumed.end() == first.push(rows[cut:]) + first.end()
    assert resumed.late == first.late


def test_without_late_events_the_events_are_the_one_cti_runs():
    rows = [{"k": i % 3, "t": i} for i in range(30)]
    one = Ingress(start="t", advance=AdvanceTime(every=1))
    per = Ingress(start="t", advance=AdvanceTime(every=1, per_key="k", low_watermark=5))
    events = [[m for m in src.push(rows) + src.end() if type(m) is Insert] for src in (one, per)]
    assert events[0] == events[1] and not per.late


def test_a_device_behind_loses_nothing_with_per_key_and_loses_its_rows_with_one_cti():
    # m0 and m1 are on time; m2's clock is 600 ticks behind
    rows = []
    for t in range(0, 2000, 10):
        rows += [{"k": "m0", "t": t}, {"k": "m1", "t": t}]
        if t >= 600:
            rows.append({"k": "m2", "t": t - 600})
    one = Ingress(start="t", advance=AdvanceTime(every=1, delay=5))
    one.push(rows)
    assert one.stats["dropped"] == 140 and {r.item["k"] for r in one.late} == {"m2"}
    per = Ingress(start="t", advance=AdvanceTime(every=1, delay=5, per_key="k",
                                                 low_watermark=1000))
    per.push(rows)
    assert per.stats["dropped"] == 0


def test_a_late_record_names_the_key_whose_cti_it_missed():
    src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="k", low_watermark=100))
    src.push([{"k": "a", "t": 50}, {"k": "a", "t": 40}, {"k": "b", "t": 200}, {"k": "c", "t": 90}])
    reasons = [r.reason for r in src.late]
    assert reasons[0].startswith("start 40 is behind the CTI 50 of key 'a';")
    assert reasons[1].startswith("start 90 is behind the CTI 100 (the low watermark);")


def test_a_row_whose_key_cannot_be_read_goes_to_the_dead_letters():
    src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="k"))
    assert src.push([{"t": 1}, {"k": [1], "t": 2}, {"k": 1, "t": 3}])[0].start == 3
    assert [d.reason.split(":")[0] for d in src.dead_letters] == [
        "reading the key failed (AdvanceTime per_key=)"] * 2
    assert src.stats["dead_lettered"] == 2


def test_bad_per_key_settings_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="needs per_key="):
        AdvanceTime(low_watermark="10 min")
    with pytest.raises(ValueError, match="low_watermark must be a duration >= 0"):
        AdvanceTime(per_key="k", low_watermark=-1)
    with pytest.raises(TypeError, match="per_key must be a column name or a function"):
        AdvanceTime(per_key=3)
    assert AdvanceTime(per_key="k", low_watermark="1 s").low_watermark == 1_000_000


def test_a_column_batch_is_taken_as_its_rows():
    import numpy as np

    adv = AdvanceTime(every=1, per_key="k", low_watermark=10)
    cols = {"k": np.array([0, 1, 0, 1]), "t": np.array([5, 30, 6, 7])}
    by_cols = Ingress(start="t", advance=adv).push(cols)
    by_rows = Ingress(start="t", advance=adv).push(
        [{"k": k, "t": t} for k, t in zip(cols["k"], cols["t"], strict=True)])
    # the same events and promises; the column path makes the batch's promises at its end
    assert _events(by_cols) == _events(by_rows)
    assert _promises(by_cols) == _promises(by_rows)


def _events(out):
    """The inserts of ``out``, a Columns batch read as its inserts."""
    from operators.columns import Columns

    return [i for m in out for i in (m.inserts() if type(m) is Columns else [m])
            if type(i) is Insert]


def _promises(out):
    """The last stream CTI and each key's last CTI that ``out`` promises."""
    ctis = [m.time for m in out if type(m) is Cti]
    keys = {k: t for m in out if type(m) is KeyCtis for k, t in m.times}
    return (ctis[-1] if ctis else None), keys


# -- group_apply by the same key ------------------------------------------------------------
def _windows(per_key):
    g = GroupApply("k", lambda: make_window(tumbling_window(100), Count(),
                                            policy=WindowPolicy(emit="final")))
    g.per_key = per_key
    return g


def test_a_fast_keys_window_is_final_at_its_keys_cti_not_at_the_low_watermark():
    src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="k", low_watermark=1000))
    rows = [{"k": "slow", "t": 0}] + [{"k": "fast", "t": t} for t in range(0, 200, 10)]
    for per_key in (False, True):
        g = _windows(per_key)
        src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="k", low_watermark=1000))
        out = g.process(src.push(rows))
        done = [m.payload for m in out if type(m) is Insert]
        # the fast key's [0, 100) is final at its CTI 190; the low watermark is still -810
        assert done == ([("fast", 10)] if per_key else [])
        g._check()
        out = g.process(src.end())  # Cti(191): both keys' [0, 100) are final
        assert sorted(m.payload for m in out if type(m) is Insert) == (
            [("slow", 1)] if per_key else [("fast", 10), ("slow", 1)])


# -- column batches: the vectorised path decides as the row path does ------------------------
@st.composite
def skewed_columns(draw):
    """Rows of up to 6 devices with clock offsets, disorder and bursts, one key far behind
    at times; keys ints or strings; cut into batches, each in time order or not."""
    n_keys = draw(st.integers(1, 6))
    skew = [draw(st.integers(0, 200)) for _ in range(n_keys)]
    weights = [draw(st.integers(1, 8)) for _ in range(n_keys)]  # skewed: some keys busier
    pick = [k for k, w in enumerate(weights) for _ in range(w)]
    n = draw(st.integers(0, 80))
    rows = []
    for i in range(n):
        k = pick[draw(st.integers(0, len(pick) - 1))]
        t = max(0, 3 * i - skew[k] + draw(st.integers(-20, 20)))
        rows.append({"k": k, "t": t, "e": t + draw(st.integers(1, 30)), "i": i})
    if draw(st.booleans()):
        for row in rows:
            row["k"] = f"m{row['k']}"
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    if draw(st.booleans()):  # each batch in time order (the devices still apart)
        at, ordered = 0, []
        for cut in [*cuts, n]:
            ordered += sorted(rows[at:cut], key=lambda r: r["t"])
            at = max(at, cut)
        rows = ordered
    return rows, cuts


def _columns_of(rows):
    import numpy as np

    if not rows:
        return {}
    return {name: np.array([r[name] for r in rows],
                           dtype=object if isinstance(rows[0][name], str) else np.int64)
            for name in rows[0]}


@PROPERTY
@given(data=skewed_columns(), every=st.sampled_from([1, None]), delay=st.integers(0, 30),
       lag=st.integers(0, 120), interval=st.booleans(),
       policy=st.sampled_from(["drop", "adjust"]))
def test_a_column_batch_is_decided_as_its_rows(data, every, delay, lag, interval, policy):
    from operators.columns import Columns

    rows, cuts = data
    adv = AdvanceTime(every=every, delay=delay, per_key="k", low_watermark=lag, policy=policy)
    shape = {"shape": "interval", "end": "e"} if interval else {}
    by_rows, by_cols = (Ingress(start="t", advance=adv, **shape) for _ in range(2))
    at, columns_sent = 0, 0
    for cut in [*cuts, len(rows)]:
        part = rows[at:cut]
        at = cut
        if not part:
            continue
        by_rows.arrival = by_cols.arrival = 100.0 + cut
        want = by_rows.push([dict(r) for r in part], now=float(cut))
        got = by_cols.push(_columns_of(part), now=float(cut))
        columns_sent += sum(type(m) is Columns for m in got)
        assert _events(got) == _events(want)
        assert _promises(got) == _promises(want)
        for src in (by_rows, by_cols):
            src._check()
    assert by_cols.late == by_rows.late
    assert {k: v for k, v in by_cols.stats.items() if k != "ctis"} == {
        k: v for k, v in by_rows.stats.items() if k != "ctis"}
    assert by_cols._late_keys == by_rows._late_keys
    for field in ("cti", "_low", "_keys", "_latest", "_top", "_horizon", "_next_id"):
        assert getattr(by_cols, field) == getattr(by_rows, field), field
    assert by_cols.slowest_keys(3) == by_rows.slowest_keys(3)
    if by_rows.stats["processed"] and (policy == "drop" or not interval):
        assert columns_sent, "the column path was not taken"
    assert by_cols.end() == by_rows.end()


def test_a_snapshot_from_before_per_key_progress_restores():
    src = Ingress(start="t", advance=AdvanceTime(every=1))
    src.push([{"t": 5}])
    old = {k: v for k, v in src.snapshot().items()
           if k not in ("_keys", "_lows", "_pushed", "_moved", "_low", "_late_keys")}
    again = Ingress(start="t", advance=AdvanceTime(every=1))
    again.restore(old)
    assert again.push([{"t": 4}, {"t": 6}])[0].start == 6 and len(again.late) == 1


def test_edges_are_late_by_their_keys_cti_and_closed_by_their_start_rows_key():
    adv = AdvanceTime(every=1, per_key="k", low_watermark=100)
    src = Ingress(start="s", end="e", shape="edge", id="id", advance=adv)
    out = src.push([{"id": 1, "k": "a", "s": 50}, {"id": 2, "k": "b", "s": 10},
                    {"id": 1, "e": 60}, {"id": 3, "k": "a", "s": 40},
                    {"id": 2, "e": 30}])
    kinds = [(type(m).__name__, getattr(m, "id", None)) for m in out if type(m) is not Cti]
    # a@40 is behind a's CTI 50; b's edge closes at 30, ahead of b's CTI 10
    assert ("Insert", 3) not in kinds and ("Retract", 1) in kinds and ("Retract", 2) in kinds
    assert [r.reason.split(";")[0] for r in src.late] == [
        "start 40 is behind the CTI 50 of key 'a'"]


@pytest.mark.parametrize("emit", ["final", "speculative"])
def test_a_keyed_window_takes_columns_around_key_ctis_at_once(emit):
    # key 1's clock is 200 behind key 0's: each push's KeyCtis closes key 0's windows first
    import numpy as np

    from operators.cht import to_cht
    from operators.windows.keyed import KeyedWindowAggregate
    from operators.windows.keyed_columns import merged_batch

    src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="k", low_watermark=1000))
    msgs = []
    for lo in range(200, 800, 100):
        t = np.arange(lo, lo + 100, dtype=np.int64)
        k = (t % 3 == 0).astype(np.int64)
        msgs += src.push({"k": k, "t": np.where(k == 1, t - 200, t)})
    assert merged_batch(msgs, MIN_TIME, key_ctis=True) is not None
    end = src.end()

    def run(batches):
        op = KeyedWindowAggregate("k", tumbling_window(50), Count(), WindowPolicy(emit=emit))
        op.per_key = True
        out = [m for batch in batches for m in op.process(batch)]
        op._check()
        return out, out + op.process(end) + op.finish()

    (early, at_once), (_, one_by_one) = run([msgs]), run([[m] for m in msgs])
    assert to_cht(at_once) == to_cht(one_by_one)
    if emit == "final":  # key 0's windows came out at its own CTI, before the end
        assert {i.payload[0] for i in _events(early)} == {0, 1}


@pytest.mark.parametrize("dtype", ["uint8", "int32", "uint64", "U3", "object"])
def test_a_key_column_of_any_int_or_string_type_is_decided_as_its_rows(dtype):
    import numpy as np

    adv = AdvanceTime(every=1, per_key="k", low_watermark=10)
    keys = [5, 1, 5, 1] if dtype != "uint64" else [2**63 + 5, 2**63 + 1, 2**63 + 5, 1]
    if dtype in ("U3", "object"):
        keys = [f"m{k}" for k in keys]
    cols = {"k": np.array(keys, dtype=dtype), "t": np.array([5, 30, 6, 2], dtype=np.int64)}
    by_cols, by_rows = (Ingress(start="t", advance=adv) for _ in range(2))
    got = by_cols.push(cols)
    want = by_rows.push([{"k": k, "t": t} for k, t in zip(keys, [5, 30, 6, 2], strict=True)])
    assert _events(got) == _events(want) and _promises(got) == _promises(want)
    assert by_cols.late == by_rows.late and by_cols._keys == by_rows._keys
