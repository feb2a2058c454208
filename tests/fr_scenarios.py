"""One gloo rank of a stuck training shape, run as a script: `python fr_scenarios.py SCENARIO RANK OUT_DIR`.

Each scenario is written as its users write it (torch.distributed's own APIs). When every
rank of the world sits still (its main thread's innermost frame unchanged for a second, and
every other rank saying the same), each rank writes `OUT_DIR/rank<N>.json`: its full Flight
Recorder dump (what torch's `fr_trace` reads), plus what raydbg's stacks thread would send:
its process-group table and its send/recv peers (raydbg/_torch_internals/). Then it exits.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["TORCH_FR_BUFFER_SIZE"] = "200"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from raydbg import _torch_internals  # noqa: E402

WORLD = 4
STUCK_S = 300  # the stuck rank's sleep: far longer than the test (it exits once dumped)


def stuck() -> None:
    """The rank that never gets there (a data loader, a bad host): the others wait for it."""
    time.sleep(STUCK_S)


def tensor_parallel(rank: int) -> None:
    """Tensor-parallel-style subgroups {0,1} and {2,3}: rank 3 stuck before its subgroup's
    all_reduce; rank 2 waits in it; ranks 0 and 1 go on to the next world all_reduce."""
    tp = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 3:
        stuck()
    dist.all_reduce(t, group=tp)
    dist.all_reduce(t)


def hsdp(rank: int) -> None:
    """HSDP on a 2x2 mesh (replicate x shard): reduce-scatter in the shard group, all-reduce in
    the replicate group; rank 3 stuck before its reduce-scatter."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    grad, shard = torch.ones(4), torch.empty(2)
    if rank == 3:
        stuck()
    dist.reduce_scatter_single(shard, grad, group=mesh.get_group("shard"))
    dist.all_reduce(shard, group=mesh.get_group("replicate"))


def deadlock(rank: int) -> None:
    """Two groups entered in opposite orders: rank 0 enters {0,1} then the world, rank 1 the
    world then {0,1}; ranks 2 and 3 only the world."""
    pair = dist.new_group([0, 1])
    t = torch.ones(4)
    if rank == 0:
        dist.all_reduce(t, group=pair)
    dist.all_reduce(t)
    if rank == 1:
        dist.all_reduce(t, group=pair)


def pipeline(rank: int) -> None:
    """A 4-stage pipeline: activations forward with send/recv, gradients back; stage 2 stuck
    before it receives step 1's activations."""
    act, grad = torch.ones(4), torch.ones(4)
    dist.all_reduce(act)
    for step in range(2):
        if rank > 0:
            if rank == 2 and step == 1:
                stuck()
            dist.recv(act, src=rank - 1)
        if rank < WORLD - 1:
            dist.send(act, dst=rank + 1)
            dist.recv(grad, src=rank + 1)
        if rank > 0:
            dist.send(grad, dst=rank - 1)


SCENARIOS = {"tensor_parallel": tensor_parallel, "hsdp": hsdp, "deadlock": deadlock, "pipeline": pipeline}


def _top(main: int) -> tuple[str, int] | None:
    frame = sys._current_frames().get(main)
    return None if frame is None else (frame.f_code.co_name, frame.f_lineno)


# Where a rank of these scenarios ends up: stuck, in the op it waits in, or done.
_RESTING = {"stuck", "main", "all_reduce", "reduce_scatter_single", "send", "recv"}


def _dump_when_still(rank: int, out: Path, main: int) -> None:
    """Wait until every rank's main thread sits still where a scenario ends, then dump; leave
    once all have dumped (an exit would close the others' gloo connections)."""
    last, since = _top(main), time.monotonic()
    while True:
        time.sleep(0.2)
        now = _top(main)
        if now != last or now is None or now[0] not in _RESTING:
            last, since = now, time.monotonic()
            (out / f"still{rank}").unlink(missing_ok=True)
        elif time.monotonic() - since > 1.5:
            (out / f"still{rank}").touch()
            if all((out / f"still{r}").exists() for r in range(WORLD)):
                break
    dump = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, True))
    dump.update(rank=rank, process_groups=_torch_internals.process_groups(),
                p2p_waits=_torch_internals.p2p_waits())
    tmp = out / f"rank{rank}.part"
    tmp.write_text(json.dumps(dump))
    tmp.rename(out / f"rank{rank}.json")
    while not all((out / f"rank{r}.json").exists() for r in range(WORLD)):
        time.sleep(0.05)
    os._exit(0)


def main() -> None:
    scenario, rank, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    # A file rendezvous: a port chosen by the test could be taken before rank 0 binds it (a
    # Ray cluster of the other half of `make test` starting), and the others then wait forever.
    dist.init_process_group("gloo", init_method=f"file://{out / 'store'}", rank=rank, world_size=WORLD)
    threading.Thread(target=_dump_when_still, args=(rank, out, threading.get_ident()), daemon=True).start()
    SCENARIOS[scenario](rank)
    time.sleep(STUCK_S)  # a rank that got through waits here (still) until the dump


if __name__ == "__main__":
    main()
