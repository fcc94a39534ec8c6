"""Training's torch threads follow the CPUs left idle (issue 37, item 7): on a busy 2-core box two intra-op threads
made each LSTM batch 7 times slower than one."""

import pytest

from daemon.forecasting.retrain import train_threads


@pytest.mark.parametrize("cpus, load, want", [
    (2, 0.0, 2),     # a quiet 2-core box: both cores, as before
    (2, 0.6, 1),     # one core already busy
    (2, 15.0, 1),    # the shared box: one thread, never 0
    (16, 0.0, 4),    # at most 4, as before
    (16, 13.7, 2),
    (1, 0.0, 1),
])
def test_training_threads_are_the_idle_cpus_from_1_to_4(cpus, load, want):
    assert train_threads(cpus, load) == want


def test_with_no_arguments_it_reads_this_box():
    assert 1 <= train_threads() <= 4
