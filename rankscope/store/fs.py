"""fsspec URL handling for run directories: open, classify failures, probe at start.

A run URL is a local path or any fsspec URL (``file://``, ``s3://``, ``gs://``, ...).
Failures are sorted into two kinds, because they call for different behaviour:

* **configuration errors** (unknown protocol, missing driver package, missing or wrong
  credentials, missing bucket, permission denied): :class:`~rankscope.errors.RankscopeError`
  at profile start, before training begins;
* **unreachable storage** (connection refused, timeouts, 5xx): training goes on, data stays
  in the local spool, one warning.
"""
from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from rankscope.errors import RankscopeError
from rankscope.store import layout

# Object stores publish an object only once its upload completes (a single PUT, or the
# CompleteMultipartUpload call for multipart uploads), so readers never see a partial
# object and no rename is needed (nor possible cheaply: S3 "rename" is copy+delete).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "adl", "oss"})

_CREDENTIAL_ERRORS = frozenset({
    "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "DefaultCredentialsError",
    "RefreshError", "ExpiredToken", "ExpiredTokenException",
})


class StorageUnreachable(Exception):
    """Storage could not be reached (network, timeout, server error): retry later."""


@dataclass
class Target:
    """An opened run directory: filesystem, root path and how to publish atomically."""

    url: str
    fs: Any
    root: str
    object_store: bool
    options: dict[str, Any] = field(default_factory=dict)

    def path(self, rel: str) -> str:
        """Filesystem path of a run-relative path."""
        return layout.join(self.root, rel)


def _protocol(fs: Any) -> str:
    proto = fs.protocol
    return proto[0] if isinstance(proto, (tuple, list)) else str(proto)


def default_options(url: str) -> dict[str, Any]:
    """Storage options rankscope adds: short timeouts so a dead store fails fast."""
    if url.startswith(("s3://", "s3a://")):
        # s3fs otherwise retries connection failures for a long time inside each call;
        # rankscope's uploader does its own retries with backoff.
        # skip_instance_cache: our own instance, so lowering its retry count below touches
        # no s3fs instance the user's code shares.
        return {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60,
                                  "retries": {"max_attempts": 2, "mode": "standard"}},
                "skip_instance_cache": True}
    return {}


def open_target(url: str, storage_options: dict[str, Any] | None = None) -> Target:
    """Open a run URL; raise RankscopeError when the URL itself is unusable."""
    import fsspec.core

    if not url or not isinstance(url, str):
        raise RankscopeError(f"run URL {url!r} is empty: pass run='DIR' or an fsspec URL like s3://bucket/run")
    opts = {**default_options(url), **(storage_options or {})}
    try:
        fs, root = fsspec.core.url_to_fs(url, **opts)
    except ImportError as exc:
        raise RankscopeError(f"run URL {url}: the driver for this protocol is not installed ({exc}); "
                             "install it (e.g. s3fs for s3://, gcsfs for gs://)") from exc
    except (ValueError, TypeError) as exc:
        raise RankscopeError(f"run URL {url} is not valid: {exc}; use a path or proto://bucket/prefix") from exc
    proto = _protocol(fs)
    if proto in ("s3", "s3a"):
        fs.retries = 2  # s3fs class default 5 with sleeps: one call would block ~10 s on a dead store
    if proto in OBJECT_STORES and not root.strip("/"):
        raise RankscopeError(f"run URL {url} names no bucket; use {proto}://BUCKET/PREFIX")
    return Target(url=url, fs=fs, root=root.rstrip("/"), object_store=proto in OBJECT_STORES, options=opts)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def classify(exc: BaseException) -> str:
    """'credentials', 'config', 'permission', 'missing', or 'unreachable' for a storage exception."""
    for e in _chain(exc):
        name = type(e).__name__
        resp = getattr(e, "response", None)
        err = resp.get("Error") if isinstance(resp, dict) else None
        code = str(err.get("Code", "")) if isinstance(err, dict) else ""
        if name in _CREDENTIAL_ERRORS or code in _CREDENTIAL_ERRORS:
            return "credentials"
        if "Unable to locate credentials" in str(e):
            return "credentials"
    for e in _chain(exc):
        if isinstance(e, (TypeError, ValueError)) and not isinstance(e, OSError):
            return "config"
        if isinstance(e, PermissionError):
            return "permission"
        if isinstance(e, (FileNotFoundError, NotADirectoryError)):
            return "missing"
    return "unreachable"


def _probe_once(target: Target, rank: int) -> None:
    probe = target.path(layout.tmp_rel(f"{layout.rank_dir(rank)}/probe", uuid.uuid4().hex[:8]))
    if not target.object_store:
        target.fs.makedirs(target.path(layout.rank_dir(rank)), exist_ok=True)
    target.fs.pipe_file(probe, b"rankscope probe\n")
    target.fs.rm_file(probe)


def probe(target: Target, rank: int = 0, timeout_s: float = 10.0) -> str | None:
    """Check the run directory is writable; return None, or a reason it is unreachable.

    Raises RankscopeError for configuration errors (credentials, permissions, missing bucket).
    """
    box: dict[str, BaseException] = {}

    def work() -> None:
        try:
            _probe_once(target, rank)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            box["exc"] = exc

    t = threading.Thread(target=work, name="rankscope-probe", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return f"no answer within {timeout_s:g} s"
    exc = box.get("exc")
    if exc is None:
        return None
    kind = classify(exc)
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if kind == "credentials":
        raise RankscopeError(f"run URL {target.url}: no valid credentials ({msg}); set them in the "
                             "environment (e.g. AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) or storage_options")
    if kind == "permission":
        raise RankscopeError(f"run URL {target.url}: permission denied ({msg}); pick a directory you can write")
    if kind == "config":
        raise RankscopeError(f"run URL {target.url}: bad storage options or URL ({msg}); check storage_options")
    if kind == "missing":
        raise RankscopeError(f"run URL {target.url}: bucket or parent does not exist ({msg}); create it first")
    return msg
