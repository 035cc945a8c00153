"""Where a Delta table is, as Spark and as delta-rs name it.

Storage is a local path or a Hadoop file-system URI (``file://``, ``s3a://``, ``abfss://`` ...);
delta-rs names S3 ``s3://`` where Hadoop's connector says ``s3a://``.
"""

from __future__ import annotations

import os
from pathlib import Path


def storage_uri(base: str | Path) -> str:
    """``base`` as a URI string, a plain path made absolute."""
    text = str(base)
    if "://" in text:
        return text.rstrip("/")
    return str(Path(text).expanduser().absolute())


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def delta_rs_uri(uri: str) -> str:
    """delta-rs names S3 ``s3://`` (Hadoop's connector ``s3a://``)."""
    return "s3://" + uri.removeprefix("s3a://") if uri.startswith("s3a://") else uri


def hadoop_uri(uri: str) -> str:
    """A URI delta-rs gives (``s3://``) as Spark's Hadoop connector names it (``s3a://``)."""
    return "s3a://" + uri.removeprefix("s3://") if uri.startswith("s3://") else uri


def delta_rs_storage_options() -> dict[str, str]:
    """delta-rs reads AWS_* from the environment; plain-HTTP endpoints need this switch too."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    return {"AWS_ALLOW_HTTP": "true"} if endpoint.startswith("http://") else {}
