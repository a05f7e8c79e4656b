"""A real S3-compatible HTTP server (moto in server mode) on 127.0.0.1, as a process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

# What the AWS SDKs (and so s3fs) read; dummy credentials, and no lookups of an
# instance-metadata endpoint, so nothing leaves loopback.
TEST_ACCESS_KEY = "litforge-test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self, log_dir: Path, require_auth: bool = False) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_dir = log_dir
        self.require_auth = require_auth
        self.process: subprocess.Popen | None = None

    def env(self, secret: str = "litforge-test-secret") -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self, buckets: tuple[str, ...] = ("litforge",)) -> None:
        env = {**os.environ, **self.env()}
        if self.require_auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"  # moto then checks every signature
        log = (self.log_dir / f"moto-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"moto server did not start on port {self.port}")
        if not self.require_auth:
            self.make_buckets(buckets)

    def make_buckets(self, buckets: tuple[str, ...]) -> None:
        import boto3

        client = boto3.client("s3", **self._client_kwargs())
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)

    def client(self):
        import boto3

        return boto3.client("s3", **self._client_kwargs())

    def _client_kwargs(self) -> dict[str, str]:
        return {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": TEST_ACCESS_KEY,
            "aws_secret_access_key": "litforge-test-secret",
            "region_name": "us-east-1",
        }

    def stop(self) -> None:
        """Moto keeps everything in memory: a stopped server loses its objects."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def keys(self, bucket: str = "litforge", prefix: str = "") -> list[str]:
        response = self.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
        return sorted(obj["Key"] for obj in response.get("Contents", []))
