"""The content store port and its two adapters, chosen by CONTENT_STORE:

* ``FileStore`` (``file``, the default): a directory (CONTENT_STORE_DIR, ``var/content`` for
  ``make run``). An object is written to ``tmp/`` under the root, fsynced, then renamed into
  place (and the directory fsynced): a reader never sees half an object, and ``put`` returns
  only once the bytes are on disk.
* ``S3Store`` (``s3``): boto3 on CONTENT_BUCKET, AWS's S3 or any S3-compatible store
  (CONTENT_S3_ENDPOINT_URL). ``put`` returns once the PUT completed.

Keys are the store's business only through ``keys.py``: content-addressed, so writing the same
bytes twice (an SQS redelivery, a retried request, a crash between the write and the commit)
writes one object.
"""
from __future__ import annotations

import os
import threading
import uuid
from datetime import datetime, timezone
from typing import Iterator, Protocol

from chalicelib.config import get_settings


class Missing(Exception):
    """No object under that key."""


class ContentStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def delete(self, keys: list[str]) -> None: ...

    def list_older(self, start_after: str, older_than: datetime,
                   limit: int) -> Iterator[str]: ...


class FileStore:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self._tmp = os.path.join(self.root, "tmp")

    def _path(self, key: str) -> str:
        if ".." in key or key.startswith("/"):
            raise ValueError(f"not a content key: {key!r}")
        return os.path.join(self.root, key)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            if os.path.getsize(path) == len(data):
                # content-addressed: the same bytes are there already; written "now" again,
                # as an S3 PUT would, so the orphan sweep's grace period starts over
                os.utime(path)
                return
        except FileNotFoundError:
            pass
        directory = os.path.dirname(path)
        tmp = os.path.join(self._tmp, uuid.uuid4().hex)
        # The directories are made when missing, not asked for on every put (a failing
        # mkdir and two stats per put, per directory).
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileNotFoundError:
            os.makedirs(self._tmp, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, path)
        except FileNotFoundError:  # its directory is new (tmp/ is there: the file is)
            os.makedirs(directory, exist_ok=True)
            os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise Missing(key) from None

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                os.unlink(self._path(key))
            except FileNotFoundError:
                pass

    def list_older(self, start_after: str, older_than: datetime, limit: int) -> Iterator[str]:
        """Keys after ``start_after`` (in key order) of objects last written before
        ``older_than``, at most ``limit`` looked at; leftover temporary files too."""
        cutoff = older_than.replace(tzinfo=timezone.utc).timestamp()
        seen = 0
        if not os.path.isdir(self.root):
            return
        for top in sorted(os.listdir(self.root)):
            base = os.path.join(self.root, top)
            if not os.path.isdir(base):
                continue
            for name in sorted(os.listdir(base)):
                key = f"{top}/{name}"
                if key <= start_after:
                    continue
                seen += 1
                if seen > limit:
                    return
                try:
                    if os.path.getmtime(os.path.join(base, name)) < cutoff:
                        yield key
                except FileNotFoundError:
                    continue


class S3Store:
    def __init__(self, bucket: str, endpoint_url: str | None = None, client=None):
        self.bucket = bucket
        if client is None:
            import boto3
            from botocore.config import Config

            # Path-style addressing for a store of one's own (MinIO, moto: bucket names are
            # no host names there); AWS's S3 chooses virtual hosts itself.
            own = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or \
                os.environ.get("AWS_ENDPOINT_URL")
            client = boto3.client("s3", endpoint_url=endpoint_url or None,
                                  config=Config(retries={"mode": "standard", "max_attempts": 5},
                                                max_pool_connections=32,
                                                s3={"addressing_style": "path"} if own else None))
        self._client = client

    def put(self, key: str, data: bytes) -> None:
        # Overwriting a key with the same bytes leaves one object: no existence check first.
        self._client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        try:
            return self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self._client.exceptions.NoSuchKey:
            raise Missing(key) from None

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            chunk = keys[start:start + 1000]
            self._client.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": k} for k in chunk], "Quiet": True})

    def list_older(self, start_after: str, older_than: datetime, limit: int) -> Iterator[str]:
        cutoff = older_than.replace(tzinfo=timezone.utc)
        paginator = self._client.get_paginator("list_objects_v2")
        seen = 0
        for page in paginator.paginate(Bucket=self.bucket, StartAfter=start_after,
                                       PaginationConfig={"PageSize": min(1000, limit)}):
            for item in page.get("Contents", ()):
                seen += 1
                if seen > limit:
                    return
                if item["LastModified"] < cutoff:
                    yield item["Key"]


_store: ContentStore | None = None
_lock = threading.Lock()


def get_store() -> ContentStore:
    global _store
    if _store is None:
        with _lock:
            if _store is None:
                s = get_settings()
                _store = S3Store(s.content_bucket, s.content_s3_endpoint_url) \
                    if s.content_store == "s3" else FileStore(s.content_store_dir)
    return _store


def set_store(store: ContentStore | None) -> None:
    """Use ``store`` (tests); None: choose again from the settings on next use."""
    global _store
    _store = store
