"""preprocess: Ray Data pipeline from captioned images to latent + text-embedding parquet shards.

read (parquet | webdataset | folder) -> CPU stage (decode, resize, crop, tokenize;
broken rows dropped and counted) -> encoder stage (VAE latents x scaling factor,
text encoder hidden states; on GPU when the cluster has one) -> parquet shards,
then `manifest.json` describing shapes, counts and files. CPU and encoder stages
have their own batch size and concurrency. Input and output are paths or URIs
(storage.py): on a cluster the workers write the shards straight to the output.
"""

from __future__ import annotations

import io
import json
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sd_reference import metrics, sources, storage
from sd_reference.errors import UserError
from sd_reference.models import ComponentsSpec, prepare_components
from sd_reference.presets import get_preset
from sd_reference.transforms import cpu_batches

MANIFEST = "manifest.json"
UNCOND_FILE = "uncond_embedding.npy"


@dataclass
class PreprocessOptions:
    input: str
    out: str
    fmt: str = "auto"
    preset: str = "tiny"
    resolution: int | None = None
    pretrained: str | None = None
    columns: dict[str, str] = field(default_factory=dict)
    cpu_batch_size: int = 32
    cpu_concurrency: int = 2
    encode_batch_size: int = 16
    encode_concurrency: int = 1
    encode_cpus: float = 1.0
    rows_per_file: int = 2048
    rows_per_group: int = 256  # parquet row groups: the unit training reads (feed.py)
    limit: int | None = None
    seed: int = 0


class Stats:
    """Ray actor: rows seen / kept / broken per reason, and rows encoded, for progress and the manifest."""

    def __init__(self) -> None:
        self.rows_in = 0
        self.rows_ok = 0
        self.encoded = 0
        self.broken: dict[str, int] = {}

    def cpu(self, n_in: int, n_ok: int, broken: dict[str, int]) -> None:
        self.rows_in += n_in
        self.rows_ok += n_ok
        for reason, n in broken.items():
            self.broken[reason] = self.broken.get(reason, 0) + n

    def encode(self, n: int) -> None:
        self.encoded += n

    def get(self) -> dict[str, Any]:
        return {"rows_in": self.rows_in, "rows_ok": self.rows_ok, "encoded": self.encoded, "broken": dict(self.broken)}


def _reporter(stats: Any, method: str) -> Callable[..., None]:
    import ray

    def report(*args: Any) -> None:
        # Waited on so the counts are complete when the dataset finishes.
        ray.get(getattr(stats, method).remote(*args))

    return report


class Encoder:
    """Ray Data UDF (actor): pixels + token ids -> scaled VAE latents and text embeddings."""

    def __init__(self, spec_json: dict[str, Any], report: Callable[[int], None], seed: int) -> None:
        import torch

        from sd_reference.models import load_encoders

        metrics.setup()
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.vae, self.text_encoder = load_encoders(ComponentsSpec.from_json(spec_json), self.device)
        self.report = report
        self.seed = seed

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        from sd_reference.models import encode_images, encode_text

        n = len(batch["key"])
        start = time.perf_counter()
        with metrics.span("sd.preprocess.encode", rows=n):
            # Seeded by the first key so a re-run writes the same latent samples.
            gen = torch.Generator().manual_seed(self.seed + zlib.crc32(str(batch["key"][0]).encode())) if n else None
            autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device == "cuda")
            with autocast:
                latents = encode_images(self.vae, torch.as_tensor(np.array(batch["pixels"])), gen)
                text = encode_text(self.text_encoder, torch.as_tensor(np.array(batch["input_ids"])))
        metrics.histogram("sd.preprocess.encode.duration", time.perf_counter() - start)
        self.report(n)
        metrics.counter("sd.preprocess.rows.out", n, stage="encode")
        return {
            "key": batch["key"],
            "caption": batch["caption"],
            # fp16 halves storage (SD2: 157 KB of text embedding per row) at no cost to training.
            "latents": latents.float().cpu().numpy().astype(np.float16),
            "text_emb": text.float().cpu().numpy().astype(np.float16),
        }


def _cluster_has_gpu() -> bool:
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0


def cpu_stage(ds: Any, source: sources.Source, spec: ComponentsSpec, batch_size: int, concurrency: int, stats: Any) -> Any:
    """Append the CPU stage (also used by `train --online`)."""
    import ray.data

    return ds.map_batches(
        cpu_batches,
        fn_kwargs={
            "resolution": spec.resolution,
            "tokenizer_dir": storage.join(spec.path, "tokenizer"),
            "report": _reporter(stats, "cpu") if stats is not None else None,
            "sidecar_captions": sources.sidecar_filesystem(source),
        },
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.TaskPoolStrategy(size=concurrency),
        num_cpus=1,
    )


def build_pipeline(opts: PreprocessOptions, spec: ComponentsSpec, stats: Any) -> tuple[Any, sources.Source]:
    import ray.data

    source = sources.detect(opts.input, opts.fmt)
    ds = sources.read(source, opts.columns)
    if opts.limit:
        ds = ds.limit(opts.limit)
    ds = cpu_stage(ds, source, spec, opts.cpu_batch_size, opts.cpu_concurrency, stats)
    gpu = _cluster_has_gpu()
    ds = ds.map_batches(
        Encoder,
        fn_constructor_kwargs={"spec_json": spec.to_json(), "report": _reporter(stats, "encode"), "seed": opts.seed},
        batch_size=opts.encode_batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=opts.encode_concurrency),
        num_gpus=1 if gpu else 0,
        num_cpus=opts.encode_cpus,
    )
    return ds, source


def uncond_embedding(spec: ComponentsSpec) -> np.ndarray:
    """Text embedding of the empty prompt: what caption dropout trains toward (CFG)."""
    from sd_reference.models import encode_text, load_encoders, load_tokenizer, tokenize

    _, text_encoder = load_encoders(spec)
    return encode_text(text_encoder, tokenize(load_tokenizer(spec), [""]))[0].numpy().astype(np.float32)


def _parquet_file(uri: str) -> Any:
    import pyarrow.parquet as pq

    fs, path = storage.filesystem(uri)
    return pq.ParquetFile(fs.open_input_file(path))


def shard_row_groups(root: str, entry: dict[str, Any]) -> list[int]:
    """Rows per row group of one manifest shard (read from the file for manifests that predate the list)."""
    if "row_groups" in entry:
        return [int(n) for n in entry["row_groups"]]
    meta = _parquet_file(storage.join(root, entry["path"])).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def run(opts: PreprocessOptions, progress: Callable[[dict[str, Any], int | None], None] | None = None) -> dict[str, Any]:
    """Run the pipeline to completion and write the manifest; returns the manifest."""
    import ray

    out = opts.out if storage.has_scheme(opts.out) else str(storage.filesystem(opts.out)[1])
    shards = storage.join(out, "shards")
    if storage.list_dir(shards):
        raise UserError(f"{shards} already has files: choose an empty --out or delete it")
    preset = get_preset(opts.preset, opts.resolution)
    sources.detect(opts.input, opts.fmt)  # fail fast, before any model is built
    spec = prepare_components(preset, opts.pretrained, storage.join(out, "components"), opts.seed)
    stats = ray.remote(num_cpus=0)(Stats).remote()
    ds, source = build_pipeline(opts, spec, stats)
    total = min(source.rows, opts.limit) if source.rows and opts.limit else source.rows or opts.limit

    start = time.perf_counter()
    error: list[BaseException] = []
    fs, shards_path = storage.filesystem(shards)

    def write() -> None:
        try:
            with metrics.span("sd.preprocess.run", input=opts.input):
                ds.write_parquet(shards_path, filesystem=fs, min_rows_per_file=opts.rows_per_file,
                                 row_group_size=opts.rows_per_group)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the driver thread
            error.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    while writer.is_alive():
        writer.join(0.5)
        if progress:
            progress(ray.get(stats.get.remote()), total)
    if error:
        raise error[0]
    counts = ray.get(stats.get.remote())
    if progress:
        progress(counts, total)
    elapsed = time.perf_counter() - start
    files = storage.list_files(shards, (".parquet",))
    metas = {storage.name(f): _parquet_file(f).metadata for f in files}
    written = sum(m.num_rows for m in metas.values())
    if written == 0:
        broken = ", ".join(f"{k}={v}" for k, v in counts["broken"].items()) or "none"
        raise UserError(f"no usable rows in {opts.input} ({counts['rows_in']} read, broken: {broken})")
    first = _parquet_file(files[0]).read_row_group(0, columns=["latents", "text_emb"]).slice(0, 1).to_pylist()[0]
    buffer = io.BytesIO()
    np.save(buffer, uncond_embedding(spec))
    storage.write_bytes(storage.join(out, UNCOND_FILE), buffer.getvalue())
    manifest = {
        "version": 1,
        "input": str(source.root),
        "format": source.fmt,
        "preset": preset.name,
        "resolution": preset.resolution,
        "latent_shape": list(np.asarray(first["latents"]).shape),
        "text_emb_shape": list(np.asarray(first["text_emb"]).shape),
        "dtype": "float16",
        "scaling_factor": preset.vae["scaling_factor"],
        "rows_in": counts["rows_in"],
        "rows": written,
        "broken": counts["broken"],
        "seconds": round(elapsed, 2),
        "components": spec.to_json(),
        "uncond_embedding": UNCOND_FILE,
        "files": [{"path": f"shards/{name}", "rows": m.num_rows,
                   "row_groups": [m.row_group(i).num_rows for i in range(m.num_row_groups)]}
                  for name, m in metas.items()],
    }
    storage.write_text(storage.join(out, MANIFEST), json.dumps(manifest, indent=1))
    return manifest


def load_manifest(uri: str) -> tuple[dict[str, Any], str]:
    """A preprocessed directory's manifest and the directory (UserError when it is not one)."""
    root = uri if storage.has_scheme(uri) else str(storage.filesystem(uri)[1])
    if not storage.exists(storage.join(root, MANIFEST)):
        hint = "" if storage.exists(root) else " (no such directory)"
        raise UserError(f"{uri} has no {MANIFEST}{hint}: run `python -m sd_reference preprocess` first, or pass --online")
    return json.loads(storage.read_text(storage.join(root, MANIFEST))), root
