"""Where the app reads and writes: a local path, `file://`, `s3://`, `gs://`, or anything fsspec reaches.

Every input and output of the app (raw data, latents, components, runs, checkpoints,
logs, pipelines, samples) is a URI handled here through a pyarrow filesystem:
pyarrow's own for local, S3, GCS and HDFS, fsspec's (wrapped) for other schemes. An
S3-compatible store is reached with the standard `AWS_ENDPOINT_URL` variable or with
pyarrow's URI options (`s3://bucket/path?endpoint_override=http://host:9000`), which
`join` keeps on every derived URI. Code that needs a real directory (diffusers'
`from_pretrained`) calls `localize`, which copies a remote directory once per node.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sd_reference.errors import UserError

CACHE_DIR_NAME = "sd_reference-cache"
_COMPLETE = ".complete"


def has_scheme(uri: str | os.PathLike[str]) -> bool:
    """True for `scheme://...` (including file://), False for a plain path."""
    return "://" in os.fspath(uri)


def is_remote(uri: str) -> bool:
    """True when the URI is not on this machine's file system (s3://, gs://, ...)."""
    return has_scheme(uri) and not uri.startswith("file://")


def join(uri: str | os.PathLike[str], *parts: str) -> str:
    """`uri/part/...`, keeping a URI's query (pyarrow options such as endpoint_override)."""
    uri = os.fspath(uri)
    if not has_scheme(uri):
        return str(Path(uri).joinpath(*parts))
    scheme, netloc, path, query, fragment = urlsplit(uri)
    path = "/".join([path.rstrip("/"), *(p.strip("/") for p in parts)])
    return urlunsplit((scheme, netloc, path, query, fragment))


def name(uri: str) -> str:
    """The last component of a path or URI."""
    return Path(urlsplit(uri).path if has_scheme(uri) else uri).name


def filesystem(uri: str | os.PathLike[str]) -> tuple[Any, str]:
    """(pyarrow FileSystem, path inside it) for a URI; a plain path is made absolute."""
    import pyarrow.fs as pafs

    uri = os.fspath(uri)
    if not has_scheme(uri):
        return pafs.LocalFileSystem(), str(Path(uri).expanduser().resolve())
    try:
        return pafs.FileSystem.from_uri(uri)
    except ValueError:  # ArrowInvalid: a scheme pyarrow does not know; try fsspec
        pass
    except OSError as exc:
        raise UserError(f"cannot open {uri}: {exc}") from exc
    try:
        import fsspec
    except ImportError as exc:
        raise UserError(f"pyarrow does not know the scheme of {uri} and fsspec is not installed") from exc
    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise UserError(f"no file system for {uri}: {exc}") from exc
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def _info(uri: str) -> Any:
    fs, path = filesystem(uri)
    return fs.get_file_info(path)


def exists(uri: str) -> bool:
    import pyarrow.fs as pafs

    return bool(_info(uri).type != pafs.FileType.NotFound)


def is_dir(uri: str) -> bool:
    import pyarrow.fs as pafs

    return bool(_info(uri).type == pafs.FileType.Directory)


def size(uri: str) -> int:
    return int(_info(uri).size or 0)


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as f:
        return bytes(f.read())


def read_text(uri: str) -> str:
    return read_bytes(uri).decode()


def write_bytes(uri: str, data: bytes) -> None:
    """Write a whole file (an object on object stores); parent directories are made."""
    fs, path = filesystem(uri)
    parent = path.rsplit("/", 1)[0]
    if parent:
        fs.create_dir(parent, recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(data)


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode())


def append_text(uri: str, text: str) -> bool:
    """Append to a file where the file system can (local, HDFS); False where it cannot (S3, GCS)."""
    fs, path = filesystem(uri)
    try:
        stream = fs.open_append_stream(path)
    except NotImplementedError:  # pyarrow's ArrowNotImplementedError: S3, GCS
        return False
    with stream:
        stream.write(text.encode())
    return True


def makedirs(uri: str) -> None:
    fs, path = filesystem(uri)
    fs.create_dir(path, recursive=True)


def list_dir(uri: str) -> list[str]:
    """Names directly under a directory (empty when it does not exist)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(Path(i.path).name for i in infos)


def list_files(uri: str, suffixes: tuple[str, ...] = ()) -> list[str]:
    """Files under a directory, recursively, as URIs in the same form as `uri`; sorted."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    if fs.get_file_info(path).type == pafs.FileType.File:
        found = [path]
    else:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        found = [i.path for i in infos if i.type == pafs.FileType.File]
    keep = [p for p in found if not suffixes or p.lower().endswith(suffixes)]
    root = path.rstrip("/")
    return sorted(join(uri, p[len(root):].lstrip("/")) if p != root else uri for p in keep)


def delete_dir(uri: str) -> None:
    fs, path = filesystem(uri)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(path)


def upload_dir(local: Path, uri: str, replace: bool = False) -> None:
    """Copy a local directory's contents to `uri` (any file system); `replace` deletes what was there."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    if isinstance(fs, pafs.LocalFileSystem) and Path(path) == local.resolve():
        return
    if replace:
        delete_dir(uri)
    fs.create_dir(path, recursive=True)
    pafs.copy_files(str(local), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)


def download_dir(uri: str, local: Path) -> None:
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    local.mkdir(parents=True, exist_ok=True)
    pafs.copy_files(path, str(local), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


def _node_tag() -> str:
    """This process's Ray node (so two raylets on one machine keep separate caches), else "local"."""
    try:
        import ray

        if ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())[:16]
    except Exception:  # noqa: BLE001 - outside Ray, or a Ray without a runtime context here
        pass
    return "local"


def _listing_digest(uri: str) -> str:
    """Names, sizes and times of a remote directory's files: a changed upload gets a new cache entry."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    h = hashlib.sha256(uri.encode())
    for i in sorted(infos, key=lambda i: i.path):
        h.update(f"{i.path}|{i.size}|{i.mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def cache_root() -> Path:
    return Path(tempfile.gettempdir()) / CACHE_DIR_NAME / _node_tag()


def localize(uri: str) -> Path:
    """A local directory with the contents of `uri`: the path itself when local, else a per-node cached copy."""
    if not is_remote(uri):
        return Path(filesystem(uri)[1])
    target = cache_root() / _listing_digest(uri)
    if (target / _COMPLETE).exists():
        return target
    staging = target.with_name(f"{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    download_dir(uri, staging)
    (staging / _COMPLETE).write_text(uri)
    try:
        staging.rename(target)  # atomic: a concurrent process either wins or finds it done
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / _COMPLETE).exists():
            raise
    return target


def local_or_staging(uri: str) -> tuple[Path, bool]:
    """Where to write a directory destined for `uri`: (the directory itself, False) when local,
    else (a fresh temporary directory, True) to `upload_dir` afterwards."""
    if not is_remote(uri):
        path = Path(filesystem(uri)[1])
        path.mkdir(parents=True, exist_ok=True)
        return path, False
    return Path(tempfile.mkdtemp(prefix="sd_reference-out-")), True


def finish_staging(local: Path, uri: str, staged: bool, replace: bool = False) -> None:
    """Upload a directory made by `local_or_staging` (and remove the temporary copy)."""
    if staged:
        try:
            upload_dir(local, uri, replace)
        finally:
            shutil.rmtree(local, ignore_errors=True)


def require_reachable(uris: dict[str, str | None], alive_nodes: int, shared: bool) -> None:
    """On a cluster of several nodes, refuse plain local paths (each node has its own disk).

    `uris` maps the option name (for the message) to its value. A `file://` URI or
    `shared=True` (--shared-fs) says the path is on a mount every node sees.
    """
    if alive_nodes <= 1 or shared:
        return
    for option, uri in uris.items():
        if uri and not has_scheme(uri):
            raise UserError(
                f"{option} {uri} is a local path and this Ray cluster has {alive_nodes} nodes that do not share "
                f"it: use object storage (s3://bucket/{name(uri) or 'path'}, gs://...), or file://{Path(uri).resolve()} "
                "or --shared-fs if every node mounts it"
            )
