"""What the halite SDK returns: plain dataclasses built from the master's answers.

Field names are the protocol's (``docs/protocol.md``); times are Unix
milliseconds (``*_ms``) or the master's ISO-8601 text (``creation_time``).
Fields a newer master adds are ignored, so an older SDK keeps working.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Type, TypeVar

T = TypeVar("T", bound="Record")

#: The states a minion ends a job in.
FINAL_STATES = frozenset(
    {"returned", "failed", "timed_out", "offline", "cancelled", "expired", "denied", "skipped", "unknown"}
)


class Record:
    """Base of every result type: :meth:`from_json` builds one from the master's
    JSON, nested records included."""

    #: Fields holding other records (or lists of them), and how to build them.
    _nested: ClassVar[Dict[str, Callable[[Any], Any]]] = {}

    @classmethod
    def from_json(cls: Type[T], data: Mapping[str, Any]) -> T:
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values = {}
        for name, value in data.items():
            if name not in known:
                continue
            convert = cls._nested.get(name)
            values[name] = convert(value) if convert is not None and value is not None else value
        return cls(**values)

    def to_dict(self) -> Dict[str, Any]:
        """The record as plain dicts and lists (JSON-ready)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]


def _list_of(cls: Type[T]) -> Callable[[Any], List[T]]:
    return lambda items: [cls.from_json(item) for item in items]


@dataclass(frozen=True)
class JobReturn(Record):
    """What a minion returned for a job."""

    jid: str
    minion: str = ""
    success: bool = False
    retcode: int = 0
    #: The function's return value (any JSON).
    outputs: Any = None
    truncated: bool = False
    duration_ms: int = 0
    #: ``completed``, ``timed_out``, ``cancelled``, ``interrupted``, ``refused`` or ``denied``.
    outcome: str = "completed"


@dataclass(frozen=True)
class JobUpdate(Record):
    """A minion's job changed state."""

    jid: str
    minion: str
    #: ``waiting``, ``sent``, ``running``, ``queued`` or one of :data:`FINAL_STATES`.
    state: str
    ret: Optional[JobReturn] = None

    _nested: ClassVar[Dict[str, Callable[[Any], Any]]] = {"ret": JobReturn.from_json}

    @property
    def final(self) -> bool:
        """Whether this is the minion's last word on the job."""
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class MinionResult(Record):
    """One minion's part in a job, as :meth:`Client.job` and :meth:`Job.wait` give it."""

    minion: str
    state: str
    ret: Optional[JobReturn] = None
    #: The return came after the minion's deadline had already been recorded.
    late: bool = False
    #: Set while the job is not final for a minion connected to no master (it left in the
    #: middle): what becomes of its part.
    away: Optional[str] = None

    _nested: ClassVar[Dict[str, Callable[[Any], Any]]] = {"ret": JobReturn.from_json}

    @property
    def success(self) -> bool:
        """Returned, and the function said it succeeded."""
        return self.state == "returned" and self.ret is not None and self.ret.success

    @property
    def outputs(self) -> Any:
        """The function's return value (``None`` when the minion did not return)."""
        return None if self.ret is None else self.ret.outputs


@dataclass(frozen=True)
class Rollout(Record):
    """How a job reaches its targets over time, as the master echoes it."""

    batch: Optional[Dict[str, int]] = None
    batch_wait_ms: int = 0
    max_errors: Optional[Dict[str, int]] = None
    canary: int = 0
    abort_on: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class RolloutStatus(Record):
    """A rollout and where it is: ``running``, ``paused`` or ``stopped`` (with ``reason``)."""

    spec: Rollout
    state: str
    reason: Optional[str] = None

    _nested: ClassVar[Dict[str, Callable[[Any], Any]]] = {"spec": Rollout.from_json}


@dataclass(frozen=True)
class JobSummary(Record):
    """A job in a listing."""

    jid: str
    function: str
    #: ``{"kind": "glob", "expr": "web*"}``.
    target: Dict[str, str]
    caller: str
    created_at_ms: int
    #: How many minions are in each state.
    states: Dict[str, int]
    rollout: Optional[RolloutStatus] = None

    _nested: ClassVar[Dict[str, Callable[[Any], Any]]] = {"rollout": RolloutStatus.from_json}


@dataclass(frozen=True)
class JobDetail(Record):
    """One job with every targeted minion's state and return."""

    summary: JobSummary
    args: List[Any]
    kwargs: Dict[str, Any]
    minions: List[MinionResult]

    _nested: ClassVar[Dict[str, Callable[[Any], Any]]] = {
        "summary": JobSummary.from_json,
        "minions": _list_of(MinionResult),
    }

    @property
    def jid(self) -> str:
        return self.summary.jid

    @property
    def done(self) -> bool:
        """Every minion reached a final state."""
        return all(m.state in FINAL_STATES for m in self.minions)

    def results(self) -> Dict[str, MinionResult]:
        """Each minion's part, by minion id."""
        return {m.minion: m for m in self.minions}


@dataclass(frozen=True)
class Event(Record):
    """An event from the master's bus."""

    tag: str
    data: Any = None
    #: What to resume after (``Client.events(..., after=id)``).
    id: Optional[str] = None


@dataclass(frozen=True)
class KeyInfo(Record):
    """A minion key: ``pending``, ``accepted``, ``rejected`` or ``denied``."""

    id: str
    state: str
    fingerprint: str


@dataclass(frozen=True)
class MinionInfo(Record):
    """A minion this principal may target."""

    id: str
    #: A live session with the master answering.
    connected: bool
    last_seen_ms: int
    grains: Dict[str, Any]
    functions: List[str]
    #: Not connected to the master answering, but to another master of its cluster.
    connected_elsewhere: bool = False


@dataclass(frozen=True)
class Enrollment(Record):
    """A one-time enrollment token and what a new server boots with."""

    token: str
    minion: str
    expires_at_ms: int
    masters: List[str]
    #: The key the new minion pins, hex.
    master_key: str
    #: The text of ``/etc/halite/enrollment.toml``.
    enrollment: str
    #: A ``#cloud-config`` document writing it: the server's user_data.
    user_data: str


@dataclass(frozen=True)
class TokenSummary(Record):
    """An enrollment token, by id (never the token itself)."""

    id: str
    minion: str
    expires_at_ms: int
    used: bool


@dataclass(frozen=True)
class AuditRecord(Record):
    """One record of the audit trail, as stored: its place in the chain of the master
    that wrote it, the hash chaining it to the record before and that master's
    signature (what ``halite audit verify --file`` checks offline)."""

    #: Its place in the store's order: the ``after`` of the next page.
    id: int
    #: The chain: the id of the master that wrote it.
    chain: str
    #: Its number in the chain, from 1.
    seq: int
    #: The entry's JSON exactly as hashed (see :attr:`entry`).
    body: str
    prev: str
    hash: str
    signer: str
    signature: str

    @property
    def entry(self) -> Dict[str, Any]:
        """What happened: ``at_ms``, ``kind``, ``principal``, ``tenant``, ``action``,
        ``decision``, ``reason``, ``minions`` and ``detail``."""
        value = json.loads(self.body)
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class AuditVerification(Record):
    """What the master's check of its audit chains found."""

    #: Records checked.
    records: int
    #: Each chain's last record number.
    heads: Dict[str, int]
    #: The first record removed, changed or moved; ``None`` when every chain is whole.
    broken: Optional[str] = None


@dataclass(frozen=True)
class PrincipalInfo(Record):
    """A client principal and its ACL (``{"rules": [...], "admin": bool, ...}``)."""

    name: str
    fingerprint: str
    acl: Dict[str, Any]


@dataclass(frozen=True)
class ApiTokenInfo(Record):
    """A gateway token, by id."""

    id: str
    principal: str
    created_at_ms: int
    expires_at_ms: Optional[int] = None


@dataclass(frozen=True)
class SoftwareConfig(Record):
    """An immutable software config (Heat's ``OS::Heat::SoftwareConfig``)."""

    id: str
    name: str
    group: str
    config: Any
    inputs: List[Dict[str, Any]]
    outputs: List[Dict[str, Any]]
    options: Optional[Dict[str, Any]] = None
    creation_time: str = ""


@dataclass(frozen=True)
class SoftwareDeployment(Record):
    """A config deployed to a server: ``IN_PROGRESS``, ``COMPLETE`` or ``FAILED``."""

    id: str
    config_id: str
    server_id: str
    input_values: Dict[str, Any]
    #: ``deploy_stdout``, ``deploy_stderr``, ``deploy_status_code`` and the
    #: config's declared outputs, once the deployment has run.
    output_values: Dict[str, Any]
    action: str
    status: str
    status_reason: str
    derived_config_id: str = ""
    creation_time: str = ""
    updated_time: Optional[str] = None


@dataclass(frozen=True)
class GroupMember(Record):
    """One server of a deployment group."""

    server_id: str
    status: str
    deployment_id: Optional[str] = None


@dataclass(frozen=True)
class DeploymentGroup(Record):
    """A config deployed to several servers with a rollout (Heat's
    ``SoftwareDeploymentGroup``)."""

    id: str
    config_id: str
    action: str
    status: str
    status_reason: str
    rollout: RolloutStatus
    members: List[GroupMember]
    creation_time: str = ""

    _nested: ClassVar[Dict[str, Callable[[Any], Any]]] = {
        "rollout": RolloutStatus.from_json,
        "members": _list_of(GroupMember),
    }
