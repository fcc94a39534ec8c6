"""The replay's hold-flap counter (daemon/sim/flaps.py) on hand-made hold sequences."""

from daemon.sim.flaps import FlapCounter


def _count(seq, window=3):
    c = FlapCounter(window_steps=window)
    for k, holds in enumerate(seq):
        c.observe(k, holds)
    return c.changes, c.flaps


def test_a_hold_that_shrinks_and_grows_back_within_the_window_is_a_flap_each_reversal():
    # 152 -> 144 -> 152 -> 144: three moves, each after the first reverses the one before
    assert _count([{"a": 152}, {"a": 144}, {"a": 152}, {"a": 144}]) == (3, 2)


def test_moves_the_same_way_and_reversals_after_the_window_are_not_flaps():
    assert _count([{"a": 8}, {"a": 16}, {"a": 24}, {"a": 32}]) == (3, 0)
    # down at step 1, back up at step 5: 4 steps later, past a window of 3
    assert _count([{"a": 16}, {"a": 8}, {"a": 8}, {"a": 8}, {"a": 8}, {"a": 16}]) == (2, 0)


def test_a_tenant_that_appears_or_drops_out_moves_from_or_to_zero_and_tenants_are_counted_apart():
    seq = [{"a": 8}, {"a": 8, "b": 4}, {"a": 16}, {"a": 8, "b": 4}]
    # b: 0 -> 4 -> 0 -> 4 (two flaps); a: 8 -> 16 -> 8 (one flap)
    assert _count(seq) == (5, 3)


def test_the_first_observation_only_sets_the_start():
    assert _count([{"a": 100}]) == (0, 0)
    assert _count([{"a": 100}, {"a": 100}]) == (0, 0)
