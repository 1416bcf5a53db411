"""Reads [[yaml_text, json_text], ...] on stdin; parses each YAML text with PyYAML (YAML 1.1)
and ruamel.yaml (YAML 1.2, pure) and prints, as JSON, every case whose value differs from the
JSON's (or that a reader refuses)."""
import json
import sys

import yaml
from ruamel.yaml import YAML

ruamel = YAML(typ="safe", pure=True)
failures = []
for text, expected_json in json.load(sys.stdin):
    expected = json.loads(expected_json)
    for name, load in (("PyYAML", yaml.safe_load), ("ruamel.yaml", ruamel.load)):
        try:
            got = load(text)
        except Exception as error:  # a reader refusing the text is the failure being looked for
            failures.append({"reader": name, "yaml": text, "error": str(error)})
            continue
        if got != expected:
            failures.append({"reader": name, "yaml": text, "expected": expected, "got": repr(got)})
json.dump(failures[:20], sys.stdout)
