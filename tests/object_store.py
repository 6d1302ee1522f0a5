"""An S3 endpoint on this machine for the object-store tests: moto's server on 127.0.0.1.

``s3`` (session-scoped) starts :class:`moto.server.ThreadedMotoServer` on a free port, as s3fs's own
test suite does, with dummy credentials in the environment, and gives an :class:`S3Endpoint`:
its ``endpoint_url``, the ``storage_options`` dict that s3fs (and vdbflow, and zarr through fsspec)
take, and ``bucket()`` for a fresh empty bucket; ``checked_credentials()`` makes the server check
credentials for a while (moto accepts any by default). ``memory_fs`` gives a clean ``memory://`` store.
Registered for every test file by an import in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "vdbflow-test-key",
    "AWS_SECRET_ACCESS_KEY": "vdbflow-test-secret",
    "AWS_SESSION_TOKEN": "vdbflow-test-token",
    "AWS_DEFAULT_REGION": "us-east-1",
}
_counter = itertools.count()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class S3Endpoint:
    """The moto S3 server the tests talk to."""

    endpoint_url: str
    storage_options: dict = field(default_factory=dict)

    def filesystem(self):
        """A fresh s3fs filesystem on this endpoint (no instance cache, so no stale listings)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)

    def bucket(self, prefix: str = "vdbflow") -> str:
        """Create a new empty bucket and return its name (``s3://NAME/...`` is where tests write)."""
        import boto3

        name = f"{prefix}-{os.getpid()}-{next(_counter)}"
        client = boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")
        client.create_bucket(Bucket=name)
        return name

    @contextlib.contextmanager
    def checked_credentials(self) -> Iterator[dict]:
        """Within the block the server checks every request's credentials (moto's IAM authorization);
        yields storage_options with a valid key (an IAM user allowed s3:*), others are refused (403)."""
        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint_url, region_name="us-east-1")
        user = f"vdbflow-test-{next(_counter)}"
        iam.create_user(UserName=user)
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        options = {k: v for k, v in self.storage_options.items() if k != "token"}
        options.update(key=key["AccessKeyId"], secret=key["SecretAccessKey"])
        self._reset_auth(b"0")
        try:
            yield options
        finally:
            self._reset_auth(b"inf")

    def _reset_auth(self, count: bytes) -> None:
        """Requests the server lets through before it checks credentials (``inf``: never checks)."""
        url = f"{self.endpoint_url}/moto-api/reset-auth"
        request = urllib.request.Request(url, data=count, method="POST", headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200

    def put(self, url: str, data: bytes) -> None:
        """Write ``data`` to ``s3://bucket/key`` with plain boto3 (independent of vdbflow and s3fs)."""
        import boto3

        bucket, _, key = url.removeprefix("s3://").partition("/")
        client = boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")
        client.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, url: str) -> bytes:
        """Read ``s3://bucket/key`` with plain boto3."""
        import boto3

        bucket, _, key = url.removeprefix("s3://").partition("/")
        client = boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Endpoint]:
    """moto's S3 server on 127.0.0.1 for the whole session, with dummy credentials set."""
    from moto.server import ThreadedMotoServer

    saved = {name: os.environ.get(name) for name in _CREDENTIALS}
    os.environ.update(_CREDENTIALS)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    options = {
        "endpoint_url": endpoint,
        "key": _CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret": _CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "token": _CREDENTIALS["AWS_SESSION_TOKEN"],
        "client_kwargs": {"region_name": "us-east-1"},
    }
    try:
        yield S3Endpoint(endpoint_url=endpoint, storage_options=options)
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def memory_fs() -> Iterator[str]:
    """A clean ``memory://`` root (a unique folder, removed afterwards); yields ``memory://ROOT``."""
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/vdbflow-test-{os.getpid()}-{next(_counter)}"
    try:
        yield f"memory://{root}"
    finally:
        if fs.exists(root):
            fs.rm(root, recursive=True)
