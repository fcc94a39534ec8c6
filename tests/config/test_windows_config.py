"""[[windows]] (issue 39): each bad field is one line naming it; a window larger than its type's GPUs and
overlapping windows with more GPUs than there are are refused at start and at reload, the conflict named."""

import datetime as dt

import pytest

from daemon.config import ConfigError, WindowConfig, parse_config
from daemon.config.reload import merge
from daemon.config.windows import problems

BASE = {"cluster": {"gpus": 32}, "tenants": [{"name": "a", "tier": "high"}, {"name": "b"}]}


def _w(name="x", tenant="a", gpus=16, **kw):
    return {"name": name, "tenant": tenant, "gpus": gpus, "duration_minutes": 120,
            **({"every": "daily", "at": "14:00", "timezone": "Europe/Paris"} | kw)}


def _refused(windows, base=BASE) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config({**base, "windows": windows})
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_a_good_window_loads_with_its_slurm_flag():
    cfg = parse_config({**BASE, "windows": [_w(), _w("y", "b", 8, every="weekdays", at="09:00"),
                                            _w("z", "b", 8, every="weekly", day="sun", at="20:00"),
                                            _w("c", "b", 4, every=None, at=None, timezone="UTC",
                                               cron="30 3 1 * *")]})
    assert [w.slurm_flag() for w in cfg.windows] == ["DAILY", "WEEKDAY", "WEEKLY", None]


def test_a_window_larger_than_the_cluster_is_refused():
    assert "windows.x.gpus: 40 is more than the 32 GPUs the cluster has" in _refused([_w(gpus=40)])
    # the file's name, then the key: no '<root>: ' between them (check-config printed 'w.toml: <root>: windows.x...')
    assert _refused([_w(gpus=40)]).startswith("config: windows.x.gpus: 40 is more")


def test_a_window_larger_than_its_type_is_refused_on_a_mixed_fleet():
    fleet = {**BASE, "fleet": {"types": ["h100", "a100"], "pools": [{"type": "h100", "nodes": 1},
                                                                     {"type": "a100", "nodes": 4}]}}
    assert "windows.x.gpus: 9 is more than the 8 h100 GPUs the cluster has" in \
        _refused([_w(gpus={"h100": 9, "a100": 8})], fleet)
    assert "a mixed fleet needs GPUs per type" in _refused([_w(gpus=8)], fleet)
    assert "'t4' is not a GPU type of this fleet" in _refused([_w(gpus={"t4": 1})], fleet)
    parse_config({**fleet, "windows": [_w(gpus={"h100": 8}), _w("y", "b", {"h100": 8}, at="20:00")]})


def test_overlapping_windows_over_the_capacity_are_refused_with_both_and_the_time_named():
    # x: 14:00-16:00 Paris daily, held from 13:30; y: weekdays 15:00 Paris, held from 14:30 -> they overlap
    # 14:30-16:00 Paris (13:30-15:00 UTC in December) on the first weekday
    msg = _refused([_w(gpus=20), _w("y", "b", 20, every="weekdays", at="15:00", duration_minutes=60)])
    assert "x (20) and y (20) overlap from" in msg and "13:30 UTC to" in msg and "15:00 UTC" in msg
    assert "40 GPUs, more than the 32" in msg
    # the same two at times that do not meet, or that fit together, are kept
    parse_config({**BASE, "windows": [_w(gpus=20), _w("y", "b", 20, every="weekdays", at="17:00")]})
    parse_config({**BASE, "windows": [_w(gpus=16), _w("y", "b", 16, every="weekdays", at="15:00")]})


def test_a_crontab_sunday_is_sunday_and_its_overlap_with_a_weekly_window_is_found():
    # crontab weekdays count Sunday as 0: "0 14 * * 0" is Sunday, as the weekly window on sun is
    msg = _refused([_w(gpus=20, every=None, at=None, cron="0 14 * * 0"),
                    _w("y", "b", 20, every="weekly", day="sun", at="15:00", duration_minutes=30)])
    assert "x (20) and y (20) overlap" in msg


def test_each_bad_field_is_named_on_one_line():
    assert "at = '25:00' is not a time of day" in _refused([_w(at="25:00")])
    assert "cron = 'nope' is not a crontab" in _refused([_w(every=None, at=None, cron="nope")])
    assert "'Mars/Olympus' is not an IANA time zone" in _refused([_w(timezone="Mars/Olympus")])
    assert "give either cron or every" in _refused([_w(cron="0 1 * * *")])
    assert "day is needed by every = 'weekly'" in _refused([_w(every="weekly")])
    assert "windows.x.tenant: 'nobody' is not one of [[tenants]]" in _refused([_w(tenant="nobody")])
    assert "the name 'x' is used twice" in _refused([_w(), _w(at="20:00")])
    assert "windows.0.duration_minutes" in _refused([_w(duration_minutes=0)])
    assert "before the one before it" in _refused([_w(duration_minutes=24 * 60)])
    assert "not a window name" in _refused([_w(name="Bad Name")])
    assert "'proposals' is reserved" in _refused([_w(name="proposals")])


def test_a_reload_that_adds_an_overlap_is_refused():
    running = parse_config({**BASE, "windows": [_w(gpus=20)]})
    new = parse_config({**BASE, "windows": [_w(gpus=20)]}).model_copy()
    with pytest.raises(ConfigError, match="x .20. and y .20. overlap"):
        merge(running, type(new).model_construct(**{**dict(new), "windows": [
            WindowConfig.model_validate(_w(gpus=20)),
            WindowConfig.model_validate(_w("y", "b", 20, at="15:00"))]}))


def test_starts_follow_the_windows_time_zone_across_daylight_saving():
    w = WindowConfig.model_validate(_w())
    winter = w.starts(dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc), dt.datetime(2026, 12, 8,
                                                                                     tzinfo=dt.timezone.utc))
    summer = w.starts(dt.datetime(2026, 7, 7, tzinfo=dt.timezone.utc), dt.datetime(2026, 7, 8,
                                                                                   tzinfo=dt.timezone.utc))
    assert [s.astimezone(dt.timezone.utc).hour for s in winter + summer] == [13, 12]
    weekdays = WindowConfig.model_validate(_w(every=None, at=None, cron="0 9 * * 1-5"))
    got = weekdays.starts(dt.datetime(2026, 12, 6, tzinfo=dt.timezone.utc), dt.datetime(2026, 12, 13,
                                                                                        tzinfo=dt.timezone.utc))
    assert [s.strftime("%a") for s in got] == ["Mon", "Tue", "Wed", "Thu", "Fri"]


def test_a_crontab_that_never_fires_or_reads_two_ways_is_refused():
    # 30 February never comes: the window would be declared, listed with no next start and never hold anything
    assert "cron = '0 9 30 2 *' never fires" in _refused([_w(every=None, at=None, cron="0 9 30 2 *")])
    # crontab fires on the 1st AND on every Monday; APScheduler only on a Monday that is the 1st
    msg = _refused([_w(every=None, at=None, cron="0 9 1 * 1")])
    assert "restricts both the day of the month and the weekday" in msg
    parse_config({**BASE, "windows": [_w(every=None, at=None, cron="0 9 1 * *"),
                                      _w("y", "b", 8, every=None, at=None, cron="0 3 * * 1")]})


def test_a_window_that_starts_more_often_than_hourly_is_refused_at_once():
    # every minute, no lead: 20,160 starts in the two weeks checked; the overlap check compared every hold with every
    # other one (half a minute on its own); now it is refused, named, before any pair is looked at
    many = _w(every=None, at=None, cron="* * * * *", duration_minutes=0.5, reclaim_before_minutes=0)
    assert "windows.x.cron: '* * * * *' starts more than 336 times in the 14 days checked" in _refused([many])
    parse_config({**BASE, "windows": [_w(every=None, at=None, cron="0 * * * *", duration_minutes=30,
                                         reclaim_before_minutes=10)]})


def test_overlaps_among_many_hourly_windows_are_found_by_the_sweep():
    # 12 hourly windows of 2 GPUs each (4,032 holds in the check period): together 24 of 32 GPUs fit; a 13th of 9
    # GPUs overlaps them all, and the conflict names all thirteen
    ws = [_w(f"h{i:02d}", "b", 2, every=None, at=None, timezone="UTC", cron=f"{i} * * * *", duration_minutes=45,
             reclaim_before_minutes=5) for i in range(12)]
    parse_config({**BASE, "windows": ws})
    msg = _refused([*ws, _w("big", "a", 9, every="daily", at="12:00", timezone="UTC", duration_minutes=60)])
    assert "big (9) and h00 (2) and h01 (2)" in msg and "h11 (2) overlap" in msg and "33 GPUs, more than the 32" in msg


def test_gpus_as_a_boolean_or_a_type_given_twice_is_refused():
    assert "windows.0.gpus: must be a number of GPUs, not true or false" in _refused([_w(gpus=True)])
    fleet = {**BASE, "fleet": {"types": ["h100"], "pools": [{"type": "h100", "nodes": 4}]}}
    msg = _refused([_w(gpus={"h100": 2, "H100": 8})], fleet)
    assert "the GPU type 'h100' is given twice" in msg


def test_holds_that_meet_end_to_start_do_not_overlap():
    # x: 14:00-16:00 Paris; y at 16:30, held from 16:00: x's hold has ended when y's begins, 20 + 20 is never held
    parse_config({**BASE, "windows": [_w(gpus=20), _w("y", "b", 20, at="16:30", duration_minutes=60)]})
    msg = _refused([_w(gpus=20), _w("y", "b", 20, at="16:29", duration_minutes=60)])   # one minute earlier
    assert "x (20) and y (20) overlap from" in msg


def test_an_occurrence_in_progress_when_the_check_starts_is_checked_too():
    # x began at 14:00 Paris, before the check (14:30): y's hold from 14:30 meets it until 16:00. Both are yearly,
    # so no later occurrence in the two weeks checked meets the other
    x = WindowConfig(**_w(gpus=20, every=None, at=None, cron="0 14 6 12 *"))
    y = WindowConfig(**_w("y", "b", 20, every=None, at=None, cron="0 15 6 12 *", duration_minutes=60))
    since = dt.datetime(2026, 12, 6, 13, 30, tzinfo=dt.timezone.utc)     # 14:30 Paris
    out = problems([x, y], {"gpu": 32}, False, since=since)
    assert len(out) == 1 and "x (20) and y (20) overlap from 2026-12-06 13:30 UTC to 2026-12-06 15:00 UTC" in out[0]


@pytest.mark.security
def test_a_name_or_time_with_a_final_newline_is_refused():
    """The checks were `^...$` regexes, and `$` also matches before a final newline: a window named "x\\n" was
    accepted, stored and made into the argument ReservationName=gpuas-win-x\\n of scontrol (and "14:00\\n" a time)."""
    assert "not a window name" in _refused([_w(name="x\n")])
    assert "is not a time of day" in _refused([_w(at="14:00\n")])


def test_a_bad_count_a_day_without_weekly_a_negative_lead_or_no_tenant_is_refused():
    assert "windows.0.gpus: must be > 0" in _refused([_w(gpus=0)])
    fleet = {**BASE, "fleet": {"types": ["h100"], "pools": [{"type": "h100", "nodes": 4}]}}
    assert "GPUs per type must be > 0: {'h100': 0}" in _refused([_w(gpus={"h100": 0})], fleet)
    # a day on a daily window would be silently dropped: the window would run every day, not on that day
    assert "day is read only with every = 'weekly'" in _refused([_w(day="mon")])
    assert "windows.0.reclaim_before_minutes" in _refused([_w(reclaim_before_minutes=-5)])
    assert "windows.0.tenant" in _refused([_w(tenant="")], {"cluster": {"gpus": 32}})


def test_a_weekday_window_starts_monday_to_friday_only():
    w = WindowConfig.model_validate(_w(every="weekdays", at="09:00", timezone="UTC"))
    got = w.starts(dt.datetime(2026, 12, 6, tzinfo=dt.timezone.utc), dt.datetime(2026, 12, 13, tzinfo=dt.timezone.utc))
    assert [s.strftime("%a %H:%M") for s in got] == [f"{d} 09:00" for d in ("Mon", "Tue", "Wed", "Thu", "Fri")]
    assert w.crontab() == "0 9 * * mon-fri" and w.slurm_flag() == "WEEKDAY"


def test_a_crontab_weekday_range_that_runs_backwards_is_refused_not_read_as_the_rest_of_its_list():
    assert "weekday range '5-1' runs backwards" in _refused([_w(every=None, at=None, cron="0 9 * * 5-1,3")])


def test_starts_are_up_to_but_not_at_the_end_of_the_span_asked():
    w = WindowConfig.model_validate(_w(timezone="UTC"))
    day = dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)
    assert w.starts(day, day.replace(hour=14)) == []
    assert w.starts(day, day.replace(hour=14, minute=1)) == [day.replace(hour=14)]


def test_the_next_lead_time_is_of_the_first_occurrence_not_yet_being_reclaimed_for():
    """14:00 UTC with 30 min of lead: before 13:30 the next lead is today's 13:30; at 13:30 exactly and after (the
    plan's hold has taken today's occurrence) it is tomorrow's."""
    w = WindowConfig.model_validate(_w(timezone="UTC", reclaim_before_minutes=30))
    at = dt.datetime(2026, 12, 7, 13, 0, tzinfo=dt.timezone.utc)
    assert w.next_lead(at) == at.replace(minute=30)
    for now in (at.replace(minute=30), at.replace(minute=40), at.replace(hour=14, minute=30)):
        assert w.next_lead(now) == at.replace(day=8, minute=30), now


def test_a_window_whose_hold_begins_as_its_last_occurrence_ends_does_not_overlap_itself():
    # hourly, 30 min long, held 30 min ahead: each hold begins as the one before ends
    parse_config({**BASE, "windows": [_w(every=None, at=None, cron="0 * * * *", duration_minutes=30,
                                         reclaim_before_minutes=30)]})
    assert "before the one before it" in _refused([_w(every=None, at=None, cron="0 * * * *", duration_minutes=31,
                                                      reclaim_before_minutes=30)])


def test_two_windows_over_the_capacity_every_day_are_one_line_not_one_per_occurrence():
    out = problems([WindowConfig.model_validate(_w(gpus=20)), WindowConfig.model_validate(_w("y", "b", 20))],
                   {"gpu": 32}, False, since=dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc))
    assert len(out) == 1 and "x (20) and y (20) overlap" in out[0], out


def test_a_crontabs_weekday_forms_slurm_can_repeat_get_its_flag():
    def flag(dow: str) -> str | None:
        return WindowConfig.model_validate(_w(every=None, at=None, cron=f"0 9 * * {dow}")).slurm_flag()

    assert [flag(d) for d in ("*", "1-5", "mon-fri", "0", "7", "sun", "1,3")] == \
        ["DAILY", "WEEKDAY", "WEEKDAY", "WEEKLY", "WEEKLY", "WEEKLY", None]


def test_windows_are_checked_with_the_lead_the_plan_holds_them_from_when_reclaim_before_is_shorter():
    """reclaim_before = 0, x until 16:00 and y from 16:00, 20 GPUs each on 32: they met end to start by the
    config's count, but the plan holds a window at least a preemption's drain (120 s here) and a cycle (30 s) ahead,
    so it held 40 GPUs from 15:57:30 (daemon/policy/windows.py demands). The check counts the same lead; a drain
    of 0 still leaves a cycle."""
    two = [_w(gpus=20, timezone="UTC", reclaim_before_minutes=0),
           _w("y", "b", 20, timezone="UTC", at="16:00", duration_minutes=60, reclaim_before_minutes=0)]
    msg = _refused(two)
    assert "x (20) and y (20) overlap from" in msg and "a preemption's drain and a cycle ahead" in msg, msg
    assert "overlap" in _refused(two, {**BASE, "policy": {"preempt_drain_s": 0}})
    parse_config({**BASE, "windows": [two[0], {**two[1], "at": "16:03"}]})       # held from 16:00:30
    # a window meeting its own next occurrence: hourly, 59 min long, no reclaim_before
    msg = _refused([_w(every=None, at=None, cron="0 * * * *", duration_minutes=59, reclaim_before_minutes=0)])
    assert "reclaimed for 2.5 min ahead: a preemption's drain and a cycle" in msg


def test_gpus_that_are_not_a_count_are_one_clause_not_the_unions_two():
    """A reload of a window with gpus = "lots" logged 'windows.0.gpus.int: Input should be a valid integer, unable
    to parse string as an integer; windows.0.gpus.dict[str,int]: Input should be a valid dictionary', and the API's
    400 named the field 'gpus.int': pydantic's error for each branch of `int | dict[str, int]`."""
    for bad in ("lots", 16.5, [8]):
        msg = _refused([_w(gpus=bad)])
        assert f"windows.0.gpus: must be a whole number of GPUs (gpus = 16), or GPUs per type on a mixed fleet " \
               f"(gpus = {{h100 = 8}}), not {bad!r}" in msg, msg
        assert "Input should be" not in msg and "gpus.int" not in msg and "gpus.dict" not in msg
    fleet = {**BASE, "fleet": {"types": ["h100"], "pools": [{"type": "h100", "nodes": 4}]}}
    msg = _refused([_w(gpus={"h100": "x"})], fleet)
    assert "windows.0.gpus: GPUs per type must be whole numbers: {'h100': 'x'}" in msg and "Input should" not in msg
    assert parse_config({**BASE, "windows": [_w(gpus="16")]}).windows[0].gpus == 16   # as pydantic reads it
