"""Real halite processes for the SDK's and the Heat plugin's tests: a master in a
temporary directory and minions enrolled through the SDK itself.

The binaries come from ``$HALITE_BIN_DIR`` (default: the workspace's
``target/debug``, as ``cargo build --workspace --bins`` leaves them)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, TypeVar

import halite

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("HALITE_BIN_DIR", ROOT / "target" / "debug"))

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], Optional[T]], timeout: float = 20.0) -> T:
    """Polls ``check`` until it returns something other than None/False."""
    deadline = time.monotonic() + timeout
    last_error: Optional[BaseException] = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as error:  # the thing waited for is not up yet
            last_error = error
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_error!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Master:
    """One ``halite-master`` and the minions it serves, all under ``dir``."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.config = dir / "master.toml"
        self.config.write_text(
            f'listen = "{self.addr}"\nstate_dir = "{dir / "master"}"\nlog = "info"\ntimeout_grace_secs = 2\n'
        )
        self.process: Optional[subprocess.Popen] = None
        self.minions: Dict[str, subprocess.Popen] = {}
        self.start()

    def start(self) -> None:
        addr_file = self.dir / "master" / "master.addr"
        if addr_file.exists():
            addr_file.unlink()
        log = open(self.dir / "master.log", "ab")
        self.process = subprocess.Popen([str(BIN_DIR / "halite-master"), "--config", str(self.config)], stderr=log)
        wait_for("the master", lambda: addr_file.exists() and self._answers())

    def _answers(self) -> bool:
        with halite.Client.local_root(str(self.config)) as client:
            client.keys()
        return True

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None

    @property
    def master_key_hex(self) -> str:
        """The master's public key, from the last word of its ``master.pub``."""
        lines = (self.dir / "master" / "master.pub").read_text().splitlines()
        return [line for line in lines if not line.startswith("#")][0].split()[-1]

    def root(self, **options) -> halite.Client:
        return halite.Client.connect(master_config=str(self.config), **options)

    def minion_dir(self, minion: str) -> Path:
        return self.dir / minion

    def start_minion(self, minion: str, *, policy: str = 'allow = ["*"]', wait: bool = True,
                     grains: str = "") -> None:
        """Enrolls ``minion`` with a token made through the SDK and starts it; ``grains`` are
        more TOML lines of its ``[grains]``."""
        directory = self.minion_dir(minion)
        (directory / "state").mkdir(parents=True, exist_ok=True)
        if not (directory / "enrollment.toml").exists():
            with self.root() as client:
                enrollment = client.create_enrollment(minion, ttl=600, masters=[self.addr])
            (directory / "enrollment.toml").write_text(enrollment.enrollment)
        heat = directory / "heat"
        (directory / "minion.toml").write_text(
            f'state_dir = "{directory / "state"}"\n'
            f'enrollment_file = "{directory / "enrollment.toml"}"\n'
            f'actions_dir = "{directory / "actions.d"}"\n'
            f'plans_dir = "{directory / "plans"}"\n'
            'log = "info"\n'
            f"[policy]\n{policy}\n"
            f'[deploy]\ndeployed_dir = "{heat / "deployed"}"\nhooks_dirs = ["{heat / "hooks"}"]\n'
            f'script_working_dir = "{heat / "working"}"\nscript_outputs_dir = "{heat / "outputs"}"\n'
            f'[grains]\nrole = "{minion.rstrip("0123456789")}"\n{grains}'
        )
        log = open(directory / "minion.log", "ab")
        self.minions[minion] = subprocess.Popen(
            [str(BIN_DIR / "halite-minion"), "--config", str(directory / "minion.toml")], stderr=log
        )
        if wait:
            self.wait_connected([minion])

    def wait_connected(self, minions: List[str]) -> None:
        def connected() -> bool:
            with self.root() as client:
                up = {m.id for m in client.minions("*") if m.connected}
            return set(minions) <= up

        wait_for(f"minions {minions} to connect", connected)

    def stop(self) -> None:
        for process in self.minions.values():
            process.kill()
            process.wait()
        self.kill()
