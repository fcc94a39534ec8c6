"""Jobs.concat: jobs from two sources (pods, and Kueue's waiting Workloads) joined without inventing facts."""

import math

import numpy as np

from daemon.policy.state import Jobs


def jobs(ids, *, accepts=None, idle=None, limit=None):
    n = len(ids)
    return Jobs(np.array(ids, dtype=object), np.zeros(n, dtype=np.int64), np.full(n, 2), np.zeros(n, dtype=np.int8),
                np.zeros(n, dtype=bool), np.zeros(n), np.zeros(n), np.array([""] * n, dtype=object),
                accepts=accepts, idle=idle, time_limit_s=limit)


def test_a_column_one_part_lacks_is_filled_with_unknown_and_one_none_lacks_stays_none():
    acc = np.empty(1, dtype=object)
    acc[:] = [("a100",)]
    a = jobs(["p"], accepts=acc, idle=np.array([True]), limit=np.array([600.0]))
    b = jobs(["w1", "w2"])
    out = Jobs.concat([a, b])
    assert out.ids.tolist() == ["p", "w1", "w2"] and out.gpus.tolist() == [2, 2, 2]
    assert out.accepts.tolist() == [("a100",), (), ()]          # the second source said nothing: any type
    assert out.idle.tolist() == [True, False, False]              # unknown is busy
    assert out.time_limit_s[0] == 600.0 and all(math.isnan(v) for v in out.time_limit_s[1:])
    both = Jobs.concat([b, jobs(["w3"])])
    assert both.accepts is None and both.idle is None and both.time_limit_s is None


def test_no_parts_is_no_jobs():
    assert len(Jobs.concat([])) == 0
