"""sd_reference's SD2 training features on CPU, without Ray: each against a reference computation.

Gradient accumulation (one process; FSDP2 and DDP on two gloo ranks), gradient
checkpointing, the AdamW implementations, the foreach EMA, the loss read-back
window, FLOPs and MFU, validation loss and the sample grid.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sd_reference import flops, optim, parallel
from sd_reference.config import TrainConfig
from sd_reference.ema import EMA
from sd_reference.metrics import Timer
from sd_reference.models import ComponentsSpec
from sd_reference.presets import get_preset
from sd_reference.step_stats import StatsWindow
from sd_reference.train_loop import Worker


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread: the 2 shared cores make multi-threaded CPU steps erratic."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _spec(tmp: Path) -> ComponentsSpec:
    """The tiny preset's UNet; offline batches need no frozen components on disk."""
    preset = get_preset("tiny")
    return ComponentsSpec(str(tmp), "tiny", preset.resolution, preset.unet)


def _batch(rows: int, seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"latents": torch.randn(rows, 4, 8, 8, generator=gen), "text_emb": torch.randn(rows, 77, 32, generator=gen)}


def _worker(tmp: Path, **overrides: Any) -> Worker:
    np.save(tmp / "uncond.npy", np.zeros((77, 32), np.float32))
    cfg = dict(batch_size=2, lr=1e-3, warmup_steps=0, ema_decay=0.9, grad_clip=1e9, use_gpu=False)
    return Worker(TrainConfig(**{**cfg, **overrides}), _spec(tmp), str(tmp / "uncond.npy"))


def _step_capturing_grads(worker: Worker, batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """One training step; the gradients as the optimizer receives them (clipping off: grad_clip 1e9)."""
    grads: dict[str, torch.Tensor] = {}
    original = worker.optimizer.step

    def capture(*args: Any, **kwargs: Any) -> Any:
        grads.update({n: p.grad.detach().clone() for n, p in parallel.named_params(worker.model)})
        return original(*args, **kwargs)

    worker.optimizer.step = capture  # type: ignore[method-assign]
    return grads, worker.train_step(batch, Timer("test"))


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rtol: float = 1e-4, atol: float = 1e-6) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction"])
def test_grad_accumulation_equals_one_large_batch(tmp_path: Path, prediction_type: str) -> None:
    """4 micro-batches of 2 rows = one batch of 8: loss, gradients, grad norm and weights after the step."""
    common = dict(prediction_type=prediction_type, snr_gamma=5.0, caption_dropout=0.5)
    big = _worker(tmp_path, batch_size=8, grad_accum=1, **common)
    accumulated = _worker(tmp_path, batch_size=2, grad_accum=4, **common)
    batch = _batch(8)
    grads_big, stats_big = _step_capturing_grads(big, batch)
    grads_acc, stats_acc = _step_capturing_grads(accumulated, batch)
    _assert_same(grads_big, grads_acc)
    assert stats_acc["loss"] == pytest.approx(stats_big["loss"], rel=1e-5)
    assert stats_acc["grad_norm"] == pytest.approx(stats_big["grad_norm"], rel=1e-4)
    # AdamW's first step moves each weight by ~lr * g / |g|: where |g| is near 0 the float
    # rounding of the two summation orders shows, so weights agree to 5% of one step (lr 1e-3).
    _assert_same(dict(parallel.named_params(big.model)), dict(parallel.named_params(accumulated.model)),
                 rtol=0, atol=0.05 * 1e-3)
    with pytest.raises(ValueError, match="does not split into 4"):
        accumulated.train_step(_batch(6), Timer("test"))


def test_grad_accumulation_on_two_ranks_syncs_once(tmp_path: Path) -> None:
    """FSDP2 and DDP on 2 gloo ranks: accumulated gradients equal one batch's, with no extra reductions."""
    import sd_two_ranks
    import torch.multiprocessing as mp

    mp.spawn(sd_two_ranks.run_rank, args=(2, str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        out = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for strategy, reduction in (("fsdp", "reduce_scatter_single"), ("ddp", "ddp_buckets")):
            one, two = out[f"{strategy}-1"], out[f"{strategy}-2"]
            assert one["loss"] == pytest.approx(two["loss"], rel=1e-5)
            assert one["grad_norm"] == pytest.approx(two["grad_norm"], rel=1e-4)
            # Inner micro-steps do not reduce: as many gradient reductions as one large batch.
            assert one["reductions"].get(reduction, 0) > 0, one
            assert two["reductions"].get(reduction) == one["reductions"][reduction], (strategy, out)
            _assert_same(torch.load(tmp_path / f"grads-{strategy}-1-{rank}.pt"),
                         torch.load(tmp_path / f"grads-{strategy}-2-{rank}.pt"))
    # Both ranks hold the same (all-reduced) gradients under DDP and see the same mean loss.
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["ddp-2"]["grad_norm"] == pytest.approx(r1["ddp-2"]["grad_norm"], rel=1e-6)
    _assert_same(torch.load(tmp_path / "grads-ddp-2-0.pt"), torch.load(tmp_path / "grads-ddp-2-1.pt"))


def test_gradient_checkpointing_same_loss_and_gradients(tmp_path: Path) -> None:
    """Checkpointing recomputes activations in backward (seen: block forwards run twice), same numbers."""
    plain = _worker(tmp_path, batch_size=4)
    ckpt = _worker(tmp_path, batch_size=4, grad_checkpointing=True)
    calls = {"plain": 0, "ckpt": 0}
    for key, worker in (("plain", plain), ("ckpt", ckpt)):
        resnet = parallel.inner(worker.model).down_blocks[0].resnets[0]
        # A pre-hook: the recomputation stops once it has what backward needs, before the forward hook.
        resnet.register_forward_pre_hook(lambda *_, k=key: calls.__setitem__(k, calls[k] + 1))
    batch = _batch(4)
    grads_plain, stats_plain = _step_capturing_grads(plain, batch)
    grads_ckpt, stats_ckpt = _step_capturing_grads(ckpt, batch)
    assert calls == {"plain": 1, "ckpt": 2}
    assert stats_ckpt["loss"] == pytest.approx(stats_plain["loss"], rel=1e-6)
    _assert_same(grads_plain, grads_ckpt, rtol=1e-5, atol=1e-7)


def test_adamw_implementations_agree() -> None:
    """fused and foreach AdamW = the per-parameter loop, over 5 steps with changing gradients."""
    shapes = [(7, 3), (5,), (2, 3, 3, 3)]
    results = {}
    for impl in ("for-loop", "foreach", "fused"):
        gen = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
        opt = optim.adamw(params, lr=1e-2, weight_decay=0.01, impl=impl, device_type="cpu")
        assert optim.implementation(opt) == impl
        for _ in range(5):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
        results[impl] = torch.cat([p.detach().flatten() for p in params])
    torch.testing.assert_close(results["foreach"], results["for-loop"], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(results["fused"], results["for-loop"], rtol=1e-5, atol=1e-6)
    assert optim.resolve_impl("auto", "cpu") == "fused"  # torch has fused CPU kernels
    with pytest.raises(ValueError, match="not in"):
        optim.resolve_impl("lion", "cpu")


def test_worker_uses_the_resolved_optimizer(tmp_path: Path) -> None:
    assert optim.implementation(_worker(tmp_path).optimizer) == "fused"
    assert optim.implementation(_worker(tmp_path, optimizer="foreach").optimizer) == "foreach"


def test_foreach_ema_equals_a_per_parameter_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    params = {f"p{i}": torch.randn(s, generator=gen) for i, s in enumerate([(4, 4), (3,), (2, 2, 3)])}
    ema = EMA(params.items())
    reference = {n: p.clone() for n, p in params.items()}
    for decay in (0.1, 0.5, 0.9, 0.999):
        for p in params.values():
            p.add_(torch.randn(p.shape, generator=gen))
        ema.update(params.items(), decay)
        for n, p in params.items():  # the textbook update, one parameter at a time
            reference[n] = decay * reference[n] + (1 - decay) * p
    _assert_same(ema.shadow, reference, rtol=1e-6, atol=1e-7)


def test_ema_swapped_in_restores_the_trained_weights() -> None:
    params = {"w": torch.zeros(3), "b": torch.ones(2)}
    ema = EMA(params.items())
    ema.shadow["w"].fill_(5.0)
    with ema.swapped_in(params.items()):
        assert torch.equal(params["w"], torch.full((3,), 5.0)) and torch.equal(params["b"], torch.ones(2))
    assert torch.equal(params["w"], torch.zeros(3)) and torch.equal(ema.shadow["w"], torch.full((3,), 5.0))


def test_stats_window_reads_back_once_per_flush() -> None:
    """Steps stay on the device until flush; then one reduction for all of them, one record per step."""
    reductions = []

    def reduce_mean(t: torch.Tensor) -> torch.Tensor:
        reductions.append(t.shape)
        return t / 2

    now = iter([10.0, 14.0])
    window = StatsWindow(images_per_step=8, reduce_mean=reduce_mean, clock=lambda: next(now))
    window.start_step()
    for step in (1, 2, 3, 4):
        window.add(step, torch.tensor([2.0 * step, 4.0]), lr=0.1, timings={"forward_backward": 0.5})
        window.start_step()  # the window's clock started at step 1
    assert reductions == []  # nothing read back yet
    records = window.flush()
    assert reductions == [torch.Size([4, 2])]
    assert [r["step"] for r in records] == [1, 2, 3, 4] and [r["loss"] for r in records] == [1.0, 2.0, 3.0, 4.0]
    assert records[0]["step_s"] == 1.0 and records[0]["images_per_s"] == 8.0  # 4 steps of 8 images in 4 s
    assert window.flush() == [] and len(window) == 0


def test_step_on_device_leaves_stats_on_the_device(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    stats, lr = worker.step_on_device(_batch(2), Timer("test"))
    assert isinstance(stats, torch.Tensor) and stats.shape == (2,) and stats.device == worker.device
    assert lr == pytest.approx(1e-3) and worker.step == 1


def test_noise_is_drawn_on_the_training_device() -> None:
    from sd_reference.diffusion import step_generator

    gen = step_generator(0, 3, 1, torch.device("cpu"))
    assert gen.device == torch.device("cpu")
    assert torch.equal(torch.randn(3, generator=gen), torch.randn(3, generator=step_generator(0, 3, 1)))
    assert not torch.equal(torch.randn(3, generator=step_generator(0, 3, 1)), torch.randn(3, generator=step_generator(0, 4, 1)))


def test_unet_flops_and_mfu() -> None:
    tiny = get_preset("tiny").unet
    counted = flops.unet_flops_per_image(tiny)
    assert counted.forward > 10e6  # the tiny UNet: ~46 MFLOPs per 8x8 latent
    assert 2.5 < counted.train / counted.forward < 3.5  # backward ~ 2x forward
    # Convolutions and matmuls scale with the latent area (attention with its square).
    doubled = flops.unet_flops_per_image(dict(tiny, sample_size=16))
    assert 4.0 <= doubled.forward / counted.forward < 5.0
    assert flops.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert flops.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert flops.peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert flops.peak_flops("cpu") is None and flops.peak_flops("Tesla T4") is None
    assert flops.mfu(500, 2.0, 1000.0) == 1.0 and flops.mfu(500, 2.0, None) is None


def test_validation_loss_is_fixed_and_matches_the_objective(tmp_path: Path) -> None:
    from sd_reference.validation import ValidationLoss, rank_share, spread_timesteps

    worker = _worker(tmp_path, batch_size=3)
    rows = _batch(8, seed=5)
    val = ValidationLoss(worker, rows, seed=0)
    first = val.loss()
    assert first == val.loss()  # same rows, noise and timesteps every time
    assert val.timesteps.tolist() == [62, 187, 312, 437, 562, 687, 812, 937]  # evenly over 1000 steps
    with torch.no_grad():  # by hand: the objective over all 8 rows with the drawn noise
        noisy, target = worker.schedule.noisy_and_target(val.latents, val.noise, val.timesteps)
        expected = worker.schedule.loss(worker.predict(noisy, val.timesteps, val.text), target, val.timesteps, 0.0)
    assert first == pytest.approx(expected.item(), rel=1e-5)  # chunks of 3, 3, 2 weighted by rows
    worker.train_step(_batch(3), Timer("test"))
    assert val.loss() != first
    share = rank_share(rows, 1, 3)
    assert torch.equal(share["latents"], rows["latents"][2:4])  # 8 rows over 3 ranks: 2 each
    assert spread_timesteps(2, 2, 4, 1000).tolist() == [625, 875]


def test_sample_grid_png(tmp_path: Path) -> None:
    """A 2x2 grid of 64 px samples from the EMA weights, written under the run's samples/."""
    from PIL import Image

    from sd_reference.grid import SampleGrid
    from sd_reference.models import prepare_components

    spec = prepare_components(get_preset("tiny"), None, tmp_path / "components")
    worker = Worker(TrainConfig(batch_size=2, lr=1e-3, warmup_steps=0, ema_decay=0.9, use_gpu=False), spec, None)
    before = {n: p.detach().clone() for n, p in parallel.named_params(worker.model)}
    grid = SampleGrid(worker, str(tmp_path / "run"), steps=3)
    path = grid.render(7)
    assert path == str(tmp_path / "run" / "samples" / "step_00000007.png")
    image = Image.open(path)
    assert image.size == (128, 128) and len(np.unique(np.asarray(image).reshape(-1, 3), axis=0)) > 100  # 4 noisy samples, not a blank canvas
    _assert_same(dict(parallel.named_params(worker.model)), before, rtol=0, atol=0)  # trained weights restored
    assert torch.equal(grid.latents(), grid.latents())  # the same prompts and noise every time


def test_validation_rows_from_latent_shards(tmp_path: Path) -> None:
    """The driver reads the first rows of the shards in file order, across files, as arrays."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ray.data.extensions import ArrowTensorArray

    from sd_reference.validation import parquet_rows

    files = []
    for i in range(2):
        latents = np.full((3, 4, 8, 8), i, np.float16) + np.arange(3, dtype=np.float16).reshape(3, 1, 1, 1) / 10
        table = pa.table({"latents": ArrowTensorArray.from_numpy(latents),
                          "text_emb": ArrowTensorArray.from_numpy(np.zeros((3, 77, 32), np.float16))})
        files.append(str(tmp_path / f"{i}.parquet"))
        pq.write_table(table, files[-1])
    rows = parquet_rows(files, ["latents", "text_emb"], 5)
    assert rows["latents"].shape == (5, 4, 8, 8) and rows["text_emb"].shape == (5, 77, 32)
    assert rows["latents"][:, 0, 0, 0].tolist() == pytest.approx([0, 0.1, 0.2, 1, 1.1], abs=1e-3)
    assert len(parquet_rows(files, ["latents"], 100)["latents"]) == 6  # fewer rows than asked: all of them


def test_resumed_optimizer_keeps_the_chosen_kernel() -> None:
    """A checkpoint saved with one AdamW kernel, loaded into another: --optimizer wins, same next step."""
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(4, 3, generator=gen), torch.randn(5, generator=gen)]
    grads = [[torch.randn(t.shape, generator=gen) for t in start] for _ in range(3)]
    saved_params = [torch.nn.Parameter(t.clone()) for t in start]
    saved = optim.adamw(saved_params, 1e-2, 0.01, "foreach", "cpu")
    for g in grads[:2]:
        for p, gi in zip(saved_params, g, strict=True):
            p.grad = gi
        saved.step()
    params = [torch.nn.Parameter(p.detach().clone()) for p in saved_params]
    resumed = optim.adamw(params, 1e-2, 0.01, "fused", "cpu")
    resumed.load_state_dict(copy.deepcopy(saved.state_dict()))  # as from a file: no shared tensors
    assert optim.implementation(resumed) == "foreach"  # what the checkpoint brought
    optim.reapply(resumed, "fused", "cpu")
    assert optim.implementation(resumed) == "fused"
    for opt, ps in ((saved, saved_params), (resumed, params)):
        for p, gi in zip(ps, grads[2], strict=True):
            p.grad = gi
        opt.step()
    for a, b in zip(saved_params, params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_step_reporter_records(tmp_path: Path) -> None:
    """Rank 0's records: start fields, one record per step, MFU from the counted FLOPs and the peak."""
    from sd_reference.step_stats import StepReporter

    worker = _worker(tmp_path, grad_accum=2)
    written: list[dict[str, Any]] = []
    reporter = StepReporter(worker, written.append)
    start = reporter.start_fields()
    assert start["device"] == "cpu" and start["optimizer"] == "fused" and start["grad_accum"] == 2
    assert start["train_flops_per_image"] == flops.unet_flops_per_image(get_preset("tiny").unet).train
    for _ in range(2):
        reporter.start_step()
        reporter.add(worker.step + 1, *worker.step_on_device(_batch(4), Timer("test")), {"optimizer": 0.1})
    assert written == []
    reporter.peak = 1e12  # as if on a GPU of 1 PFLOP/s
    last = reporter.flush()
    assert [r["step"] for r in written] == [1, 2] and last is written[-1]
    assert last["peak_mem_gib"] is None  # CPU
    expected_mfu = start["train_flops_per_image"] * last["images_per_s"] / 1e12
    assert last["mfu"] == pytest.approx(expected_mfu, abs=5e-5)  # logged to 4 decimals
    assert reporter.flush() == {}
