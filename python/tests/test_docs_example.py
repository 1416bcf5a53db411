"""The complete script of docs/engine-guide.md ("A complete script"), run as written
against a real master, as a principal with a client config file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import halite
from processes import ROOT


def the_script() -> str:
    guide = (ROOT / "docs" / "engine-guide.md").read_text()
    section = guide.split("### A complete script", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_engine_guides_script_runs_a_job_follows_events_and_completes_a_deployment(
    master, root: halite.Client, tmp_path: Path
) -> None:
    key = tmp_path / "engine.key"
    root.add_principal("engine", halite.generate_key(str(key)), {
        "rules": [{"targets": "web*", "functions": ["test.*", "deploy.apply"]}],
        "events": ["halite/job/*", "halite/deployment/*"],
    })
    config = tmp_path / "client.toml"
    config.write_text(
        f'masters = ["{master.addr}"]\nmaster_key = "{master.master_key_hex}"\n'
        'principal = "engine"\nkey_file = "engine.key"\n'
    )
    script = tmp_path / "example.py"
    script.write_text(the_script())
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HALITE_CLIENT_CONFIG": str(config)})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "web1: returned" in lines and "web2: returned" in lines, run.stdout
    assert "return events: ['web1', 'web2']" in lines, run.stdout
    assert lines[-1] == "COMPLETE hello world", run.stdout
