"""A real Heat as operators run it, for the tests: RabbitMQ (Debian's package, a node of
its own on loopback), Heat's database on the test suite's PostgreSQL, and the real
``heat-engine`` (two workers) and ``heat-wsgi-api`` processes of openstack-heat from PyPI,
with the halite plugin loaded through ``plugin_dirs`` and ``noauth`` (the project is the
``X-Auth-Project`` header). Everything is stopped by PID."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

# The SDK tests' helpers (their directory is on sys.path: test_real_heat.py puts it there).
from processes import free_port  # noqa: E402
from waiting import TIMEOUT, until  # noqa: E402

VENV_BIN = Path(sys.executable).parent
RABBITMQ_SERVER = shutil.which("rabbitmq-server") or "/usr/sbin/rabbitmq-server"
RABBITMQCTL = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
PLUGIN_DIR = Path(__file__).resolve().parent.parent
ENGINE_WORKERS = 2


class RealHeat:
    """RabbitMQ, heat-engine and heat-api in ``directory``; ``halite`` is the text of
    heat.conf's ``[halite]`` section."""

    def __init__(self, directory: Path, postgres_url: str, halite: str) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.processes: List[subprocess.Popen] = []
        # Apart from the test's own (private) directory: the server runs as its own user.
        self.rabbit_dir = Path(tempfile.mkdtemp(prefix="halite-rabbitmq-"))
        self.rabbit_node = f"halite-heat-{uuid.uuid4().hex[:8]}@localhost"
        self.rabbit_port = free_port()
        self._start_rabbit()
        database = f"heat_{uuid.uuid4().hex[:12]}"
        subprocess.run(["psql", postgres_url, "-qAt", "-c", f"CREATE DATABASE {database}"], check=True,
                       capture_output=True)
        base = postgres_url.rsplit("/", 1)[0].replace("postgres://", "postgresql+psycopg2://", 1)
        self.database_url = f"{postgres_url.rsplit('/', 1)[0]}/{database}"
        self.api_port = free_port()
        # What noauth tells Heat of the cloud: a service catalog naming Heat itself (its
        # own config resources, MultipartMime among them, check that Heat is in it).
        url = f"http://127.0.0.1:{self.api_port}/v1/%(tenant_id)s"
        endpoint = [{"interface": interface, "region": "RegionOne", "region_id": "RegionOne", "url": url}
                    for interface in ("public", "internal", "admin")]
        token = {"token": {
            "methods": ["token"], "expires_at": "2999-01-01T00:00:00.000000Z", "issued_at": "2020-01-01T00:00:00.000000Z",
            "user": {"id": "admin", "name": "admin", "domain": {"id": "default", "name": "Default"}},
            "project": {"id": "admin", "name": "admin", "domain": {"id": "default", "name": "Default"}},
            "roles": [{"id": "admin", "name": "admin"}],
            "catalog": [{"type": "orchestration", "name": "heat", "id": "heat", "endpoints": endpoint},
                        {"type": "cloudformation", "name": "heat-cfn", "id": "heat-cfn", "endpoints": endpoint}]}}
        token_file = self.dir / "token.json"
        token_file.write_text(json.dumps(token))
        self.conf = self.dir / "heat.conf"
        self.conf.write_text(f"""[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:{self.rabbit_port}/
plugin_dirs = {PLUGIN_DIR}
num_engine_workers = {ENGINE_WORKERS}
deferred_auth_method = password
log_file = {self.dir / "heat.log"}

[database]
connection = {base}/{database}

[paste_deploy]
flavor = noauth
api_paste_config = {VENV_BIN.parent / "etc" / "heat" / "api-paste.ini"}

[noauth]
token_response = {token_file}

[oslo_policy]
enforce_new_defaults = False
enforce_scope = False

[halite]
{halite}
""")
        subprocess.run([str(VENV_BIN / "heat-manage"), "--config-file", str(self.conf), "db_sync"], check=True,
                       capture_output=True)
        self._spawn("engine", [str(VENV_BIN / "heat-engine"), "--config-file", str(self.conf)])
        self._spawn("api", [str(VENV_BIN / "heat-wsgi-api"), "--port", str(self.api_port), "--host", "127.0.0.1",
                            "--", "--config-file", str(self.conf)])
        self.url = f"http://127.0.0.1:{self.api_port}/v1"
        until("heat-api", self._answers, interval=0.2)
        # The engine's workers listen on their RPC topic before each writes its service row
        # (EngineService.start): a request sent earlier would be lost, and heat-api would
        # answer it only at its RPC timeout. Then a stack list goes through the engine.
        until("heat-engine's workers", self._engine_workers_listen, interval=0.5)
        until("heat-engine", self._engine_answers, interval=0.5)

    def _rabbit_env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update({
            "RABBITMQ_NODENAME": self.rabbit_node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.rabbit_port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.rabbit_dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.rabbit_dir / "log"),
            "RABBITMQ_PID_FILE": str(self.rabbit_dir / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.rabbit_dir / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.rabbit_dir / "rabbitmq"),
            "RABBITMQ_FEATURE_FLAGS_FILE": str(self.rabbit_dir / "feature_flags"),
        })
        return env

    def _start_rabbit(self) -> None:
        for sub in ("mnesia", "log"):
            (self.rabbit_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.rabbit_dir / "enabled_plugins").write_text("[].\n")
        (self.rabbit_dir / "rabbitmq.conf").write_text("loopback_users = none\n")
        if os.geteuid() == 0:
            # The server drops to the rabbitmq user: its directories must be that user's.
            for path in [self.rabbit_dir, *self.rabbit_dir.rglob("*")]:
                shutil.chown(path, "rabbitmq", "rabbitmq")
        log = open(self.dir / "rabbitmq.out", "ab")
        self.processes.append(subprocess.Popen([RABBITMQ_SERVER], env=self._rabbit_env(), stdout=log,
                                               stderr=subprocess.STDOUT, start_new_session=True))
        # Each rabbitmqctl is an Erlang VM of its own: asked once a second, not more.
        until("rabbitmq", lambda: subprocess.run(
            [RABBITMQCTL, "-n", self.rabbit_node, "-q", "await_startup"], env=self._rabbit_env(),
            capture_output=True).returncode == 0, interval=1.0)

    def _spawn(self, name: str, argv: List[str]) -> None:
        log = open(self.dir / f"{name}.out", "ab")
        self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/", timeout=2)
            return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def _engine_workers_listen(self) -> bool:
        count = subprocess.run(["psql", self.database_url, "-qAt", "-c",
                                "SELECT count(*) FROM service WHERE \"binary\" = 'heat-engine' AND deleted_at IS NULL"],
                               check=True, capture_output=True, text=True).stdout
        return int(count.strip() or 0) >= ENGINE_WORKERS

    def _engine_answers(self) -> bool:
        try:
            return self.call("probe", "GET", "/stacks") is not None
        except (OSError, AssertionError):
            return False

    def stop(self) -> None:
        subprocess.run([RABBITMQCTL, "-n", self.rabbit_node, "-q", "shutdown"], env=self._rabbit_env(),
                       capture_output=True, timeout=60)
        for process in reversed(self.processes):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=30)
        shutil.rmtree(self.rabbit_dir, ignore_errors=True)

    # Heat's REST API -------------------------------------------------------------

    def call(self, project: str, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        """One API call as ``project``; the JSON answer (``None`` for an empty one)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}/{project}{path}", data=data, method=method, headers={
            "X-Auth-Project": project, "X-Auth-User": f"{project}-user", "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            # Longer than the RPC timeout between heat-api and the engine (oslo.messaging's
            # 60 s): a loaded engine's answer comes, or Heat's own error does.
            with urllib.request.urlopen(request, timeout=90) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{method} {path}: {error.code} {error.read()[:2000]!r}") from None
        return json.loads(text) if text else None

    def create(self, project: str, name: str, template: str, parameters: Optional[Dict[str, Any]] = None,
               environment: Optional[Dict[str, Any]] = None) -> str:
        body = {"stack_name": name, "template": template, "parameters": parameters or {}, "timeout_mins": 5}
        if environment:
            body["environment"] = environment
        return self.call(project, "POST", "/stacks", body)["stack"]["id"]

    def update(self, project: str, name: str, stack_id: str, template: str,
               parameters: Optional[Dict[str, Any]] = None) -> None:
        self.call(project, "PUT", f"/stacks/{name}/{stack_id}",
                  {"template": template, "parameters": parameters or {}, "timeout_mins": 5})

    def delete(self, project: str, name: str, stack_id: str) -> None:
        self.call(project, "DELETE", f"/stacks/{name}/{stack_id}")

    def stack(self, project: str, name: str, stack_id: str) -> Dict[str, Any]:
        return self.call(project, "GET", f"/stacks/{name}/{stack_id}")["stack"]

    def settle(self, project: str, name: str, stack_id: str, timeout: float = TIMEOUT) -> Dict[str, Any]:
        """The stack once it is no longer IN_PROGRESS (or gone, for a delete), by its state
        in Heat's API."""
        def settled():
            try:
                stack = self.stack(project, name, stack_id)
            except AssertionError as error:
                if " 404" in str(error):
                    return {"stack_status": "DELETE_COMPLETE", "stack_status_reason": "gone"}
                raise
            return None if stack["stack_status"].endswith("IN_PROGRESS") else stack
        return until(f"stack {name} of {project} to settle", settled, timeout=timeout, interval=0.5)

    def resource(self, project: str, name: str, stack_id: str, resource: str,
                 with_attr: Optional[str] = None) -> Dict[str, Any]:
        query = f"?with_attr={with_attr}" if with_attr else ""
        return self.call(project, "GET", f"/stacks/{name}/{stack_id}/resources/{resource}{query}")["resource"]

    def settle_resource(self, project: str, name: str, stack_id: str, resource: str,
                        with_attr: Optional[str] = None, timeout: float = TIMEOUT) -> Dict[str, Any]:
        """The stack's ``resource`` once its action has begun and is no longer IN_PROGRESS,
        by its state in Heat's API; or as it is, if the stack settles first (the caller's
        check then says why, from its status and reason)."""
        def ended():
            # A 404 (not stored yet) is "not yet" too.
            status = self.resource(project, name, stack_id, resource)["resource_status"]
            if status != "INIT_COMPLETE" and not status.endswith("IN_PROGRESS"):
                return True
            # Not ended, and it never will once the stack itself has settled.
            return not self.stack(project, name, stack_id)["stack_status"].endswith("IN_PROGRESS")
        until(f"resource {resource} of stack {name} of {project}", ended, timeout=timeout, interval=0.5)
        return self.resource(project, name, stack_id, resource, with_attr)

    def output(self, stack: Dict[str, Any], key: str) -> Any:
        for item in stack.get("outputs") or []:
            if item["output_key"] == key:
                return item["output_value"]
        raise KeyError(key)
