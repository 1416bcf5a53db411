"""The package's type information: the asyncio client's stub is current, and mypy
accepts correct uses of both clients and flags wrong ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from processes import ROOT

PYTHON = ROOT / "python"

GOOD = '''
import asyncio
import halite

def blocking(client: halite.Client) -> str:
    job = client.publish("web*", "test.ping", batch="25%")
    for update in job:
        print(update.minion, update.state, update.final)
    result = job.wait()["web1"]
    deployment = client.wait_for_deployment("d1", timeout=5.0)
    return result.state + deployment.status + client.keys()[0].fingerprint

async def awaiting(client: halite.AsyncClient) -> int:
    keys = await client.keys()
    job = await client.publish(["a", "b"], "test.ping")
    async for update in job:
        print(update.state)
    async for event in await client.events("halite/*"):
        print(event.tag)
    return len(keys) + len(job.minions) + len((await client.job(job.jid)).minions)
'''

BAD = '''
import halite

async def awaiting(client: halite.AsyncClient) -> None:
    keys = client.keys()
    print(keys[0].fingerprint)
'''


def test_the_async_stub_is_current() -> None:
    generated = subprocess.run([sys.executable, str(PYTHON / "tools" / "async_stub.py")], capture_output=True,
                               text=True, check=True, cwd="/").stdout
    assert generated == (PYTHON / "halite" / "aio.pyi").read_text(), (
        "python/halite/aio.pyi is stale: python python/tools/async_stub.py > python/halite/aio.pyi")


def mypy(source: str, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "usage.py"
    path.write_text(source)
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
                          capture_output=True, text=True, cwd=tmp_path)


def test_mypy_accepts_correct_uses_and_flags_a_missing_await(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    good = mypy(GOOD, tmp_path)
    assert good.returncode == 0, good.stdout
    bad = mypy(BAD, tmp_path)
    assert bad.returncode == 1 and "Awaitable" in bad.stdout, bad.stdout
