"""forecaster.torch_threads sizes torch's intra-op pool when the runtime loads a torch model."""

import torch

from daemon.config import Config
from daemon.runtime import build_runtime


def test_runtime_sets_torch_threads():
    before = torch.get_num_threads()
    try:
        rt = build_runtime(Config(forecaster={"torch_threads": 1}), with_store=False)
        assert torch.get_num_threads() == 1
        rt.close()
        rt = build_runtime(Config(forecaster={"torch_threads": 2}), with_store=False)
        assert torch.get_num_threads() == 2
        rt.close()
    finally:
        torch.set_num_threads(before)
