"""sd_reference on a real local Ray cluster (one per module): preprocess, train, resume, export, sample."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from cluster import forget_ray_auth_state
from PIL import Image
from sd_support import effective_steps, sampler_keys

from e2e.gang_targets import TRAIN_CLUSTER_ENV
from sd_reference.cli import main
from sd_reference.synth import make_data

pytestmark = pytest.mark.e2e
NUM, BROKEN = 40, 3  # bad_image, missing_caption, zero_size: one each


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    import ray

    if ray.is_initialized():
        ray.shutdown()
    forget_ray_auth_state()  # an earlier module's cluster may have left another auth mode cached
    with pytest.MonkeyPatch.context() as env:
        # Ray's processes take this driver's environment (e2e/gang_targets.py says why).
        for name, value in TRAIN_CLUSTER_ENV.items():
            env.setenv(name, value)
        # More logical CPUs than cores: 2 Train workers and Data tasks must run together.
        ray.init(address="local", num_cpus=8, include_dashboard=False)
        yield
        ray.shutdown()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sd")
    make_data(root / "data", num=NUM, seed=0, shards=2, broken=BROKEN, formats=("parquet", "webdataset", "folder"))
    return root


@pytest.fixture(scope="module")
def latents(cluster: None, work: Path) -> Path:
    out = work / "latents"
    assert main(["--no-progress", "preprocess", "--input", str(work / "data" / "laion"), "--out", str(out),
                 "--cpu-batch-size", "16", "--encode-batch-size", "16"]) == 0
    return out


def _read_shards(root: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq
    import ray.data  # noqa: F401 - registers Ray's tensor extension type for pyarrow

    manifest = json.loads((root / "manifest.json").read_text())
    rows: list[dict[str, object]] = []
    for f in manifest["files"]:
        rows += pq.read_table(root / f["path"]).to_pylist()
    return rows


def test_preprocess_parquet(latents: Path) -> None:
    manifest = json.loads((latents / "manifest.json").read_text())
    assert manifest["rows_in"] == NUM and manifest["rows"] == NUM - BROKEN
    assert manifest["broken"] == {"bad_image": 1, "missing_caption": 1, "zero_size": 1}
    assert manifest["latent_shape"] == [4, 64 // 8, 64 // 8]  # resolution / 8
    assert manifest["text_emb_shape"] == [77, 32]
    rows = _read_shards(latents)
    assert len(rows) == NUM - BROKEN
    lat = np.asarray(rows[0]["latents"])
    assert lat.shape == (4, 8, 8) and lat.dtype == np.float16 and 0 < np.abs(lat).mean() < 10
    assert np.load(latents / manifest["uncond_embedding"]).shape == (77, 32)


@pytest.mark.parametrize(("fmt", "sub", "broken"), [
    ("webdataset", "wds", {"bad_image": 1, "missing_caption": 1, "zero_size": 1}),
    # A folder has no size metadata: the "zero size" row is a good image there.
    ("folder", "images", {"bad_image": 1, "missing_caption": 1}),
])
def test_preprocess_webdataset_and_folder(cluster: None, work: Path, fmt: str, sub: str, broken: dict[str, int]) -> None:
    out = work / f"latents-{fmt}"
    assert main(["--no-progress", "preprocess", "--input", str(work / "data" / sub), "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == fmt and manifest["broken"] == broken
    assert manifest["rows"] == NUM - sum(broken.values()) == len(_read_shards(out))
    assert manifest["latent_shape"] == [4, 8, 8]


@pytest.fixture(scope="module")
def fsdp_run(latents: Path, work: Path) -> Path:
    """2 workers, FSDP2, 8 steps, checkpoints every 2, rank 1 killed at step 5 (resumes), export."""
    argv = ["--no-progress", "train", "--data", str(latents), "--storage-path", str(work / "runs"), "--name", "e2e",
            "--workers", "2", "--strategy", "fsdp", "--steps", "8", "--batch-size", "4",
            "--checkpoint-every", "2", "--inject-failure-at-step", "5", "--max-failures", "2", "--fingerprint",
            "--log-samples"]
    assert main(argv) == 0
    return work / "runs" / "e2e"


def _log(run: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]


def test_train_fsdp2_failure_resume_export_sample(fsdp_run: Path, work: Path) -> None:
    run = fsdp_run
    log = _log(run)
    events = [r.get("event") for r in log if r.get("event")]
    assert events.count("start") == 1 and events.count("resume") == 1 and events[-1] == "end"
    assert json.loads((run / ".failure_injected").read_text())["rank"] == 1
    resume_at = next(i for i, r in enumerate(log) if r.get("event") == "resume")
    resume = log[resume_at]
    saved = {r["step"]: r["fingerprint"] for r in log[:resume_at] if r.get("event") == "checkpoint"}
    assert resume["step"] == 4 == max(saved)  # the latest checkpoint, not a fresh start
    # Weights, optimizer and EMA after the restart are byte-identical to what was saved, on each rank.
    assert resume["fingerprint"] == saved[4] and set(resume["fingerprint"]) == {"0", "1"}
    steps_before = [r["step"] for r in log[:resume_at] if "loss" in r and not r.get("event")]
    steps_after = [r["step"] for r in log[resume_at:] if "loss" in r and not r.get("event")]
    assert steps_before == [1, 2, 3, 4] and steps_after == [5, 6, 7, 8]
    # The data position came back too: after the restart the run reads on in the sampler's order
    # (epoch 1 from step 5: 37 rows, 8 a step), not the first batches again.
    assert resume["position"] == {"epoch": 0, "consumed": 32}
    steps = effective_steps(log)
    seen = [k for s in range(1, 9) for rank in steps[s]["samples"] for k in rank]
    assert seen == sampler_keys(str(work / "latents"), dict.fromkeys(range(1, 9), 2), seed=0, batch=4)
    assert steps[5]["samples"] != steps[1]["samples"] and len(set(seen[:32])) == len(set(seen[32:])) == 32
    final = json.loads((run / "step_00000008" / "train_state.json").read_text())
    assert final["step"] == 8 and final["world_size"] == 2 and final["strategy"] == "fsdp"
    assert sorted(p.name for p in run.glob("step_*/__*_0.distcp") if p.parent.name.endswith("8")) == [
        "__0_0.distcp", "__1_0.distcp"]  # one shard file per rank

    from diffusers import StableDiffusionPipeline

    pipeline = run / "pipeline"
    pipe = StableDiffusionPipeline.from_pretrained(pipeline)
    torch.set_num_threads(1)
    image = pipe("a red circle on a blue background", num_inference_steps=2, height=64, width=64,
                 generator=torch.Generator().manual_seed(0), output_type="np").images[0]
    assert image.shape == (64, 64, 3) and np.isfinite(image).all()
    assert json.loads((pipeline / "sd_reference_export.json").read_text())["step"] == 8

    samples = work / "samples"
    assert main(["--no-progress", "sample", "--pipeline", str(pipeline), "--out", str(samples), "--steps", "2",
                 "--prompt", "a small green square on a white background"]) == 0
    pngs = sorted(p.name for p in samples.glob("*.png"))
    assert pngs == ["00-a-small-green-square-on-a-white-background.png", "loss_curve.png"]
    assert Image.open(samples / pngs[0]).size == (64, 64)


def test_resume_fsdp2_run_online_with_ddp_and_sigterm(fsdp_run: Path, work: Path) -> None:
    """Same name = same run: it continues from step 8, resharded from FSDP2 to DDP, encoding online;
    rank 1 gets SIGTERM before step 9, so step 9 is checkpointed (not a multiple of 2) and the run
    restarts from exactly there."""
    before = len(_log(fsdp_run))
    argv = ["--no-progress", "train", "--online", "--data", str(work / "data" / "laion"), "--storage-path",
            str(work / "runs"), "--name", "e2e", "--strategy", "ddp", "--batch-size", "4", "--steps", "10",
            "--checkpoint-every", "2", "--no-export", "--inject-sigterm-at-step", "9", "--max-failures", "1"]
    assert main(argv) == 0
    log = _log(fsdp_run)[before:]
    assert log[0]["event"] == "resume" and log[0]["step"] == 8
    events = [(r["event"], r["step"]) for r in log if r.get("event")]
    assert events == [("resume", 8), ("checkpoint", 9), ("preempted", 9), ("resume", 9), ("checkpoint", 10),
                      ("end", 10)]
    assert json.loads((fsdp_run / ".sigterm_injected").read_text())["rank"] == 1
    steps = [r for r in log if "loss" in r and not r.get("event")]
    assert [r["step"] for r in steps] == [9, 10]  # nothing redone: the preemption checkpoint is step 9
    assert all("encode" in r["timings"] and np.isfinite(r["loss"]) for r in steps)
    assert json.loads((fsdp_run / "step_00000009" / "train_state.json").read_text())["step"] == 9
    final = json.loads((fsdp_run / "step_00000010" / "train_state.json").read_text())
    assert final["step"] == 10 and final["strategy"] == "ddp"


def test_training_features_in_a_ray_train_run(latents: Path, work: Path) -> None:
    """2 FSDP2 workers with accumulation, checkpointing, foreach AdamW, read-back every 3 steps,
    synced timings, validation loss and a sample grid at step 4."""
    run = work / "runs" / "features"
    argv = ["--no-progress", "train", "--data", str(latents), "--storage-path", str(work / "runs"), "--name", "features",
            "--workers", "2", "--steps", "5", "--batch-size", "2", "--grad-accum", "2", "--grad-checkpointing",
            "--optimizer", "foreach", "--log-every", "3", "--sync-timings", "--val-every", "4", "--val-rows", "8",
            "--sample-every", "4", "--checkpoint-every", "5", "--no-export"]
    assert main(argv) == 0
    log = _log(run)
    start = log[0]
    assert start["event"] == "start" and start["optimizer"] == "foreach" and start["device"] == "cpu"
    assert start["grad_accum"] == 2 and start["grad_checkpointing"] is True and start["train_flops_per_image"] > 0
    steps = [r for r in log if "loss" in r and not r.get("event")]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert all(np.isfinite(r["loss"]) and r["mfu"] is None and r["peak_mem_gib"] is None for r in steps)
    # Steps 1-3 were read back together (--log-every 3): one window, one throughput figure.
    assert steps[0]["images_per_s"] == steps[1]["images_per_s"] == steps[2]["images_per_s"]
    assert all(set(r["timings"]) >= {"data_wait", "forward_backward", "optimizer"} for r in steps)
    validation = [r for r in log if r.get("event") == "validation"]
    assert [r["step"] for r in validation] == [4] and np.isfinite(validation[0]["val_loss"])
    order = [(r.get("event"), r["step"]) for r in log]
    assert order.index((None, 4)) < order.index(("validation", 4))  # step 4's record, then its evaluation
    grid = run / "samples" / "step_00000004.png"
    assert validation[0]["grid"] == str(grid) and Image.open(grid).size == (128, 128)  # 4 prompts, 2x2 of 64 px
    assert json.loads((run / "step_00000005" / "train_state.json").read_text())["step"] == 5
