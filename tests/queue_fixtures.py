"""Shared by the tests that need a real Redis or a queue that breaks part way."""
from __future__ import annotations

import pytest

from bench.cluster import ClusterError, LocalCluster


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A real redis-server on 127.0.0.1 for the module (skipped where none is installed)."""
    try:
        with LocalCluster(tmp_path_factory.mktemp("redis"), milvus=False) as cluster:
            yield cluster.env["REDIS_URL"]
    except ClusterError as exc:
        if "redis-server" in str(exc):
            pytest.skip(str(exc))
        raise


def break_queue_after_first(monkeypatch) -> None:
    """The import queue takes one task, then fails as a full disk would (injected fault)."""
    from graphs.importing import jobs

    queue, calls = jobs._queue(), []
    real = queue.huey.enqueue

    def fails_after_the_first(task):
        calls.append(task)
        if len(calls) > 1:
            raise OSError("disk I/O error")
        return real(task)

    monkeypatch.setattr(queue.huey, "enqueue", fails_after_the_first)
