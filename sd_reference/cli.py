"""Command line: `python -m sd_reference {make-data,preprocess,train,export,sample,bench}`.

Each command has --help, a rich progress bar and ends with a one-line summary.
Mistakes a user can fix (bad paths, flags, data) end in one error line, exit 2.
Every path option takes a local path or a URI (s3://bucket/path, gs://, file://...).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from sd_reference.errors import UserError

WORK = Path("sd_work")  # default root of everything the commands write


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (and points at --help)."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see `{self.prog} --help`)")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def build_parser() -> Parser:
    p = Parser(prog="python -m sd_reference", description="Reference Stable Diffusion app: Ray Data preprocessing, Ray Train FSDP2 training.")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (logs, CI)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    m = sub.add_parser("make-data", help="write the synthetic captioned shapes data set")
    m.add_argument("--out", default=str(WORK / "data"), help="output directory or URI (default: %(default)s)")
    m.add_argument("--num", type=_positive_int, default=256, help="number of images (default: %(default)s)")
    m.add_argument("--seed", type=int, default=0, help="the same seed gives byte-identical files")
    m.add_argument("--shards", type=_positive_int, default=2, help="parquet files / tar shards")
    m.add_argument("--broken", type=int, default=0, help="deliberately broken rows to include")
    m.add_argument("--formats", default="parquet,webdataset", help="comma list of parquet, webdataset, folder")

    pp = sub.add_parser("preprocess", help="Ray Data: images + captions -> latent parquet shards")
    pp.add_argument("--input", default=str(WORK / "data" / "laion"), help="parquet / webdataset / image folder (path or URI)")
    pp.add_argument("--format", default="auto", help="auto, parquet, webdataset or folder")
    pp.add_argument("--out", default=str(WORK / "latents"), help="output directory or URI (default: %(default)s)")
    _model_args(pp)
    pp.add_argument("--caption-column", help="parquet caption column (default: caption)")
    pp.add_argument("--image-column", help="parquet image-bytes column (default: jpg)")
    pp.add_argument("--key-column", help="parquet key column (default: hash)")
    pp.add_argument("--cpu-batch-size", type=_positive_int, default=32)
    pp.add_argument("--cpu-concurrency", type=_positive_int, default=2, help="parallel CPU-stage tasks")
    pp.add_argument("--encode-batch-size", type=_positive_int, default=16)
    pp.add_argument("--encode-concurrency", type=_positive_int, default=1, help="encoder actors (one GPU each when present)")
    pp.add_argument("--rows-per-file", type=_positive_int, default=2048)
    pp.add_argument("--rows-per-group", type=_positive_int, default=256,
                    help="parquet row group size: the unit training reads (default: %(default)s)")
    pp.add_argument("--limit", type=_positive_int, help="only the first N input rows")
    pp.add_argument("--num-cpus", type=_positive_int, help="logical CPUs for a local Ray (default 8)")
    pp.add_argument("--shared-fs", action="store_true", help="local paths are on a file system every node mounts")

    t = sub.add_parser("train", help="Ray Train: UNet with FSDP2 or DDP, checkpoints, resume")
    t.add_argument("--data", default=str(WORK / "latents"), help="preprocessed dir (or raw input with --online)")
    t.add_argument("--online", action="store_true", help="encode images and captions inside the loop")
    t.add_argument("--cache-data-mib", type=_positive_int, default=1024,
                   help="latent row groups each worker keeps in memory (default: %(default)s MiB)")
    t.add_argument("--shuffle-window", type=_positive_int, default=8,
                   help="row groups whose rows are shuffled together each epoch (default: %(default)s)")
    _model_args(t)
    t.add_argument("--pretrained-unet", action="store_true", help="also start the UNet from --pretrained")
    t.add_argument("--storage-path", default=str(WORK / "runs"), help="Ray Train storage, path or URI (default: %(default)s)")
    t.add_argument("--shared-fs", action="store_true", help="local paths are on a file system every node mounts")
    t.add_argument("--name", help="run name; the same name resumes (default: sd-PRESET)")
    t.add_argument("--workers", default="2", help="N, or MIN:MAX for an elastic run (default: %(default)s)")
    t.add_argument("--resize-check-s", type=float, default=60.0,
                   help="elastic: seconds between Ray Train's looks for room to grow (default: %(default)s)")
    t.add_argument("--placement", default="PACK", help="PACK, SPREAD, STRICT_PACK or STRICT_SPREAD workers over nodes")
    t.add_argument("--cpus-per-worker", type=float, default=1.0)
    t.add_argument("--strategy", default="fsdp", help="fsdp (FSDP2 fully_shard) or ddp")
    t.add_argument("--fsdp-mode", default="full", help="full (reshard after forward) or grad-op (ZeRO-2)")
    t.add_argument("--steps", type=_positive_int, help="total optimizer steps (default: preset's)")
    t.add_argument("--batch-size", type=_positive_int, help="per worker (default: preset's)")
    t.add_argument("--lr", type=float)
    t.add_argument("--warmup-steps", type=int)
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--grad-clip", type=float, default=1.0)
    t.add_argument("--prediction-type", default="epsilon", help="epsilon or v_prediction")
    t.add_argument("--snr-gamma", type=float, default=0.0, help="min-SNR weighting gamma (0: off; 5 is usual)")
    t.add_argument("--ema-decay", type=float)
    t.add_argument("--caption-dropout", type=float, default=0.1, help="probability of an empty caption (CFG)")
    t.add_argument("--checkpoint-every", type=_positive_int, default=100)
    t.add_argument("--keep-checkpoints", type=_positive_int, default=3)
    t.add_argument("--max-failures", type=int, default=3)
    t.add_argument("--inject-failure-at-step", type=int, help="kill one worker once at this step (demo/tests)")
    t.add_argument("--inject-sigterm-at-step", type=int, help="SIGTERM one worker once at this step (preemption demo/tests)")
    t.add_argument("--sync-save", action="store_true", help="write checkpoints before the next step (default: in the background)")
    t.add_argument("--log-samples", action="store_true", help="log every step's sample keys, all ranks (resume checks)")
    t.add_argument("--min-step-seconds", type=float, default=0.0, help="slow each step down to this (elasticity demos)")
    t.add_argument("--breakpoint-at-step", type=int, help="rank 0 calls breakpoint() before this step (raydbg)")
    t.add_argument("--fingerprint", action="store_true", help="hash state at checkpoint and resume")
    t.add_argument("--compile", action="store_true", help="torch.compile the UNet")
    t.add_argument("--cpu", action="store_true", help="do not use GPUs even if present")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-export", action="store_true", help="skip exporting the pipeline at the end")
    t.add_argument("--export-dir", help="pipeline directory (default: RUN/pipeline)")
    t.add_argument("--num-cpus", type=_positive_int, help="logical CPUs for a local Ray (default 8)")
    _train_feature_args(t)

    e = sub.add_parser("export", help="a run's EMA UNet + components as a diffusers pipeline")
    e.add_argument("--run", default=str(WORK / "runs" / "sd-tiny"), help="run directory or URI (default: %(default)s)")
    e.add_argument("--out", help="pipeline directory or URI (default: RUN/pipeline)")
    e.add_argument("--checkpoint", help="a step_XXXXXXXX directory (default: the latest)")
    e.add_argument("--no-ema", action="store_true", help="export the raw weights, not the EMA")

    s = sub.add_parser("sample", help="PNG images from prompts, plus the loss curve")
    s.add_argument("--pipeline", default=str(WORK / "runs" / "sd-tiny" / "pipeline"))
    s.add_argument("--out", default=str(WORK / "samples"))
    s.add_argument("--prompt", action="append", help="repeatable (default: four shape prompts)")
    s.add_argument("--steps", type=_positive_int, default=25, help="denoising steps")
    s.add_argument("--guidance", type=float, default=5.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--log", help="run directory or training log for the loss curve (default: the exported run's)")

    b = sub.add_parser("bench", help="offline vs online throughput; FSDP2 vs DDP memory and speed")
    b.add_argument("--what", default="all", help="all, online, parallel, learning or features")
    b.add_argument("--width-div", type=int, default=8, help="SD2 widths divided by this (default: %(default)s)")
    b.add_argument("--resolution", type=_positive_int, default=128)
    b.add_argument("--batch-size", type=_positive_int, default=4)
    b.add_argument("--steps", type=_positive_int, default=6, help="timed steps per configuration")
    b.add_argument("--threads", type=_positive_int, default=1,
                   help="torch threads in the one-process benchmarks (1: stable on a shared machine)")
    b.add_argument("--out", default=str(WORK / "bench.json"))
    return p


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", help="tiny, small or sd2-base (default: tiny; train: the latents' preset)")
    p.add_argument("--resolution", type=_positive_int, help="image size (default: preset's)")
    p.add_argument("--pretrained", help="local diffusers model dir for VAE, text encoder, tokenizer, scheduler")


def _train_feature_args(t: argparse.ArgumentParser) -> None:
    """Training features of SD2-scale runs (docs/sd_reference.md, "Training features")."""
    t.add_argument("--grad-accum", type=_positive_int, default=1,
                   help="micro-batches of --batch-size per optimizer step; gradients sync on the last only")
    t.add_argument("--grad-checkpointing", action="store_true", help="recompute UNet activations in backward")
    t.add_argument("--optimizer", default="auto", help="AdamW kernel: auto (fused where supported), fused, foreach, for-loop")
    t.add_argument("--log-every", type=_positive_int, default=1,
                   help="read the loss back from the device every N steps (10-50 on GPU: fewer host syncs)")
    t.add_argument("--sync-timings", action="store_true",
                   help="synchronise the device around each timed part (exact per-part GPU times; slower)")
    t.add_argument("--no-tf32", action="store_true", help="keep float32 matmuls in full precision on GPU")
    t.add_argument("--val-every", type=int, default=0, help="validation loss every N steps (0: off)")
    t.add_argument("--val-rows", type=_positive_int, default=32, help="rows in the validation set")
    t.add_argument("--sample-every", type=int, default=0, help="sample grid PNG every N steps (0: off)")


def _train_features(args: argparse.Namespace) -> dict[str, Any]:
    return {"grad_accum": args.grad_accum, "grad_checkpointing": args.grad_checkpointing,
            "optimizer": args.optimizer, "log_every": args.log_every, "sync_timings": args.sync_timings,
            "tf32": not args.no_tf32, "val_every": args.val_every, "val_rows": args.val_rows,
            "sample_every": args.sample_every}


def main(argv: list[str] | None = None) -> int:
    # Import-time chatter (e.g. "requires torchvision") is noise for this app's users.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    try:
        args = build_parser().parse_args(argv)
        if args.command in ("preprocess", "train", "bench"):
            from sd_reference import metrics

            metrics.setup()
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"sd_reference: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sd_reference: interrupted", file=sys.stderr)
        return 130


def cmd_make_data(args: argparse.Namespace) -> int:
    from sd_reference import storage, synth, ui

    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    bad = [f for f in formats if f not in synth.FORMATS]
    if bad or not formats:
        raise UserError(f"unknown format(s) {', '.join(bad) or '(none)'}: choose from {', '.join(synth.FORMATS)}")
    if not 0 <= args.broken <= args.num:
        raise UserError(f"--broken must be between 0 and --num ({args.num})")
    start = time.perf_counter()
    out, staged = storage.local_or_staging(args.out)
    with ui.progress(not args.no_progress) as bar:
        task = bar.add_task("make-data", total=args.num, info="")
        written = synth.make_data(out, args.num, args.seed, args.shards, args.broken, formats,
                                  on_sample=lambda: bar.advance(task))
    storage.finish_staging(out, args.out, staged)
    ui.summary(f"make-data: {args.num} images ({args.broken} broken) in {time.perf_counter() - start:.1f}s -> "
               + ", ".join(f"{k}: {v}" for k, v in written.items()))
    return 0


def cmd_preprocess(args: argparse.Namespace) -> int:
    from sd_reference import preprocess, sources, storage, ui
    from sd_reference.cluster import alive_nodes, ensure_ray
    from sd_reference.presets import get_preset

    args.preset = args.preset or "tiny"
    get_preset(args.preset, args.resolution)
    sources.detect(args.input, args.format)  # one-line errors before Ray starts
    columns = {k: v for k, v in (("caption", args.caption_column), ("image", args.image_column),
                                 ("key", args.key_column)) if v}
    opts = preprocess.PreprocessOptions(
        input=args.input, out=args.out, fmt=args.format, preset=args.preset, resolution=args.resolution,
        pretrained=args.pretrained, columns=columns, cpu_batch_size=args.cpu_batch_size,
        cpu_concurrency=args.cpu_concurrency, encode_batch_size=args.encode_batch_size,
        encode_concurrency=args.encode_concurrency, rows_per_file=args.rows_per_file,
        rows_per_group=args.rows_per_group, limit=args.limit,
    )
    ensure_ray(args.num_cpus)
    storage.require_reachable({"--input": args.input, "--out": args.out, "--pretrained": args.pretrained},
                              alive_nodes(), args.shared_fs)
    with ui.progress(not args.no_progress) as bar:
        task = bar.add_task("preprocess", total=None, info="")

        def update(counts: dict[str, Any], total: int | None) -> None:
            broken = sum(counts["broken"].values())
            bar.update(task, total=total, completed=counts["rows_in"],
                       info=f"encoded {counts['encoded']}  broken {broken}")

        manifest = preprocess.run(opts, update)
    broken = ", ".join(f"{k} {v}" for k, v in manifest["broken"].items()) or "none"
    ui.summary(f"preprocess: {manifest['rows']}/{manifest['rows_in']} rows ({manifest['format']}) in "
               f"{manifest['seconds']}s, broken: {broken}; latents {manifest['latent_shape']} -> {args.out}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from sd_reference import train, ui
    from sd_reference.cluster import ensure_ray
    from sd_reference.config import TrainConfig, parse_workers

    preset = args.preset
    if not args.online:
        from sd_reference.preprocess import load_manifest

        preset = preset or load_manifest(args.data)[0]["preset"]  # one-line error when not preprocessed
    min_workers, workers = parse_workers(args.workers)
    cfg = TrainConfig(
        data=args.data, online=args.online, cache_data_mib=args.cache_data_mib, preset=preset or "tiny",
        resolution=args.resolution,
        pretrained=args.pretrained, pretrained_unet=args.pretrained_unet, storage_path=args.storage_path,
        name=args.name, workers=workers, min_workers=min_workers, resize_check_s=args.resize_check_s,
        placement=args.placement.upper(), shared_fs=args.shared_fs, cpus_per_worker=args.cpus_per_worker,
        use_gpu=False if args.cpu else None, strategy=args.strategy, fsdp_mode=args.fsdp_mode, steps=args.steps,
        batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup_steps, weight_decay=args.weight_decay,
        grad_clip=args.grad_clip, prediction_type=args.prediction_type, snr_gamma=args.snr_gamma,
        ema_decay=args.ema_decay, caption_dropout=args.caption_dropout, checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints, max_failures=args.max_failures,
        inject_failure_at_step=args.inject_failure_at_step, inject_sigterm_at_step=args.inject_sigterm_at_step,
        async_save=not args.sync_save, log_samples=args.log_samples, min_step_seconds=args.min_step_seconds,
        shuffle_window=args.shuffle_window, breakpoint_at_step=args.breakpoint_at_step, fingerprint=args.fingerprint,
        compile=args.compile, seed=args.seed, export=not args.no_export, export_dir=args.export_dir,
        **_train_features(args),
    ).resolved()
    ensure_ray(args.num_cpus)
    with ui.progress(not args.no_progress) as bar:
        task = bar.add_task(f"train {cfg.name}", total=cfg.steps, info="")

        def on_record(r: dict[str, Any]) -> None:
            if r.get("event") == "resume":
                bar.update(task, completed=r["step"], info=f"resumed at step {r['step']} on {r.get('world_size')} worker(s)")
            elif r.get("event") == "preempted":
                bar.update(task, info=f"SIGTERM: saved step {r['step']}, restarting")
            elif r.get("event") is None and "loss" in r:
                mfu = f"  MFU {100 * r['mfu']:.1f}%" if r.get("mfu") is not None else ""
                bar.update(task, completed=r["step"], info=f"loss {r['loss']:.4f}  {r['images_per_s']:.1f} img/s{mfu}")
            elif r.get("event") == "validation" and "val_loss" in r:
                bar.update(task, info=f"val loss {r['val_loss']:.4f} at step {r['step']}")

        result = train.run(cfg, on_record)
    loss = f"{result.loss:.4f}" if result.loss is not None else "n/a"
    ui.summary(f"train: step {result.step} in {result.seconds:.0f}s, loss {loss}, {result.restarts} resume(s); "
               f"checkpoint {result.checkpoint}" + (f"; pipeline {result.pipeline}" if result.pipeline else ""))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from sd_reference import checkpoint, storage, ui
    from sd_reference.export import export_pipeline, load_run

    run_dir = args.run
    out = args.out or storage.join(run_dir, "pipeline")
    load_run(run_dir)  # one-line errors before the progress display starts
    ckpt = args.checkpoint or checkpoint.latest(run_dir)
    with ui.progress(not args.no_progress) as bar:
        bar.add_task("export", total=None, info="")
        export_pipeline(run_dir, out, ckpt, use_ema=not args.no_ema)
    ui.summary(f"export: {'EMA' if not args.no_ema else 'raw'} UNet of {run_dir} -> {out} "
               "(StableDiffusionPipeline.from_pretrained loads it)")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from sd_reference import storage, ui
    from sd_reference.sample import DEFAULT_PROMPTS, sample

    prompts = args.prompt or list(DEFAULT_PROMPTS)
    if not storage.exists(storage.join(args.pipeline, "model_index.json")):
        raise UserError(f"{args.pipeline} is not a diffusers pipeline (no model_index.json): run export first")
    with ui.progress(not args.no_progress) as bar:
        bar.add_task("sample", total=None, info=f"{len(prompts)} prompt(s)")
        files = sample(args.pipeline, args.out, prompts, args.steps, args.guidance, args.seed, args.log)
    ui.summary(f"sample: {len(files)} PNG file(s) in {args.out}: " + ", ".join(files))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from sd_reference.bench import run_bench

    return run_bench(args)


COMMANDS = {
    "make-data": cmd_make_data,
    "preprocess": cmd_preprocess,
    "train": cmd_train,
    "export": cmd_export,
    "sample": cmd_sample,
    "bench": cmd_bench,
}
