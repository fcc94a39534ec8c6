"""Every shape of GRES text the Slurm actuator reads, through each reader of it: squeue's GPUs per node, job, task
or socket (parse_gpus, parse_node_gpus: a shard or MPS share is the one GPU it sits on), a node's GPUs (Gres=,
GresUsed=), the GPU types a node has or a job asks, and the GPU-sharing GRES in it. One parser (gres.gres_entries)
is behind all of them; a reader that reads one shape differently from the others, or from Slurm, fails here.

Where the parsers this replaced differed from Slurm (checked on the test slurmctld, 22.05):
- ``gres:gpu`` and ``gres:gpu:a100`` (--gres=gpu, --gres=gpu:a100, --gpus-per-node=a100: squeue prints no count,
  which Slurm takes as 1) were 0 GPUs, and the typed one no type: a job that way was never preempted, pending no
  demand, and on a mixed fleet it accepted any type;
- the tres form ``gres/gpu=2`` / ``gres/gpu:a100=2`` was GPUs to squeue's reader but none, of no type, to the
  type reader;
- ``license/gpu=2`` (a license called gpu) was 2 GPUs to squeue's reader, which searched any ``[:/]gpu[:=]<n>``.
"""

import pytest

from daemon.actuators.slurm import gres
from daemon.actuators.slurm.holds import parse_nodes
from daemon.actuators.slurm.squeue import parse_gpus, parse_node_gpus

# text: (GPUs, GPUs per node with a share's GPU, GPU types, typed shares' types, sharing kinds)
SHAPES = {
    "gres:gpu:2": (2, 2, {"": 2}, [], set()),
    "gres:gpu:a100:4": (4, 4, {"a100": 4}, [], set()),
    "gpu:a100:2(IDX:0-1)": (2, 2, {"a100": 2}, [], set()),
    "gpu:4(S:0-1)": (4, 4, {"": 4}, [], set()),
    "gpu:a100:2(IDX:0,2)": (2, 2, {"a100": 2}, [], set()),
    "gpu:a100:0(IDX:N/A)": (0, 0, {"a100": 0}, [], set()),
    "gres/gpu=2": (2, 2, {"": 2}, [], set()),
    "gres/gpu:a100=2": (2, 2, {"a100": 2}, [], set()),
    "gres:gpu": (1, 1, {"": 1}, [], set()),
    "gres:gpu:a100": (1, 1, {"a100": 1}, [], set()),
    "gpu:1g.10gb:2": (2, 2, {"1g.10gb": 2}, [], set()),
    "gres:shard:2": (0, 1, {}, [], {"shard"}),
    "gres/shard=2": (0, 1, {}, [], {"shard"}),
    "gres:shard:a100:2": (0, 1, {}, ["a100"], {"shard"}),
    "gres:mps:50": (0, 1, {}, [], {"mps"}),
    "gres:mps:t4:50": (0, 1, {}, ["t4"], {"mps"}),
    "gres:shard:0": (0, 0, {}, [], {"shard"}),
    "gpu:a100:4,shard:a100:16(S:0)": (4, 5, {"a100": 4}, ["a100"], {"shard"}),
    "gres:vgpu:8": (0, 0, {}, [], set()),
    "gres:gpu:1,gres:vgpu:2": (1, 1, {"": 1}, [], set()),
    "gres:mygpu:a100:2": (0, 0, {}, [], set()),
    "license/gpu=2": (0, 0, {}, [], set()),
    "gres:gpu:1099511627776": (2 ** 40, 2 ** 40, {"": 2 ** 40}, [], set()),
    "gres:gpu:-1": (0, 0, {}, [], set()),
    "gres:gpu:a100:-2": (0, 0, {}, [], set()),
    "gres:gpu:a100:x": (0, 0, {}, [], set()),
    "gres:shard:a100:x": (0, 0, {}, [], set()),
    "N/A": (0, 0, {}, [], set()),
    "(null)": (0, 0, {}, [], set()),
    "": (0, 0, {}, [], set()),
}


@pytest.mark.parametrize("text", list(SHAPES))
def test_each_reader_reads_a_gres_shape_as_the_others_and_slurm_do(text):
    gpus, node_gpus, types, shared, kinds = SHAPES[text]
    assert parse_gpus(text) == gpus
    assert parse_node_gpus(text) == node_gpus
    assert gres.gres_gpu_types(text) == types
    assert gres.gres_shared_types(text) == shared
    assert gres.gres_shares(text) == kinds
    node, = parse_nodes(f"NodeName=n1 State=IDLE Gres={text or '(null)'} GresUsed={text or '(null)'}")
    assert (node.gpus, node.gpus_used) == (gpus, gpus)


def test_one_parser_reads_each_entry_as_slurm_writes_it():
    """name[:type][:count] or the tres form name[:type]=count, after an optional gres: / gres/, with an optional
    (IDX:..) / (S:..) suffix; a count left out is 1, as Slurm takes it; anything else is no entry."""
    E = gres.GresEntry
    assert gres.gres_entries("gres:gpu:a100:2(IDX:0,1),gres/shard=3,gres:gpu,vgpu:8,gpu:-1,license/gpu=2") == [
        E("gpu", "a100", 2), E("shard", "", 3), E("gpu", "", 1), E("vgpu", "", 8)]
