"""Every call of the SDK, written once: the request sent to ``halite._native`` and
how its JSON answer becomes a result. :class:`halite.Client` carries them out
blocking, :class:`halite.AsyncClient` as awaitables."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import types as t
from .errors import InvalidArgument

#: What a call carries: the request for ``halite._native`` and the converter of its answer.
Call = tuple  # (Dict[str, Any], Callable[[Any], Any])

Amount = Union[int, str]

#: Seconds each minion may run a job when the caller does not say: an hour, as the CLI's
#: ``--job-timeout``, the gateway's and the Rust SDK's.
DEFAULT_JOB_TIMEOUT = 3600

#: Salt's ``tgt_type`` names (and the protocol's own) to the protocol's target kinds.
TARGET_KINDS = {
    "glob": "glob",
    "list": "list",
    "pcre": "regex",
    "regex": "regex",
    "grain": "grain",
    "compound": "compound",
    "nodegroup": "nodegroup",
}

#: Salt's ``tgt_type`` names that halite sends as a compound term.
COMPOUND_ENGINES = {"grain_pcre": "P@", "ipcidr": "S@"}


def target(tgt: Union[str, Sequence[str]], tgt_type: str) -> Dict[str, str]:
    """A target as the protocol has it. A list of ids is a ``list`` target."""
    if not isinstance(tgt, str):
        ids = list(tgt)
        if not all(isinstance(i, str) for i in ids):
            raise InvalidArgument("a target is a string or a list of minion ids")
        return {"kind": "list", "expr": ",".join(ids)}
    # Salt's ``grain_pcre`` and ``ipcidr`` are the one-term compound targets ``P@``, ``S@``.
    engine = COMPOUND_ENGINES.get(tgt_type)
    if engine is not None:
        if any(c.isspace() for c in tgt):
            raise InvalidArgument(f"tgt_type {tgt_type!r}: the target cannot hold whitespace")
        return {"kind": "compound", "expr": engine + tgt}
    kind = TARGET_KINDS.get(tgt_type)
    if kind is None:
        names = sorted([*TARGET_KINDS, *COMPOUND_ENGINES])
        raise InvalidArgument(f"tgt_type {tgt_type!r}: expected one of {', '.join(names)}")
    return {"kind": kind, "expr": tgt}


def amount(name: str, value: Amount) -> Dict[str, int]:
    """``2`` or ``"2"``: a count; ``"25%"``: a percentage (as ``salt -b`` reads them)."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            percent = int(text[:-1])
            if not 1 <= percent <= 100:
                raise ValueError
            return {"percent": percent}
        count = int(text)
        if count < 0:
            raise ValueError
        return {"count": count}
    except ValueError:
        raise InvalidArgument(f"{name}: expected a count (2) or a percentage ('25%'), got {value!r}") from None


def rollout(
    batch: Optional[Amount],
    batch_wait: float,
    max_errors: Optional[Amount],
    canary: int,
    abort_on: Iterable[str],
) -> Optional[Dict[str, Any]]:
    """The rollout options as the protocol has them; ``None`` when none is given."""
    abort = list(abort_on)
    if batch is None and not batch_wait and max_errors is None and not canary and not abort:
        return None
    spec: Dict[str, Any] = {"batch_wait_ms": millis("batch_wait", batch_wait), "canary": int(canary)}
    if batch is not None:
        spec["batch"] = amount("batch", batch)
    if max_errors is not None:
        spec["max_errors"] = amount("max_errors", max_errors)
    if abort:
        spec["abort_on"] = abort
    return spec


def millis(name: str, seconds: Optional[float]) -> int:
    if seconds is None or seconds < 0:
        raise InvalidArgument(f"{name}: expected seconds >= 0, got {seconds!r}")
    return int(round(seconds * 1000))


def optional_millis(name: str, seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else millis(name, seconds)


def public_key(value: str) -> str:
    text = value.strip()
    if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise InvalidArgument(f"public key: expected 64 hex digits, got {value!r}")
    return text


def one(cls: Any) -> Callable[[Any], Any]:
    return cls.from_json


def many(cls: Any) -> Callable[[Any], Any]:
    return lambda items: [cls.from_json(item) for item in items]


def same(value: Any) -> Any:
    return value


def nothing(_value: Any) -> None:
    return None


def encode(request: Mapping[str, Any]) -> str:
    try:
        return json.dumps(request)
    except TypeError as error:
        raise InvalidArgument(f"{request['op']}: arguments must be JSON values: {error}") from None


def job_event(answer: Mapping[str, Any]) -> Optional[t.JobUpdate]:
    """A ``next_job_event`` answer: the update, or ``None`` once the job is done."""
    update = answer.get("update")
    return None if update is None else t.JobUpdate.from_json(update)


def deployment_spec(
    config_id: str,
    server_id: str,
    input_values: Optional[Mapping[str, Any]],
    action: str,
    stack_id: str,
    resource_name: str,
    signal_transport: Optional[str],
    signal_id: Optional[str],
    signal_verb: Optional[str],
    timeout: Optional[int],
    input_key: Optional[str],
    input_values_validation: Optional[str],
) -> Dict[str, Any]:
    spec: Dict[str, Any] = {
        "config_id": config_id,
        "server_id": server_id,
        "input_values": dict(input_values or {}),
        "action": action,
        "stack_id": stack_id,
        "resource_name": resource_name,
    }
    optional = {
        "signal_transport": signal_transport,
        "signal_id": signal_id,
        "signal_verb": signal_verb,
        "timeout_secs": timeout,
        "input_key": input_key,
        "input_values_validation": input_values_validation,
    }
    spec.update({k: v for k, v in optional.items() if v is not None})
    return spec


def config_spec(
    config: Any,
    group: str,
    inputs: Optional[List[Mapping[str, Any]]],
    outputs: Optional[List[Mapping[str, Any]]],
    options: Optional[Mapping[str, Any]],
    name: str,
) -> Dict[str, Any]:
    return {
        "name": name,
        "group": group,
        "config": config,
        "inputs": [dict(i) for i in inputs or []],
        "outputs": [dict(o) for o in outputs or []],
        "options": None if options is None else dict(options),
    }
