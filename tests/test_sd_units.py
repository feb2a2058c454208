"""sd_reference without Ray: data generation, CPU transforms, presets, objective, CLI errors, learning."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sd_reference import synth
from sd_reference.cli import main
from sd_reference.diffusion import NoiseSchedule, caption_dropout, dropout_mask, lr_at
from sd_reference.ema import EMA, ema_decay_at
from sd_reference.errors import UserError
from sd_reference.presets import SCHEDULER_CONFIG, get_preset
from sd_reference.sources import detect
from sd_reference.transforms import BrokenRow, CpuTransform, decode_resize_crop


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_make_data_is_deterministic(tmp_path: Path) -> None:
    args = ["make-data", "--num", "24", "--broken", "3", "--formats", "parquet,webdataset,folder", "--no-progress"]
    assert main(["--no-progress", *args[:-1], "--out", str(tmp_path / "a")]) == 0
    assert main([*args[:-1], "--out", str(tmp_path / "b")]) == 0
    assert main([*args[:-1], "--out", str(tmp_path / "c"), "--seed", "1"]) == 0
    a, b, c = (_digest(tmp_path / d) for d in "abc")
    assert a == b and len(a) > 0
    assert a.keys() == c.keys() and a != c  # another seed: same layout, other images


def test_make_data_layouts_and_captions(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    synth.make_data(tmp_path, num=10, seed=0, shards=2, broken=3, formats=synth.FORMATS)
    table = pq.read_table(tmp_path / "laion")
    assert table.column_names == ["hash", "caption", "jpg", "width", "height"]
    assert table.num_rows == 10 and len(list((tmp_path / "laion").glob("*.parquet"))) == 2
    rows = table.to_pylist()
    captions = [r["caption"] for r in rows if r["caption"]]
    assert all(c.endswith("background") and c.startswith("a ") for c in captions)
    assert sum(r["caption"] is None for r in rows) == 1 and sum(r["width"] == 0 for r in rows) == 1
    ok = next(r for r in rows if r["caption"] and r["width"])
    assert Image.open(io.BytesIO(ok["jpg"])).size == (ok["width"], ok["height"])
    import tarfile

    names = tarfile.open(tmp_path / "wds" / "00000.tar").getnames()
    assert names[:3] == ["000000000.jpg", "000000000.json", "000000000.txt"]
    assert len(list((tmp_path / "images").glob("*.jpg"))) == 10


def test_resize_and_center_crop() -> None:
    img = Image.new("RGB", (120, 60), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 30, 60))  # red strip on the left: cropped away
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    out = decode_resize_crop(buf.getvalue(), 32)
    assert out.shape == (3, 32, 32) and out.dtype == np.uint8
    assert out[2].min() > 200 and out[0].max() < 50  # only blue survives the center crop
    with pytest.raises(BrokenRow) as bad:
        decode_resize_crop(b"not an image", 32)
    assert bad.value.reason == "bad_image"


def test_cpu_transform_drops_and_reports_broken_rows(tmp_path: Path) -> None:
    from sd_reference.models import char_tokenizer

    char_tokenizer().save_pretrained(tmp_path / "tok")
    good = synth.make_sample(0, 0)
    seen: list[tuple[int, int, dict[str, int]]] = []
    t = CpuTransform(64, str(tmp_path / "tok"), report=lambda *a: seen.append(a))
    batch = {
        "key": np.array(["a", "b", "c", "d"], dtype=object),
        "caption": np.array([good.caption, None, "  ", good.caption], dtype=object),
        "image": np.array([good.jpg, good.jpg, good.jpg, b"\x00bad"], dtype=object),
        "width": np.array([good.width] * 4),
        "height": np.array([good.height] * 4),
    }
    out = t(batch)
    assert list(out["key"]) == ["a"] and out["pixels"].shape == (1, 3, 64, 64)
    assert out["input_ids"].shape == (1, 77) and out["input_ids"][0, 0] == 0
    assert seen == [(4, 1, {"missing_caption": 2, "bad_image": 1})]


def test_presets_shapes() -> None:
    from diffusers import UNet2DConditionModel

    assert get_preset("tiny").unet["sample_size"] == 8
    assert get_preset("tiny", 128).vae["sample_size"] == 128
    with pytest.raises(UserError, match="unknown preset 'huge'"):
        get_preset("huge")
    sd2 = get_preset("sd2-base")
    with torch.device("meta"):  # real SD2-base shapes without allocating 3.5 GB
        unet = UNet2DConditionModel(**sd2.unet)
    assert 860e6 < sum(p.numel() for p in unet.parameters()) < 870e6  # SD2's UNet is 865M


def test_objective_targets_and_min_snr() -> None:
    sched = NoiseSchedule(SCHEDULER_CONFIG, "v_prediction")
    x0, noise = torch.randn(4, 4, 8, 8), torch.randn(4, 4, 8, 8)
    t = torch.tensor([0, 10, 500, 999])
    noisy, target = sched.noisy_and_target(x0, noise, t)
    a = sched.alphas_cumprod[t].view(-1, 1, 1, 1)
    assert torch.allclose(target, a.sqrt() * noise - (1 - a).sqrt() * x0, atol=1e-5)
    eps = NoiseSchedule(SCHEDULER_CONFIG, "epsilon")
    assert torch.equal(eps.noisy_and_target(x0, noise, t)[1], noise)


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction"])
def test_min_snr_weight_is_its_formula(prediction_type: str) -> None:
    """Each sample's loss is weighted by min(SNR, gamma)/SNR (epsilon) or min(SNR, gamma)/(SNR + 1) (v)."""
    gamma = 5.0
    t = torch.tensor([0, 10, 300, 500, 999])
    # SD2's scaled-linear schedule, computed here independently of diffusers.
    betas = torch.linspace(0.00085**0.5, 0.012**0.5, 1000, dtype=torch.float64) ** 2
    alpha_bar = torch.cumprod(1 - betas, 0)[t]
    snr = alpha_bar / (1 - alpha_bar)
    clipped = torch.clamp(snr, max=gamma)
    expected = clipped / snr if prediction_type == "epsilon" else clipped / (snr + 1)
    sched = NoiseSchedule(SCHEDULER_CONFIG, prediction_type)
    # A prediction off by 1 everywhere: each sample's plain MSE is 1, so its loss is its weight.
    target = torch.randn(len(t), 4, 8, 8)
    per_sample = torch.stack([sched.loss(target[i:i + 1] + 1, target[i:i + 1], t[i:i + 1], gamma) for i in range(len(t))])
    assert torch.allclose(per_sample.double(), expected, rtol=1e-4), (per_sample, expected)
    assert sched.loss(target + 1, target, t, gamma).item() == pytest.approx(expected.mean().item(), rel=1e-4)
    assert sched.loss(target + 1, target, t, 0.0).item() == pytest.approx(1.0)  # gamma 0: unweighted
    # The weights differ by type where it matters: at t=999 (SNR ~ 0.005) epsilon keeps 1, v nearly 0.
    assert expected[-1] == pytest.approx(1.0 if prediction_type == "epsilon" else snr[-1] / (snr[-1] + 1))


def test_ema_lr_and_caption_dropout() -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    ema = EMA([("w", p)])
    with torch.no_grad():
        p.add_(1.0)
    ema.update([("w", p)], decay=0.9)
    assert torch.allclose(ema.shadow["w"], torch.full((3,), 0.1))
    assert ema_decay_at(0, 0.9999) == pytest.approx(0.1) and ema_decay_at(10**7, 0.9999) == 0.9999
    assert lr_at(0, 1e-3, 10) == pytest.approx(1e-4) and lr_at(50, 1e-3, 10) == 1e-3
    emb, uncond = torch.ones(1000, 2, 3), torch.zeros(2, 3)
    drop = dropout_mask(1000, 0.1, torch.Generator().manual_seed(0))
    assert drop is not None and dropout_mask(1000, 0.0, torch.Generator()) is None
    out = caption_dropout(emb, uncond, drop)
    dropped = out.sum(dim=(1, 2)) == 0
    assert 0.06 < dropped.float().mean().item() < 0.14 and emb.sum() == 6000  # input untouched
    assert torch.equal(dropped, drop)  # exactly the drawn rows, nothing else


def _one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str], expect: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sd_reference: error:") and expect in err[0], err


def test_bad_input_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_error_line(capsys, ["preprocess", "--input", str(tmp_path / "nope")], "does not exist")
    (tmp_path / "empty").mkdir()
    _one_error_line(capsys, ["preprocess", "--input", str(tmp_path / "empty")], "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.parquet").write_bytes(b"PAR1 this is not parquet")
    _one_error_line(capsys, ["preprocess", "--input", str(tmp_path / "bad")], "corrupt parquet file")
    _one_error_line(capsys, ["train", "--preset", "giant"], "unknown preset 'giant'")
    _one_error_line(capsys, ["train", "--data", str(tmp_path / "empty")], "no manifest.json")
    _one_error_line(capsys, ["train", "--online", "--strategy", "zero3"], "--strategy must be one of")
    _one_error_line(capsys, ["train", "--preset", "tiny", "--inject-failure-at-step", "3", "--max-failures", "0"],
                    "needs --max-failures")
    _one_error_line(capsys, ["export", "--run", str(tmp_path)], "not a training run")
    _one_error_line(capsys, ["sample", "--pipeline", str(tmp_path)], "not a diffusers pipeline")
    _one_error_line(capsys, ["make-data", "--num", "0"], "not a positive integer")


def test_zero_row_parquet_is_empty(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"hash": pa.array([], pa.string())}), tmp_path / "x.parquet")
    with pytest.raises(UserError, match="0 rows"):
        detect(str(tmp_path))


def test_loss_curve_png(tmp_path: Path) -> None:
    from sd_reference.plot import loss_points, plot_loss

    records = [{"step": i, "loss": 1 / i} for i in range(1, 9)]
    records += [{"event": "resume", "step": 4}, {"step": 5, "loss": 0.19}]
    points, resumes = loss_points(records)
    assert dict(points)[5] == 0.19 and resumes == [4]  # a redone step keeps its latest loss
    out = plot_loss(records, tmp_path / "loss.png")
    assert Image.open(out).size == (800, 480)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread: a multi-threaded step collapses when other jobs share the 2 cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_tiny_model_learns(tmp_path: Path, one_thread: None) -> None:
    """60 steps of the real objective on real synthetic images: the loss clearly falls."""
    from sd_reference.bench import synthetic_batches
    from sd_reference.config import TrainConfig
    from sd_reference.metrics import Timer
    from sd_reference.models import prepare_components
    from sd_reference.train_loop import Worker

    preset = get_preset("tiny")
    spec = prepare_components(preset, None, tmp_path / "components")
    assert json.loads((tmp_path / "components" / "sd_reference_components.json").read_text())["preset"] == "tiny"
    cfg = TrainConfig(online=True, steps=60, batch_size=8, lr=preset.lr, warmup_steps=5, ema_decay=0.99)
    worker = Worker(cfg, spec, None)
    batches = synthetic_batches(spec, worker, 4, 8)
    worker.cfg.online = False  # latents encoded once above
    losses = [worker.train_step(batches[i % 4], Timer("t"))["loss"] for i in range(60)]
    first, last = np.mean(losses[:12]), np.mean(losses[-12:])
    assert last < 0.7 * first, (first, last)


def test_pretrained_directory(tmp_path: Path) -> None:
    """--pretrained DIR: components used as they are; the UNet shape (and weights) come from DIR."""
    from diffusers import UNet2DConditionModel

    from sd_reference.models import build_unet, prepare_components

    preset = get_preset("tiny")
    model_dir = tmp_path / "model"
    prepare_components(preset, None, model_dir)
    torch.manual_seed(7)
    UNet2DConditionModel(**preset.unet).save_pretrained(model_dir / "unet")
    spec = prepare_components(preset, str(model_dir), tmp_path / "unused")
    assert spec.path == str(model_dir.resolve()) and not (tmp_path / "unused").exists()
    assert spec.unet["cross_attention_dim"] == 32 and spec.unet["sample_size"] == 8
    spec.pretrained_unet = True
    loaded = build_unet(spec)
    reference = UNet2DConditionModel.from_pretrained(model_dir / "unet")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), reference.state_dict().values(), strict=True))
    (model_dir / "vae").rename(tmp_path / "vae-moved")
    with pytest.raises(UserError, match="missing vae/"):
        prepare_components(preset, str(model_dir), tmp_path / "unused")
