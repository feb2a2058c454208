"""sd_reference checkpoints without Ray: background saves hold the state of their step; preemption plumbing."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from pathlib import Path

import torch

from sd_reference import checkpoint, preemption
from sd_reference.ema import EMA
from sd_reference.saver import Control


def _model_state() -> tuple[torch.nn.Module, torch.optim.Optimizer, EMA]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    ema = EMA(list(model.named_parameters()))
    return model, optimizer, ema


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema: EMA) -> None:
    model(torch.randn(4, 8)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    ema.update(list(model.named_parameters()), 0.5)


def test_background_save_holds_the_state_of_its_step(tmp_path: Path) -> None:
    model, optimizer, ema = _model_state()
    _step(model, optimizer, ema)
    at_save = checkpoint.fingerprint(model, optimizer, ema)
    future = checkpoint.start_save(tmp_path / "ckpt", model, optimizer, ema)
    for _ in range(3):  # training goes on while the write runs: it must not leak into the checkpoint
        _step(model, optimizer, ema)
    future.result(timeout=120)
    checkpoint.write_train_state(tmp_path / "ckpt", {"step": 1})
    assert checkpoint.fingerprint(model, optimizer, ema) != at_save
    fresh = _model_state()
    _step(*fresh)  # AdamW state exists, with other values, before the load
    state = checkpoint.load(tmp_path / "ckpt", *fresh)
    assert state == {"step": 1} and checkpoint.fingerprint(*fresh) == at_save
    assert checkpoint.is_complete(str(tmp_path / "ckpt")) and checkpoint.find(str(tmp_path)) == []  # not step_*


def test_find_latest_complete_checkpoint(tmp_path: Path) -> None:
    for step, complete in ((2, True), (4, True), (6, False)):
        d = tmp_path / checkpoint.dir_name(step)
        d.mkdir()
        (d / ".metadata").write_bytes(b"x")
        if complete:
            checkpoint.write_train_state(d, {"step": step})
    assert checkpoint.latest(str(tmp_path)) == str(tmp_path / "step_00000004")
    assert checkpoint.read_train_state(checkpoint.latest(str(tmp_path))) == {"step": 4}


def test_control_without_a_process_group() -> None:
    control = Control()
    assert control.group is None
    assert control.exchange(sigterm=False, saved=True) == (False, True)
    assert control.exchange(sigterm=True, saved=False) == (True, False)


def _train_fn(config: dict[str, int]) -> None:
    config["called"] = 1


def test_sigterm_sets_a_flag_where_the_train_function_is_unpickled() -> None:
    """Unpickling SigtermAware (Ray Train does it on the worker's main thread) installs the handler."""
    previous = signal.getsignal(signal.SIGTERM)
    exits: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: exits.append(signum))  # stands in for Ray's (exit)
    try:
        fn = pickle.loads(pickle.dumps(preemption.SigtermAware(_train_fn)))
        config: dict[str, int] = {}
        fn(config)
        assert config == {"called": 1} and not preemption.requested()
        threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM)).start()
        for _ in range(200):  # the handler runs on the main thread between bytecodes
            if preemption.requested() or exits:
                break
            time.sleep(0.01)
        assert preemption.requested() and exits == []  # a flag, not an exit
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM: the previous handler (exit) runs
        for _ in range(200):
            if exits:
                break
            time.sleep(0.01)
        assert exits == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
        preemption._received.clear()
