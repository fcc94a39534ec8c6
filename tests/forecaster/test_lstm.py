"""The LSTM's learned anchor mix (LSTMSpec.anchors): old checkpoints unchanged, noisy series smoothed."""


import numpy as np
import pandas as pd
import torch

from forecaster import registry
from forecaster.baselines import Naive
from forecaster.lstm import MIX_GAIN, LSTMForecaster, LSTMSpec, QuantileLSTM, make_windows
from forecaster.metrics import weighted_quantile_loss
from forecaster.series import calendar_features
from forecaster.train import train
from tests.conftest import REPO

SPEC = LSTMSpec(context=24, horizon=6, season=48, hidden=16, step_s=60, anchor="last", anchors=(3, 6, 12, 24))


def noisy_frame(n_tenants=4, steps=48 * 10, seed=0):
    """Request counts: Poisson around a slowly moving level. The last value is a poor guess; a mean is a good one."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
    cols = {f"t{i}": rng.poisson(20 * (i + 1) * (1 + 0.2 * np.sin(2 * np.pi * t / 48 + i))).astype(float)
            for i in range(n_tenants)}
    return pd.DataFrame(cols, index=idx).rename_axis(columns="tenant")


def test_specs_saved_before_anchors_load_without_them():
    d = SPEC.to_dict()
    assert LSTMSpec.from_dict(d) == SPEC
    del d["anchors"]
    old = LSTMSpec.from_dict(d)
    assert old.anchors == ()
    # a model without anchors has exactly the parameters it had before they existed
    assert set(QuantileLSTM(old).state_dict()) == {"encoder.weight_ih_l0", "encoder.weight_hh_l0", "encoder.bias_ih_l0",
                                                   "encoder.bias_hh_l0", "head.0.weight", "head.0.bias",
                                                   "head.2.weight", "head.2.bias"}


def test_shipped_model_still_loads():
    model = registry.load_current(REPO / "models")
    assert model.spec.anchors == ()


def test_untrained_anchored_model_forecasts_its_initial_mix():
    f = noisy_frame(steps=48 * 3)
    values = f.to_numpy(dtype=float)
    origins = np.array([len(f) - 1] * f.shape[1])
    x, lag, cal0, last, scale = make_windows(values, calendar_features(f.index), origins, np.arange(f.shape[1]), SPEC)
    assert lag.shape == (f.shape[1], SPEC.horizon + 1)  # the origin's season-ago value comes first
    model = QuantileLSTM(SPEC)
    torch.nn.init.zeros_(model.head[-1].weight)
    torch.nn.init.zeros_(model.head[-1].bias)
    with torch.no_grad():
        med = model(*(torch.from_numpy(a) for a in (x, lag, cal0, last)))[:, :, 0].numpy()
    v = x[:, :, 0]
    cands = [last[:, 0]] + [v[:, -k:].mean(axis=1) for k in SPEC.anchors]
    w = np.exp([2.0] + [0.0] * (len(SPEC.anchors) + 2))
    w /= w.sum()
    h = 0
    expect = (sum(wi * c for wi, c in zip(w, cands)) + w[-2] * lag[:, 1 + h]
              + w[-1] * (last[:, 0] + lag[:, 1 + h] - lag[:, 0]))
    assert np.allclose(med[:, h], expect, atol=1e-5)


def test_anchored_lstm_smooths_a_noisy_series_better_than_the_last_value():
    f = noisy_frame()
    cut = len(f) - 48
    res = train(f.iloc[:cut], SPEC, epochs=4, samples_per_epoch=2048, batch_size=128, seed=0, progress=False,
                zero_init=True)
    lstm, naive = LSTMForecaster(res.model, "t"), Naive(SPEC.quantiles)
    actual, pl, pn = [], [], []
    for o in range(cut, len(f) - SPEC.horizon + 1, SPEC.horizon):
        hist = f.iloc[:o]
        actual.append(f.iloc[o:o + SPEC.horizon].to_numpy().T)
        pl.append(lstm.predict(hist, SPEC.horizon).values)
        pn.append(naive.predict(hist, SPEC.horizon).values)
    a = np.stack(actual)
    wl = weighted_quantile_loss(np.stack(pl), a, SPEC.quantiles)
    wn = weighted_quantile_loss(np.stack(pn), a, SPEC.quantiles)
    assert wl < 0.85 * wn, (wl, wn)
    # the mix learned to lean on the window means rather than on the noisy last value
    w = torch.softmax(MIX_GAIN * res.model.mix, dim=1).detach().numpy()
    assert (w[:, 1:1 + len(SPEC.anchors)].sum(axis=1) > w[:, 0]).all(), w


def test_predict_runs_a_large_fleet_in_chunks_with_the_numbers_of_one_batch():
    """Above `predict_chunk` tenants the forward runs in chunks (one batch of 10,000 windows was slower than
    linear); below it, one batch as before. Chunked and unchunked differ only by float32 rounding."""
    spec = LSTMSpec(context=24, horizon=6, season=48, hidden=64, step_s=60, anchor="last", anchors=(3, 6, 12),
                    peak_windows=(3, 6))
    torch.manual_seed(3)
    net = QuantileLSTM(spec)
    with torch.no_grad():
        for prm in net.parameters():                  # a random model: the zero-initialised heads too
            prm.normal_(0.0, 0.3)
    lstm = LSTMForecaster(net, "rand")
    hist = noisy_frame(n_tenants=5000, steps=120, seed=4)
    batches: list[int] = []
    inner = net.forward_all
    net.forward_all = lambda x, *a: batches.append(len(x)) or inner(x, *a)
    chunked = lstm.predict(hist, 6)
    assert batches == [2048, 2048, 904]
    lstm.predict_chunk = 10**9
    whole = lstm.predict(hist, 6)
    assert batches[3:] == [5000]
    np.testing.assert_allclose(chunked.values, whole.values, rtol=1e-5, atol=1e-6)
    assert chunked.peaks.keys() == whole.peaks.keys()
    for k in whole.peaks:
        np.testing.assert_allclose(chunked.peaks[k], whole.peaks[k], rtol=1e-5, atol=1e-6)
    small = hist.iloc[:, :2048]                       # up to the chunk size: one batch, bit-identical
    lstm.predict_chunk = 2048
    a = lstm.predict(small, 6).values
    lstm.predict_chunk = 10**9
    b = lstm.predict(small, 6).values
    assert batches[-2:] == [2048, 2048] and np.array_equal(a, b)
