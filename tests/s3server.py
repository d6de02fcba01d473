"""An S3-compatible server on loopback for the store's tests: moto's server mode in
a thread, one bucket per test, the endpoint handed over the way users hand it
(CXLBENCH_S3_ENDPOINT), dummy credentials (moto accepts any)."""
from __future__ import annotations

import itertools

import pytest

_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_endpoint():
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_store(s3_endpoint, monkeypatch):
    """A fresh bucket's URL with a prefix: s3://cxlbench-N/fleet."""
    monkeypatch.setenv("CXLBENCH_S3_ENDPOINT", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    from cxlbench.results import location
    location.configure([])
    bucket = f"cxlbench-{next(_buckets)}"
    fs, _ = location.filesystem(f"s3://{bucket}")
    fs.mkdir(bucket)
    yield f"s3://{bucket}/fleet"
    location.configure([])
