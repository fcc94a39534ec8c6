"""Which pending Slurm jobs are demand now: those that free GPUs would start (squeue's reason), read without Slurm."""

import dataclasses

import pytest

from daemon.actuators.slurm.actuator import SlurmJob, waits_for_gpus


def job(state, reason):
    return SlurmJob("1", "acct", "p", "normal", state, "", 0.0, 2, reason)


@pytest.mark.parametrize("reason", ["Resources", "Priority", "None", "ReqNodeNotAvail, Reserved for maintenance",
                                    "Reservation", "(Resources)", ""])
def test_waiting_for_gpus(reason):
    assert waits_for_gpus(job("PENDING", reason))


NOT_FOR_GPUS = ["BeginTime", "job requeued in held state", "launch failed requeued held", "JobHoldMaxRequeue",
                "Licenses", "BurstBufferStageIn", "PartitionConfig", "Dependency", "DependencyNeverSatisfied",
                "JobHeldUser", "JobHeldAdmin", "(JobHeldUser)", "AssocGrpGRES", "AssocMaxJobsLimit",
                "QOSMaxGRESPerUser", "QOSGrpGRES", "QOSJobLimit", "MaxGRESPerAccount", "AccountingPolicy",
                "PartitionDown", "PartitionInactive", "PartitionTimeLimit", "JobArrayTaskLimit", "BadConstraints",
                "InvalidAccount"]


@pytest.mark.parametrize("reason", NOT_FOR_GPUS)
def test_not_waiting_for_gpus(reason):
    assert not waits_for_gpus(job("PENDING", reason))


def test_only_pending_jobs_wait():
    assert not waits_for_gpus(job("RUNNING", "None")) and not waits_for_gpus(job("SUSPENDED", "Resources"))


def test_a_begin_time_job_is_demand_only_when_it_is_eligible_soon():
    # a requeued job waits about two minutes under BeginTime: the same demand; one submitted --begin for an hour
    # later is not; without its eligible time (or N/A) it is not
    j, now = job("PENDING", "BeginTime"), 1_000_000.0
    assert waits_for_gpus(j, now + 120, now) and waits_for_gpus(j, now - 5, now)
    assert not waits_for_gpus(j, now + 3600, now) and not waits_for_gpus(j, float("nan"), now)
    assert not waits_for_gpus(j, None, now)


def test_a_time_limit_is_read_and_none_is_not_zero():
    """squeue %l: a TimeLimit in %M's form is seconds; UNLIMITED or NOT_SET is no limit (NaN), never 0, which
    would tell the start estimate the job ends now."""
    import math

    from daemon.actuators.slurm.actuator import parse_squeue, parse_time_limit

    assert parse_time_limit("1-02:00:00") == 93600.0 and parse_time_limit("10:00") == 600.0
    assert all(math.isnan(parse_time_limit(t)) for t in ("UNLIMITED", "NOT_SET", "", "INFINITE"))
    line = "7|acct|p|normal|RUNNING|gn1|5:00|gres/gpu:2|None|2026-12-06T02:00:00|(null)|1|2026-12-06T02:00:00|"
    assert parse_squeue(line + "30:00")[0].time_limit_s == 1800.0
    assert math.isnan(parse_squeue(line + "UNLIMITED")[0].time_limit_s)


def test_squeue_output_that_is_not_its_lines_is_an_error_never_no_jobs():
    """A line of squeue's output that is not SQUEUE_FMT's (a wrapper's message on stdout, a cut line, a field of the
    wrong kind) is a SlurmError naming the line: it was skipped, so output that was all garbage read as an empty
    queue, and the scheduler's view, which bounds each tenant's demand, capped every tenant's to 0."""
    import subprocess

    from daemon.actuators.slurm.actuator import SlurmActuator, SlurmError, parse_squeue
    from daemon.config import SlurmActuatorConfig, TenantConfig

    good = "7|acct|p|normal|RUNNING|gn1|5:00|gres/gpu:2|None|2026-12-06T02:00:00|(null)|1|2026-12-06T02:00:00|30:00"
    assert [j.job_id for j in parse_squeue(good + "\n\n" + good.replace("7|", "8|", 1))] == ["7", "8"]
    with pytest.raises(SlurmError, match=r"line 1 has 1 fields, not 14 .*'<html><body>Service Unavailable"):
        parse_squeue("<html><body>Service Unavailable</body></html>")
    with pytest.raises(SlurmError, match="line 2 has 5 fields"):
        parse_squeue(good + "\n" + "9|acct|p|normal|RUNN")
    with pytest.raises(SlurmError, match=r"line 1: %M \(elapsed\) is 'soon'"):
        parse_squeue(good.replace("|5:00|", "|soon|"))
    with pytest.raises(SlurmError, match=r"line 1: %l \(time limit\) is 'a while'"):
        parse_squeue(good.replace("|30:00", "|a while"))

    act = SlurmActuator(SlurmActuatorConfig(), [TenantConfig(name="t", slurm_account="acct")], dry_run=True)
    act._run = lambda *args: subprocess.CompletedProcess(args, 0, stdout="slurm wrapper: maintenance at 18:00\n",
                                                         stderr="")
    with pytest.raises(SlurmError, match="line 1 has 1 fields"):
        act.jobs()


def task(jid, state="PENDING", reason="Resources"):
    return SlurmJob(jid, "acct", "p", "normal", state, "", 0.0, 1, reason)


def test_an_arrays_pending_tasks_past_its_throttle_do_not_wait_for_gpus():
    """One rule: of an array run at most N at a time (its line's %N, else squeue --json's), N less its tasks not
    pending wait for GPUs, lowest ids first, its record's and its split-off tasks' together; a split-off task past
    them waits for the array's own tasks (JobArrayTaskLimit), a record's are not made jobs. squeue --json is asked
    only for arrays whose line has no %N (none, or dropped by a task split off: reasons joined by ',') and two
    tasks or more that free GPUs could start; an array with no throttle (0) or none known, and a plain job, are
    left as they are."""
    from daemon.actuators.slurm.squeue import arrays_to_throttle, expand_arrays

    jobs = [task("1_1", "RUNNING", "None"), task("1_[2-4,6-9]"), task("1_5"), task("2_[1-2]"), task("3_[1-2]"),
            task("4"), task("5_[1-2]", reason="Dependency"), task("6_[1-4%3]"), task("7_[1-3]", reason="Priority,None"),
            task("8_[3-9%2]"), task("8_1"), task("9_[1-9]", reason="Resources,JobHeldAdmin"), task("10_[4]")]
    assert arrays_to_throttle(jobs) == ["1", "2", "3", "7", "9"]
    got, cut = expand_arrays(jobs, lambda j: j.account, 100, {"1": 3, "2": 0})
    waiting = sorted((j.job_id for j in got if waits_for_gpus(j)), key=lambda i: [int(x) for x in i.split("_")])
    assert waiting == ["1_2", "1_3", "2_1", "2_2", "3_1", "3_2", "4", "6_1", "6_2", "6_3", "7_1", "7_2", "7_3", "8_1",
                       "8_3", *[f"9_{i}" for i in range(1, 10)], "10_4"], waiting
    assert [(j.job_id, j.reason) for j in got if j.job_id == "1_5"] == [("1_5", "JobArrayTaskLimit")]
    assert cut == {}
    # %1 with its one task running: none of the rest waits for GPUs, whatever the line's reason says (Slurm says
    # JobArrayTaskLimit once its scheduler looks; until then Priority). The old double rule kept the line's first
    # task (%1) and asked squeue --json only of arrays with two tasks or more: 1 task's GPUs of demand
    got, _ = expand_arrays([task("11_1", "RUNNING", "None"), task("11_[2-10%1]", reason="Priority")],
                           lambda j: j.account)
    assert [j.job_id for j in got if waits_for_gpus(j)] == []


def test_a_tenants_bound_is_spent_on_the_tasks_its_throttle_lets_wait_and_not_on_held_ones():
    """The bound on one tenant's tasks made jobs counts the tasks the throttle lets wait for GPUs: an array whose
    line lost its %N (a task split off it) and that squeue --json says runs 3 at once takes 3 of it, not the whole
    bound, and a held array's tasks come after the waiting ones. The old code made jobs of the bound's 20 tasks of
    the first array (then cut them to its %3) and none of the tenant's second array: 3 tasks of demand where 13
    wait; a held array listed first took the bound and left the waiting one none."""
    from daemon.actuators.slurm.squeue import expand_arrays

    got, cut = expand_arrays([task("1_[1-100]", reason="Resources,None"), task("2_[1-10]")], lambda j: j.account,
                             20, {"1": 3})
    assert [j.job_id for j in got] == ["1_1", "1_2", "1_3", *[f"2_{i}" for i in range(1, 11)]] and cut == {}
    got, cut = expand_arrays([task("3_[1-50]", reason="JobHeldUser"), task("4_[1-10]")], lambda j: j.account, 20)
    assert [j.job_id for j in got if waits_for_gpus(j)] == [f"4_{i}" for i in range(1, 11)] and cut == {}
    assert len(got) == 20                                   # the held one's 10 the bound leaves: never more


def test_an_arrays_records_are_split_apart_from_squeue_json():
    """squeue without -r prints a task split off an array's record in the record's line, reasons joined and %N
    dropped (1_[1-10] Resources,JobHeldAdmin: task 5 held, on 22.05). squeue --json lists the records apart: the
    array's own (1-4,6-10%3, Resources) and the task (5, JobHeldAdmin); split_records gives each its line, under the
    line's id for the -O reads. Read as the line, every task was held (no demand) or, its reason read as waiting,
    every task waiting with no throttle."""
    from daemon.actuators.slurm.squeue import by_id, expand_arrays, parse_arrays, split_records

    out = ('{"jobs": [{"job_id": 2, "array_job_id": 1, "array_task_id": null, "array_max_tasks": 3, '
           '"array_task_string": "1-4,6-10%3", "job_state": "PENDING", "state_reason": "Resources"}, '
           '{"job_id": 6, "array_job_id": 1, "array_task_id": 5, "array_max_tasks": 3, "array_task_string": "", '
           '"job_state": ["PENDING"], "state_reason": "JobHeldAdmin"}, '
           '{"job_id": 7, "array_job_id": 1, "array_task_id": 11, "array_max_tasks": 3, "job_state": "RUNNING", '
           '"state_reason": "None"}, {"job_id": 8, "array_job_id": 1, "array_task_id": {"set": false}, '
           '"array_max_tasks": 3, '
           '"array_task_string": "1;rm", "job_state": "PENDING", "state_reason": "Resources"}]}')
    arrays = parse_arrays(out)
    assert arrays["1"].throttle == 3 and arrays["1"].pending == (("1-4,6-10", "Resources"), ("5", "JobHeldAdmin"))
    line = task("1_[1-10]", reason="Resources,JobHeldAdmin")
    split = split_records([task("1_11", "RUNNING", "None"), line, task("9_[1-2]")], arrays)
    assert [(j.job_id, j.reason, j.record) for j in split] == [
        ("1_11", "None", ""), ("1_[1-4,6-10%3]", "Resources", "1_[1-10]"), ("1_5", "JobHeldAdmin", "1_[1-10]"),
        ("9_[1-2]", "Resources", "")]
    got, _ = expand_arrays(split, lambda j: j.account)
    assert [j.job_id for j in got if waits_for_gpus(j)] == ["1_1", "1_2", "9_1", "9_2"]
    assert by_id({"1_[1-10]": 4.0}, got[1]) == 4.0


def test_an_arrays_throttle_is_read_from_squeue_json_never_lower_than_a_record_says():
    """array_max_tasks per record (22.05: a number; later {"set", "number"}): the largest, 0 (no limit) above all,
    so no record can lower another's; output that is not squeue's JSON is one clear error."""
    from daemon.actuators.slurm.squeue import SlurmError, parse_arrays

    out = ('{"jobs": [{"job_id": 1, "array_job_id": 1, "array_max_tasks": 3},'
           ' {"job_id": 7, "array_job_id": 1, "array_max_tasks": 2},'
           ' {"job_id": 2, "array_job_id": 2, "array_max_tasks": 2}, {"job_id": 8, "array_job_id": 2,'
           ' "array_max_tasks": 0}, {"job_id": 3, "array_job_id": {"set": true, "number": 3},'
           ' "array_max_tasks": {"set": true, "number": 5}}, {"job_id": 4, "array_job_id": 0},'
           ' {"job_id": 5, "array_job_id": 5, "array_max_tasks": "x"}, "junk"]}')
    assert {a: r.throttle for a, r in parse_arrays(out).items()} == {"1": 3, "2": 0, "3": 5, "5": 0}
    # (nested past Python's recursion limit, from a broken squeue or a wrapper: a RecursionError escaped the view's
    # fallback, every pending task counted with a warning, and failed the whole cycle's read)
    for bad in ("squeue: error: x", "[]", '{"jobs": 3}', "[" * 100_000, '{"jobs": [' + '{"a":' * 100_000):
        with pytest.raises(SlurmError, match="squeue --json: not a list of jobs"):
            parse_arrays(bad)


def test_an_arrays_record_is_its_tasks_lowest_first_up_to_its_throttle_and_a_bound_per_tenant():
    """squeue without -r prints an array's pending tasks as one record (1_[3-5,8%2]): expand_arrays makes a job of
    each, as -r printed them, but never more than what Slurm starts at once (%N) nor, of one tenant's records
    together, more than the bound: an --array=0-3999999 is 10 jobs here, made at once (no 4*10^6-line read), and
    another tenant's array is read whole. Brackets squeue never prints (a cut line, a reversed range) leave the
    record as one job or none."""
    from daemon.actuators.slurm.squeue import by_id, expand_arrays

    jobs = [task("1_[3-5,8%2]"), task("2_[0-3999999]"), task("3_[0,4,8-9]"), task("4_[1-3]"),
            dataclasses.replace(task("5_[2-4]"), account="other"), task("6"), task("7_[9-3]"), task("8_[1-3"),
            dataclasses.replace(task(f"9_[0-{10**20}]"), account="third")]
    got, cut = expand_arrays(jobs, lambda j: j.account, limit=10)
    ids = [j.job_id for j in got]
    assert ids == ["1_3", "1_4", *[f"2_{i}" for i in range(8)], "5_2", "5_3", "5_4", "6", "8_[1-3",
                   *[f"9_{i}" for i in range(10)]], ids
    assert cut == {"2_[0-3999999]": 3999992, "3_[0,4,8-9]": 4, "4_[1-3]": 3, f"9_[0-{10**20}]": 10**20 + 1 - 10}
    assert {j.record for j in got if j.job_id.startswith("2_")} == {"2_[0-3999999]"}
    assert by_id({"2_[0-3999999]": 7.0}, got[2]) == 7.0 and by_id({}, got[2], "x") == "x"


def _many_arrays_actuator(tmp_path, arrays: int, on_json: str, **cfg):
    """A SlurmActuator over a squeue script printing `arrays` pending arrays of two tasks of account acct (tenant t),
    running `on_json` for --json."""
    import os

    from daemon.actuators.slurm.actuator import SlurmActuator
    from daemon.config import SlurmActuatorConfig, TenantConfig

    lines = "".join(f"{100000 + i}_[1-2]|acct|p|normal|PENDING||0:00|gres:gpu:1|Priority|2026-12-06T02:00:00|(null)|1"
                    f"|N/A|UNLIMITED\n" for i in range(arrays))
    (tmp_path / "jobs.txt").write_text(lines)
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\ncase \"$*\" in\n  *--json*) {on_json} ;;\n  *-O*) ;;\n"
                      f"  *) cat {tmp_path}/jobs.txt ;;\nesac\n")
    os.chmod(squeue, 0o755)
    return SlurmActuator(SlurmActuatorConfig(bin_dir=tmp_path, max_array_tasks=100, **cfg),
                         [TenantConfig(name="t", slurm_account="acct")], dry_run=True)


def test_a_tenants_many_arrays_do_not_overflow_the_json_reads_command_line(tmp_path):
    """squeue --json -j names the arrays whose throttle the view reads, in one argument, which Linux caps at 128 KiB:
    a tenant's 20,000 pending arrays of two tasks (MaxJobCount raised, as a 100,000-GPU cluster's is) made the exec
    fail (OSError E2BIG) and with it every tenant's view, each cycle. Past the cap every job's JSON is read (what
    22.05 prints whatever -j names); squeue here is a script printing those lines."""
    act = _many_arrays_actuator(tmp_path, 20_000, "echo '{\"jobs\": []}'")
    js = act.cluster_jobs(("t",))
    assert len(js.ids) == 100 and list(js.ids[:3]) == ["100000_1", "100000_2", "100001_1"]


def test_a_tenants_many_arrays_past_the_bound_are_a_few_lines_of_warning_not_one_each(tmp_path, caplog):
    """Each array record line the bound leaves out (max_array_tasks) was a warning of its own, once: a tenant's
    5,000 pending arrays past the bound were 4,950 lines in the first cycle's log (10^5 arrays: 10^5 lines). Now the
    first five are named and the rest counted in one line."""
    import logging

    act = _many_arrays_actuator(tmp_path, 5_000, "echo '{\"jobs\": []}'")
    with caplog.at_level(logging.WARNING, logger="gpu_autoscaler.actuator.slurm"):
        assert len(act.cluster_jobs(("t",)).ids) == 100
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 6, len(said)
        assert said[0].startswith("job array 100050_[1-2]: 2 of its pending tasks are not read")
        assert said[-1].startswith("4945 more job arrays: 9890 of their pending tasks are not read")
        caplog.clear()
        act.cluster_jobs(("t",))
        assert caplog.records == []   # once


def test_a_json_read_that_times_out_is_one_short_line_not_its_command_line(tmp_path, caplog):
    """squeue --json -j names up to 100,000 characters of array ids; when it timed out, the warning quoted
    TimeoutExpired's text, the whole command line, every cycle. Now it names the command, cut, and the timeout."""
    import logging

    act = _many_arrays_actuator(tmp_path, 14_000, "exec sleep 30", timeout_s=0.5)
    with caplog.at_level(logging.WARNING):
        js = act.cluster_jobs(("t",))
    assert len(js.ids) == 100
    said = [r.getMessage() for r in caplog.records if "throttles" in r.getMessage()]
    assert len(said) == 1 and "timed out after 0.5 seconds" in said[0] and len(said[0]) < 1_000, said


def test_squeue_json_read_in_pieces_is_the_same_records_and_errors():
    """parse_arrays over the command's pipe, a piece at a time (each job's record decoded alone), gives what the
    whole text gives, wherever the pieces are cut (mid-number, mid-string, mid-key), and the same one error."""
    from daemon.actuators.slurm.squeue import ArrayRecords, SlurmError, parse_arrays

    out = ('{"meta": {"plugin": {"name": "x"}}, "errors": [], "jobs": [{"job_id": 1, "array_job_id": 12345, '
           '"array_max_tasks": 3, "job_state": "PENDING", "array_task_string": "4-10%3", "state_reason": "Priority"}'
           ', {"job_id": 7, "array_job_id": 12345, "array_max_tasks": 2, "job_state": "PENDING", "array_task_id": '
           '3, "state_reason": "JobHeldUser"}, {"job_id": 8, "array_job_id": {"set": true, "number": 99}, '
           '"array_max_tasks": {"set": true, "number": 10}, "job_state": ["RUNNING"]}, "junk"]}\n')
    whole = parse_arrays(out)
    assert whole == {"12345": ArrayRecords(3, (("4-10", "Priority"), ("3", "JobHeldUser"))), "99": ArrayRecords(10)}
    for size in (1, 2, 3, 7, 64):
        assert parse_arrays(out[i:i + size] for i in range(0, len(out), size)) == whole, size
    assert parse_arrays(iter(['{"jobs": []}'])) == {} and parse_arrays(iter(['{"jobs"', ': [', ']}'])) == {}
    for bad in ('{"jobs": [{"a": 1}', '{"jobs": [1 2]}', '{"meta": {}}', "", '{"jobs": [' + '{"a":' * 100_000):
        with pytest.raises(SlurmError, match="squeue --json: not a list of jobs"):
            parse_arrays(bad[i:i + 5] for i in range(0, len(bad), 5))


def test_a_number_cut_at_a_pieces_end_is_read_whole_at_the_objects_top():
    """A bare number beside the jobs (a timestamp or count a Slurm version prints at the top) cut at the end of one
    of the pipe's pieces goes on in the next: read at the cut, "12" of 12345 was a whole value, and the next piece's
    "345" failed the whole read (every tenant's jobs)."""
    from daemon.actuators.slurm.json_stream import array_items

    text = '{"last_update": 1765000000, "jobs": [678, 9, {"a": 1}], "n": 2}'
    for size in range(1, len(text) + 1):
        assert list(array_items((text[i:i + size] for i in range(0, len(text), size)), "jobs")) == [
            678, 9, {"a": 1}], size


def test_one_record_past_the_bound_is_an_error_not_held():
    """One item (a job's record) longer than max_item characters is not squeue's output: an error naming it, before
    more of it is held (a tenant's job comment or name is text it gives). One under the bound is read."""
    from daemon.actuators.slurm.json_stream import array_items

    def items(comment: int):
        text = '{"jobs": [{"comment": "' + "x" * comment + '"}]}'
        return list(array_items((text[i:i + 7] for i in range(0, len(text), 7)), "jobs", max_item=1000))
    assert items(900) == [{"comment": "x" * 900}]
    with pytest.raises(ValueError, match="an item past 1000 characters"):
        items(1500)


def test_a_tenants_many_arrays_json_is_read_as_it_comes_not_held_whole(tmp_path):
    """squeue --json prints ~3 KB per job (22.05: every job's, whatever -j names), and the view held all of it, the
    text and its parsed objects: 1.05 GiB peak RSS for one read with a tenant's 10^5 pending arrays (0.2 without the
    JSON). Now each record is decoded as it comes and dropped: what the read holds beyond the view without the JSON
    stays a fraction of the text (here 4,000 records of 4 KB, measured with tracemalloc: not a timing)."""
    import json
    import tracemalloc

    rec = {"account": "acct", "array_max_tasks": 0, "array_task_id": None, "array_task_string": "1-2",
           "job_state": "PENDING", "state_reason": "Priority", "command": "x" * 4000}
    text = json.dumps({"meta": {}, "errors": [], "jobs": [{**rec, "job_id": i, "array_job_id": 100000 + i}
                                                           for i in range(4000)]})
    (tmp_path / "jobs.json").write_text(text)

    def peak(on_json: str) -> int:
        act = _many_arrays_actuator(tmp_path, 4000, on_json)
        tracemalloc.start()
        try:
            assert len(act.cluster_jobs(("t",)).ids) == 100
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    extra = peak(f"cat {tmp_path}/jobs.json") - peak("echo '{\"jobs\": []}'")
    assert extra < len(text) / 4, (extra, len(text))


def test_a_record_with_a_large_string_over_many_pieces_is_read_in_linear_work(monkeypatch):
    """A job's record with a large string (its comment or name: a tenant sets them) over many of the pipe's pieces:
    the hand-written reader decoded the record again from its start after each piece (json's raw_decode: 64 MiB in
    256 KiB pieces, 256 decodes of up to 64 MiB), and yajl too lexes a token cut at a piece's end again from its
    start with the next piece. Counted, not timed: the text the parser is handed from the record's start, summed over
    each time it is handed more (what it may read again), stays within a few times the record, not pieces times it."""
    import json

    from daemon.actuators.slurm import squeue
    from daemon.actuators.slurm.squeue import ArrayRecords, parse_arrays

    text = '{"jobs": [{"array_job_id": 7, "array_max_tasks": 2, "comment": "' + "x" * (1 << 20) + '"}]}'
    scanned: list[int] = []
    decode = json.JSONDecoder.raw_decode

    def raw_decode(self, s, idx=0):   # the hand-written reader (json_stream): from the record's start each time
        scanned.append(len(s) - idx)
        return decode(self, s, idx)

    monkeypatch.setattr(json.JSONDecoder, "raw_decode", raw_decode)
    backend = getattr(squeue, "IJSON", None)

    class Counted:   # ijson: each piece handed to yajl, which may lex again from the record's start
        def __init__(self, coro):
            self.coro, self.sent = coro, 0

        def send(self, data):
            self.sent += len(data)
            scanned.append(self.sent)
            self.coro.send(data)

        def close(self):
            self.coro.close()

    class Counting:
        def __getattr__(self, name):
            return getattr(backend, name)

        def basic_parse_basecoro(self, target, **kw):
            return Counted(backend.basic_parse_basecoro(target, **kw))

    if backend is not None:
        monkeypatch.setattr(squeue, "IJSON", Counting())
    pieces = [text[i:i + 4096] for i in range(0, len(text), 4096)]
    assert parse_arrays(pieces) == {"7": ArrayRecords(2)}
    assert sum(scanned) < 4 * len(text), (sum(scanned), len(text), len(scanned), len(pieces))


def test_bytes_that_are_not_utf8_in_a_tenants_job_do_not_blind_the_view(tmp_path):
    """A tenant sets its job's comment or name (sbatch --comment, -J); where squeue prints those bytes as given, one
    byte that is not UTF-8 made the strict decode of its whole output raise, for every tenant's jobs, in the lines and
    in --json (where the arrays' throttles are read). Read with the byte replaced, the other jobs are as they were.
    squeue here is a script printing such bytes (whether 22.05 passes them through is not what is tested)."""
    act = _many_arrays_actuator(tmp_path, 2, f"cat {tmp_path}/jobs.json")
    lines = (tmp_path / "jobs.txt").read_bytes().replace(b"|(null)|", b"|bad \xff\xfe comment|", 1)
    lines += b"7|acct|p|normal|RUNNING|gn1|5:00|gres/gpu:2|None|2026-12-06T02:00:00|x\xc3|1|N/A|UNLIMITED\n"
    (tmp_path / "jobs.txt").write_bytes(lines)
    (tmp_path / "jobs.json").write_bytes(
        b'{"jobs": [{"job_id": 100000, "array_job_id": 100000, "array_task_id": null, "name": "n\xff",'
        b' "array_max_tasks": 1, "job_state": "PENDING", "account": "acct"}]}')
    js = act.cluster_jobs(("t",))
    assert "7" in list(js.ids) and sum(1 for i in js.ids if str(i).startswith("10000")) >= 2
