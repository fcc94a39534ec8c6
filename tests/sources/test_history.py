"""The daemon's rolling history: backfill once in chunks, then new steps + overlap, gaps stay gaps, restarts
read only what they missed. The source here is a recording fake; test_prometheus.py runs it on a real one."""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd
import pytest

from daemon.sources.history import History

STEP = 60
T0 = 1_764_806_400 // STEP  # a step number
GAP = range(T0 + 5500, T0 + 5510)


def truth(step: int, tenant: str) -> float:
    if tenant == "b" and step in GAP:
        return np.nan                                   # b's node is silent: a gap
    return float((step * (3 if tenant == "a" else 7)) % 11)


class Source:
    """Answers any window from truth(); records what was asked; can add tenants and late samples."""

    def __init__(self, tenants=("a", "b")):
        self.tenants = list(tenants)
        self.calls: list[tuple[int, int]] = []
        self.late: dict[tuple[int, str], float] = {}

    def __call__(self, start_s, end_s, known):
        lo, hi = int(start_s // STEP), int(end_s // STEP)
        self.calls.append((lo, hi))
        cols = sorted(set(self.tenants) | set(known))
        idx = pd.date_range(pd.Timestamp(lo * STEP, unit="s", tz="UTC"), periods=hi - lo + 1, freq=f"{STEP}s")
        data = {t: [self.late.get((s, t), truth(s, t) if t in self.tenants else 0.0) for s in range(lo, hi + 1)]
                for t in cols}
        return pd.DataFrame(data, index=idx)

    def steps_read(self):
        return sum(hi - lo + 1 for lo, hi in self.calls)


def expect(h: History, now: int, steps: int, tenants=None):
    f = h.frame() if tenants is None else h.frame()[tenants]
    assert len(f) == steps
    assert f.index[-1] == pd.Timestamp(now * STEP, unit="s", tz="UTC")
    assert f.index[0] == pd.Timestamp((now - steps + 1) * STEP, unit="s", tz="UTC")
    for t in f.columns:
        want = [truth(s, t) for s in range(now - steps + 1, now + 1)]
        np.testing.assert_array_equal(f[t].to_numpy(), np.array(want))
    return f


def test_backfill_in_chunks_then_only_new_steps_plus_overlap():
    src = Source()
    h = History(STEP, 2880, chunk_steps=720, overlap_steps=1)
    now = T0 + 5000 + 1100           # the window holds b's 10-step gap
    st = h.update(src, now * STEP)
    assert st.backfill and st.requests == 4 and st.steps_read == 2880
    assert src.calls == [(now - 2879 + 720 * i, now - 2879 + 720 * i + 719) for i in range(4)]
    f = expect(h, now, 2880)
    assert f["b"].isna().sum() == 10                 # the gap stays a gap
    src.calls.clear()
    st = h.update(src, now * STEP + 30)              # same step, half a step later: only the newest step again
    assert not st.backfill and src.calls == [(now, now)]
    src.calls.clear()
    for k in range(1, 6):                            # one new step per update: it and the last one read
        h.update(src, (now + k) * STEP + 1)
        assert src.calls[-1] == (now + k - 1, now + k)
    expect(h, now + 5, 2880)


def test_a_backfill_holds_no_chunk_it_has_placed_while_reading_the_next():
    """At 10,000 tenants a 720-step chunk is a 58 MB frame: the backfill kept the one it had placed while the source
    read the next (the Prometheus answers' JSON, the daemon's peak of memory). It is dropped once in the window."""
    src = Source()
    made, alive_when_asked = [], []

    def fetch(start_s, end_s, known):
        alive_when_asked.append(sum(r() is not None for r in made))
        frame = src(start_s, end_s, known)
        made.append(weakref.ref(frame))
        return frame

    h = History(STEP, 2880, chunk_steps=720, overlap_steps=1)
    now = T0 + 5000 + 1100
    assert h.update(fetch, now * STEP).requests == 4
    assert alive_when_asked == [0, 0, 0, 0]
    expect(h, now, 2880)


def test_overlap_catches_late_samples():
    src = Source()
    h = History(STEP, 120, overlap_steps=3)
    now = T0 + 10
    h.update(src, now * STEP)
    src.late[(now, "a")] = 42.0                      # a sample for `now` arrives after it was read
    h.update(src, (now + 1) * STEP)
    assert src.calls[-1] == (now - 2, now + 1)
    assert h.frame()["a"].iloc[-2] == 42.0


def test_a_new_tenant_gets_a_column_and_nan_before_it_was_read():
    src = Source()
    h = History(STEP, 100)
    now = T0 + 7
    h.update(src, now * STEP)
    src.tenants.append("c")
    h.update(src, (now + 1) * STEP)
    f = h.frame()
    assert list(f.columns) == ["a", "b", "c"]
    assert f["c"].iloc[:-2].isna().all()             # never read there: unknown, not 0
    assert f["c"].iloc[-1] == truth(now + 1, "c")


def test_restart_reads_only_what_it_missed(tmp_path):
    db = tmp_path / "history.sqlite"
    src = Source()
    h = History(STEP, 1440, db, chunk_steps=500)
    now = T0 + 3000
    h.update(src, now * STEP)
    for k in range(1, 4):
        h.update(src, (now + k) * STEP)
    h.close()
    src.calls.clear()
    again = History(STEP, 1440, db, chunk_steps=500)
    expect(again, now + 3, 1440)                     # loaded from disk as it was
    st = again.update(src, (now + 3 + 90) * STEP)    # down for 90 steps
    assert not st.backfill and src.calls == [(now + 3, now + 93)]
    expect(again, now + 93, 1440)
    again.close()
    src.calls.clear()
    third = History(STEP, 1440, db)
    st = third.update(src, (now + 93 + 5000) * STEP)  # down longer than the window: one backfill
    assert st.backfill and src.steps_read() == 1440
    expect(third, now + 5093, 1440)


def test_a_failed_read_changes_nothing(tmp_path):
    src = Source()
    h = History(STEP, 200, tmp_path / "h.sqlite")
    now = T0 + 50
    h.update(src, now * STEP)

    def down(*a):
        raise ConnectionError("prometheus down")

    src.tenants.append("c")                          # seen by a read that then fails half-way

    def half(start_s, end_s, known):
        if src.calls:
            raise ConnectionError("prometheus down")
        return src(start_s, end_s, known)

    with pytest.raises(ConnectionError):
        h.update(down, (now + 4) * STEP)
    src.calls.clear()
    with pytest.raises(ConnectionError):
        History(STEP, 200, chunk_steps=50).update(half, (now + 4) * STEP)   # backfill: the second chunk fails
    assert h.fetched_until == now
    src.calls.clear()
    src.calls.clear()
    h.update(src, (now + 5) * STEP)                  # the next good read covers the outage
    assert src.calls == [(now, now + 5)]
    expect(h, now + 5, 200, ["a", "b"])
    h.close()
    assert History(STEP, 200, tmp_path / "h.sqlite").tenants() == ["a", "b", "c"]


def test_read_api_for_the_console():
    src = Source()
    h = History(STEP, 300)
    now = T0 + 1005
    h.update(src, now * STEP)
    t = pd.Timestamp((now - 10) * STEP, unit="s", tz="UTC")
    got = h.read(["b", "zz"], start=t)
    assert list(got.columns) == ["b", "zz"] and len(got) == 11
    assert got["zz"].isna().all()
    assert h.tenants() == ["a", "b"]
    got.iloc[:, :] = -1                               # a copy: the history is untouched
    assert (h.frame()["b"].dropna() >= 0).all()


def test_the_cycle_frame_is_a_read_only_view():
    src = Source()
    h = History(STEP, 50)
    h.update(src, (T0 + 100) * STEP)
    f = h.frame()
    with pytest.raises(ValueError, match="read-only"):
        f.iloc[0, 0] = -5.0
    assert (f.fillna(0) >= 0).all().all()            # reading, and arithmetic into new frames, work
    g = h.frame(copy=True)
    g.iloc[0, 0] = -5.0
    assert h.frame().iloc[0, 0] != -5.0


def test_a_clock_that_jumps_back_drops_what_it_read_ahead(tmp_path):
    src = Source()
    h = History(STEP, 300, tmp_path / "h.sqlite")
    now = T0 + 2000
    h.update(src, now * STEP)
    h.update(src, (now + 60) * STEP)                 # the clock ran an hour ahead
    h.update(src, (now + 5) * STEP)                  # and is put back (the head it slid past is read again)
    assert h.frame().index[-1] == pd.Timestamp((now + 5) * STEP, unit="s", tz="UTC")
    expect(h, now + 5, 300)
    h.close()
    expect(History(STEP, 300, tmp_path / "h.sqlite"), now + 5, 300)


def test_a_tenant_idle_for_the_whole_window_is_forgotten_unless_configured(tmp_path, monkeypatch):
    monkeypatch.setattr("daemon.sources.history.PRUNE_EVERY_STEPS", 1)
    src = Source(tenants=("a", "b", "gone", "kept"))
    h = History(STEP, 40, tmp_path / "h.sqlite")
    now = T0 + 100
    h.update(src, now * STEP, ["kept"])
    src.tenants = ["a", "b"]                         # "gone" and "kept" hold no GPU from here on
    last = max(st for st in range(now - 39, now) if truth(st, "gone") > 0)   # `now` itself is read again as 0
    for k in range(1, last - now + 40):              # until the window starts after its last GPU
        h.update(src, (now + k) * STEP, ["kept"])
        assert "gone" in h.tenants()
    h.update(src, (now + 40) * STEP, ["kept"])
    assert sorted(h.tenants()) == ["a", "b", "kept"]  # configured tenants stay, at 0
    assert (h.frame()["kept"] == 0).all()
    expect(h, now + 40, 40, ["a", "b"])
    h.close()
    again = History(STEP, 40, tmp_path / "h.sqlite")
    assert sorted(again.tenants()) == ["a", "b", "kept"]
    expect(again, now + 40, 40, ["a", "b"])
    src.tenants = ["a", "b", "gone"]                 # it comes back: a new column, unknown before
    again.update(src, (now + 41) * STEP, ["kept"])
    assert again.frame()["gone"].iloc[-1] == truth(now + 41, "gone") and again.frame()["gone"].iloc[:-2].isna().all()


@pytest.mark.parametrize("damage", ["odd bytes", "wider than the names", "a step far off", "not a database"])
def test_a_history_file_that_cannot_be_read_is_set_aside_and_read_again(tmp_path, caplog, damage):
    """The history on disk is a cache of the source's: a damaged file stopped the daemon's start ("cannot start:
    buffer size must be a multiple of element size"; a step far past the others asked numpy for terabytes). It is
    moved aside (nothing deleted) with one WARNING line, and the history read again from the source; a step outside
    the window is not loaded at all."""
    import sqlite3

    db = tmp_path / "history.sqlite"
    src = Source()
    h = History(STEP, 200, db)
    now = T0 + 500
    h.update(src, now * STEP)
    h.close()
    if damage == "not a database":
        db.write_bytes(b"garbage" * 100)
    else:
        c = sqlite3.connect(db)
        if damage == "a step far off":
            c.execute("INSERT INTO steps VALUES (?, ?)", (now + 10**12, np.ones(2, np.float32).tobytes()))
        else:
            blob = b"abc" if damage == "odd bytes" else np.ones(5, np.float32).tobytes()
            c.execute("UPDATE steps SET vals = ? WHERE step = ?", (blob, now))
        c.commit()
        c.close()
    with caplog.at_level("WARNING", logger="gpu_autoscaler"):
        again = History(STEP, 200, db)
    if damage == "a step far off":   # outside the window: not read, the rest loaded as it was
        expect(again, now, 200)
        assert not caplog.records
    else:
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "cannot be read" in lines[0] and "starting over from the source" in lines[0]
        assert [p.name for p in tmp_path.glob("history.sqlite.unreadable-*")]
        assert again.fetched_until is None
        again.update(src, now * STEP)
        expect(again, now, 200)
    again.close()
    assert History(STEP, 200, db).fetched_until == now


@pytest.mark.parametrize("damage", ["odd bytes", "a step far off"])
def test_the_store_read_for_replays_and_proposals_is_bounded_the_same_way(tmp_path, caplog, damage):
    """daemon/sim/own.read_history_store (simulate --from-source, the window proposals' worker in the daemon) read
    every row: a step far off the others allocated from it to the last row (terabytes), odd bytes raised."""
    import sqlite3

    from daemon.sim.own import read_history_store

    db = tmp_path / "history.sqlite"
    h = History(STEP, 200, db)
    now = T0 + 500
    h.update(Source(), now * STEP)
    h.close()
    c = sqlite3.connect(db)
    if damage == "a step far off":
        c.execute("INSERT INTO steps VALUES (?, ?)", (now + 10**12, np.ones(2, np.float32).tobytes()))
    else:
        c.execute("UPDATE steps SET vals = ? WHERE step = ?", (b"abc", now))
    c.commit()
    c.close()
    frame = read_history_store(db, STEP)
    if damage == "a step far off":
        assert len(frame) == 200 and frame.index[-1] == pd.Timestamp(now * STEP, unit="s", tz="UTC")
    else:
        assert frame is None and "holds 3 bytes for 2 tenants" in caplog.text


def test_the_backfill_line_says_where_the_sources_samples_start(caplog):
    """On a Prometheus that began scraping minutes ago, "history: backfilled 11520 steps x 2 tenants" read as 8 days
    of demand read. The line now says where the samples begin when that is inside the window, or that there are
    none; a window full from its start reads as before."""
    now = T0 + 6000

    class Young(Source):
        def __init__(self, since):
            super().__init__()
            self.since = since

        def __call__(self, start_s, end_s, known):
            f = super().__call__(start_s, end_s, known)
            steps = f.index.as_unit("s").asi8 // STEP
            f.loc[steps < self.since] = np.nan
            return f

    lines = {}
    for name, since in (("young", now - 2), ("silent", now + 1), ("full", 0)):
        caplog.clear()
        with caplog.at_level("INFO", logger="gpu_autoscaler"):
            History(STEP, 2880, chunk_steps=720).update(Young(since), now * STEP, ["a", "b"])
        lines[name] = next(r.getMessage() for r in caplog.records if "backfilled" in r.getMessage())
    start = pd.Timestamp((now - 2) * STEP, unit="s", tz="UTC").isoformat()
    assert lines["young"].endswith(f"in 4 requests; the source's samples start at {start}: the last 3 steps")
    assert lines["silent"].endswith("in 4 requests; the source has no sample in it")
    assert lines["full"] == "history: backfilled 2880 steps x 2 tenants in 4 requests"
