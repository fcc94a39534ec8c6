"""retrain's promotion line names the figure it ranked by so that a reader can find it in the table it printed."""

import re

from daemon.forecasting.choose import cluster_id
from daemon.forecasting.retrain import retrain_on
from tests.forecasting.test_retrain import random_walks, small_cfg


def test_the_peak_loss_in_the_line_is_said_to_be_the_mean_of_the_tables_loss_columns(tmp_path):
    """Before: 'scored best on ... (peak loss: lstm_blend+peak_all 0.0253, ...)' beside a table whose peak columns
    were 'lead10 loss' 0.0238 and 'preempt3 loss' 0.0269: no column held the figure the line ranked by."""
    cfg = small_cfg()
    out = retrain_on(random_walks(), cfg, model_dir=tmp_path, step_s=60, samples_per_epoch=128, epochs=1,
                     progress=False, scored_on=cluster_id(cfg), with_ets=False, select_by="peak")
    windows = [f"{w}{k}" for w, k in out.report["peak_windows"].items()]   # the table's heads: lead10 ...
    assert len(windows) == 2 and all(f"{w} loss" in out.table for w in windows), (windows, out.table[:300])
    said = f"peak loss, the mean of the {windows[0]} and {windows[1]} loss columns: "
    assert said in out.message, out.message
    name, value = re.search(re.escape(said) + r"(\S+) ([0-9.]+)", out.message).groups()
    peak = out.report["models"][name]["peak"]
    losses = [peak[w]["loss"] for w in out.report["peak_windows"]]
    assert abs(float(value) - sum(losses) / 2) < 1e-4
