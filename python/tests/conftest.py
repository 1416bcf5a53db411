"""pytest fixtures: a master with three minions for each test module."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

import halite
from processes import BIN_DIR, Master


@pytest.fixture(scope="module")
def master() -> Iterator[Master]:
    """A master with minions web1, web2 and db1 connected."""
    for binary in ("halite-master", "halite-minion"):
        if not (BIN_DIR / binary).exists():
            pytest.fail(f"{BIN_DIR / binary} is missing: run `cargo build --workspace --bins` first")
    directory = Path(tempfile.mkdtemp(prefix="halite-py-"))
    running = Master(directory)
    try:
        for minion in ("web1", "web2", "db1"):
            running.start_minion(minion, wait=False)
        running.wait_connected(["web1", "web2", "db1"])
        yield running
    finally:
        running.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def root(master: Master) -> Iterator[halite.Client]:
    with master.root() as client:
        yield client
