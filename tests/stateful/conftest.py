"""The state machine checks every key of its queue after every step with SCAN; on the shared
session server, whose keyspace other suites fill with tens of thousands of jobs, each scan
walks all of them. A private server keeps the machine's cost independent of test order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.server import EmbeddedValkey


@pytest.fixture(scope="module")
def valkey_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey-stateful"), appendfsync="always")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
