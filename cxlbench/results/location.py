"""Where a results store lives: a local path (or an NFS mount: the same thing), or a
URL that fsspec opens (`s3://bucket/prefix`, through s3fs).

The store's own code stays in store.py; this module only answers "is this a URL",
"which filesystem and options open it" and the few reads and writes a run needs,
so a store on a fleet's object storage behaves like the local one. Options come
from `--store-option KEY=VALUE` (set once per process with `configure`) and, for
S3, from CXLBENCH_S3_ENDPOINT (an S3-compatible server: MinIO, Ceph, moto);
credentials come the usual way (AWS_ACCESS_KEY_ID, ~/.aws), never from here.
"""
from __future__ import annotations

import os
from typing import Any

ENDPOINT_ENV = "CXLBENCH_S3_ENDPOINT"
_options: dict[str, Any] = {}


class ResultsError(Exception):
    """A path that is not a readable cxlbench run; the message says what to do."""


class StoreURLError(ResultsError):
    """A URL or store option that cannot be used; the message is one line."""


def is_url(path: Any) -> bool:
    """A URL for fsspec (s3://, gs://, memory://); plain paths and file:// stay local."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        return text


def parse_options(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings as fsspec options (true/false and integers typed)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise StoreURLError(f"--store-option {item!r} is not KEY=VALUE (e.g. endpoint_url=http://host:9000)")
        out[key.strip()] = _value(value.strip())
    return out


def configure(items: list[str] | dict[str, Any]) -> None:
    """The process's store options (the CLI sets them from --store-option)."""
    _options.clear()
    _options.update(items if isinstance(items, dict) else parse_options(items))


def options(url: str) -> dict[str, Any]:
    """The fsspec options for a URL: the endpoint from the environment for S3, then
    those configured. Listings are never cached: other nodes write while we read."""
    opts: dict[str, Any] = {}
    if url.startswith(("s3://", "s3a://")):
        opts["use_listings_cache"] = False
        opts["config_kwargs"] = dict(S3_PATIENCE)
        if os.environ.get(ENDPOINT_ENV):
            opts["endpoint_url"] = os.environ[ENDPOINT_ENV]
    return {**opts, **_options}


#: How long an S3 endpoint may keep a command waiting: botocore's defaults (a 60 s read
#: timeout, retried by botocore and again by s3fs) left an endpoint that accepts and never
#: answers holding a report for 7 minutes. Each call now gives up after S3_TRIES tries of
#: at most 15 s of silence. A --store-option config_kwargs=... replaces these.
S3_PATIENCE = {"connect_timeout": 10, "read_timeout": 15, "retries": {"max_attempts": 1}}
S3_TRIES = 2


def option_args() -> list[str]:
    """The configured options again as command-line arguments (for the job a fleet sends)."""
    return [f"--store-option={k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in _options.items()]


def filesystem(url: str):
    """(filesystem, path without the protocol) for a URL; one clear line when the
    protocol needs a package that is not installed."""
    import fsspec
    try:
        fs, path = fsspec.core.url_to_fs(url, **options(url))
    except ImportError as e:
        raise StoreURLError(f"{url}: its filesystem needs a package that is not installed ({e})") from None
    except (ValueError, TypeError) as e:
        raise StoreURLError(f"{url}: {e}") from None
    if hasattr(fs, "retries") and "config_kwargs" not in _options:
        fs.retries = S3_TRIES                      # s3fs retries each call itself, on top of botocore
    return fs, path.rstrip("/")


def join(url: str, *parts: str) -> str:
    return "/".join([url.rstrip("/"), *[p.strip("/") for p in parts if p]])


def read_bytes(url: str) -> bytes | None:
    """The object's bytes, or None when there is none."""
    fs, path = filesystem(url)
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        return None


def write_bytes(url: str, data: bytes) -> None:
    """One whole object: an object store shows it complete or not at all, as a
    rename does on a local disk."""
    fs, path = filesystem(url)
    fs.pipe_file(path, data)


def delete(url: str) -> None:
    fs, path = filesystem(url)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        pass


def glob(url: str, pattern: str) -> list[str]:
    """URLs of the objects matching `pattern` below `url`, sorted."""
    fs, path = filesystem(url)
    protocol = url.split("://", 1)[0]
    return sorted(f"{protocol}://{p}" for p in fs.glob(f"{path}/{pattern}"))


def check_reachable(url: str) -> None:
    """Fail before measuring when the store cannot be listed (a wrong endpoint, no
    bucket, no credentials): a run that cannot keep its samples is not started."""
    fs, path = filesystem(url)
    if not url.startswith(("s3://", "s3a://")):
        return
    bucket = path.split("/", 1)[0]
    try:
        fs.ls(bucket)
    except FileNotFoundError:
        raise StoreURLError(f"{url}: no bucket {bucket!r} at this endpoint") from None
    except Exception as e:         # botocore and aiohttp raise many types for one bad endpoint
        raise StoreURLError(f"{url}: the store cannot be reached ({type(e).__name__}: {e})".splitlines()[0]) \
            from None
