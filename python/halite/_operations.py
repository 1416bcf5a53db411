"""The methods :class:`halite.Client` and :class:`halite.AsyncClient` share.

Each builds one request and names the type of its answer; the client class
decides how it is carried out (blocking, or as an awaitable). On an
:class:`~halite.AsyncClient` every method below returns an awaitable of what
it documents.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _calls as c
from . import _native
from . import types as t


class Operations:
    """Keys, tokens, principals, minions, jobs, events, configs and deployments."""

    def __init__(self, native: _native.NativeClient) -> None:
        self._native = native

    def _call(self, request: Dict[str, Any], convert: Callable[[Any], Any]) -> Any:
        raise NotImplementedError

    @property
    def master_addr(self) -> str:
        """The master this client is connected to (it changes on failover)."""
        return self._native.master_addr()

    def close(self) -> None:
        """Ends the connection."""
        self._native.close()

    # Jobs -----------------------------------------------------------------

    def job(self, jid: str) -> t.JobDetail:
        """One job with every targeted minion's state and return (and its rollout)."""
        return self._call({"op": "job", "jid": jid}, c.one(t.JobDetail))

    def jobs(
        self, limit: int = 50, *, function: Optional[str] = None, target: Optional[str] = None,
        caller: Optional[str] = None, state: Optional[str] = None, since: Optional[float] = None,
        until: Optional[float] = None,
    ) -> List[t.JobSummary]:
        """The newest ``limit`` jobs this principal may see, narrowed like Salt's
        ``jobs.list_jobs``: ``function``, ``target`` (as given) and ``caller`` are globs;
        ``state``: jobs with a minion in that state; ``since``/``until``: Unix seconds."""
        filter: Dict[str, Any] = {"function": function, "target": target, "caller": caller, "state": state}
        if since is not None:
            filter["since_ms"] = int(since * 1000)
        if until is not None:
            filter["until_ms"] = int(until * 1000)
        filter = {k: v for k, v in filter.items() if v is not None}
        return self._call({"op": "jobs", "limit": limit, "filter": filter}, c.many(t.JobSummary))

    def cancel(self, jid: str) -> t.JobDetail:
        """Cancels a job: minions not yet started end ``cancelled`` at once, running
        ones as they stop. The job as the cancel left it; a finished job is
        :class:`~halite.errors.NotFound`."""
        return self._call({"op": "cancel", "jid": jid}, c.one(t.JobDetail))

    def pause(self, jid: str) -> t.JobDetail:
        """Pauses a job's rollout: running targets finish, no new one starts."""
        return self._call({"op": "pause", "jid": jid}, c.one(t.JobDetail))

    def resume(self, jid: str) -> t.JobDetail:
        """Resumes a paused rollout."""
        return self._call({"op": "resume", "jid": jid}, c.one(t.JobDetail))

    def fire_event(self, tag: str, data: Any = None) -> str:
        """Fires ``engine/<principal>/<tag>`` on the master's bus (an alarm rollouts
        abort on, a step of the engine's workflow); the full tag."""
        return self._call({"op": "fire_event", "tag": tag, "data": data}, c.same)

    # Keys, enrollment, minions ------------------------------------------

    def keys(self, pattern: str = "*") -> List[t.KeyInfo]:
        """Minion keys whose id matches the glob, in every state."""
        return self._call({"op": "keys", "pattern": pattern}, c.many(t.KeyInfo))

    def accept_keys(self, pattern: str) -> List[str]:
        """Accepts the pending and rejected keys matching ``pattern``; the ids accepted."""
        return self._call({"op": "accept_keys", "pattern": pattern}, c.same)

    def reject_keys(self, pattern: str) -> List[str]:
        """Rejects the keys matching ``pattern``, cutting their sessions; the ids."""
        return self._call({"op": "reject_keys", "pattern": pattern}, c.same)

    def delete_keys(self, pattern: str) -> List[str]:
        """Deletes the keys matching ``pattern``, cutting their sessions; the ids."""
        return self._call({"op": "delete_keys", "pattern": pattern}, c.same)

    def preseed_key(self, minion: str, public_key: str) -> None:
        """Registers a key generated elsewhere (64 hex digits) as accepted for ``minion``."""
        request = {"op": "preseed_key", "id": minion, "public_key": c.public_key(public_key)}
        return self._call(request, c.nothing)

    def create_enrollment(
        self, minion: str, ttl: float = 3600, masters: Optional[Sequence[str]] = None,
        replace: bool = False,
    ) -> t.Enrollment:
        """A one-time enrollment token bound to ``minion``, valid ``ttl`` seconds, with
        the enrollment file and the cloud-init user_data a new server boots with.
        The file names ``masters`` (the addresses guests reach), or the master this
        client is connected to. For a minion whose key is already accepted the master
        raises :class:`~halite.errors.Conflict` unless ``replace`` is true: then
        using the token replaces that key (administrators only)."""
        request = {"op": "create_enrollment", "minion": minion, "ttl_ms": c.millis("ttl", ttl),
                   "masters": list(masters or []), "replace": bool(replace)}
        return self._call(request, c.one(t.Enrollment))

    def enrollment_tokens(self) -> List[t.TokenSummary]:
        """The enrollment tokens (by id, never the tokens themselves)."""
        return self._call({"op": "enrollment_tokens"}, c.many(t.TokenSummary))

    def revoke_enrollment_token(self, token_id: str) -> None:
        """Revokes an enrollment token by its id."""
        return self._call({"op": "revoke_enrollment_token", "id": token_id}, c.nothing)

    def minions(self, pattern: str = "*") -> List[t.MinionInfo]:
        """Minions matching the glob that this principal may target, with presence,
        grains and functions."""
        return self._call({"op": "minions", "pattern": pattern}, c.many(t.MinionInfo))

    # Principals and gateway tokens -----------------------------------------

    def add_principal(self, name: str, public_key: str, acl: Optional[Mapping[str, Any]] = None) -> None:
        """Registers (or changes) a principal: its name, public key (64 hex digits, see
        :func:`halite.generate_key`) and ACL, e.g. ``{"rules": [{"targets": "web*",
        "functions": ["test.*"]}], "admin": False}``."""
        request = {"op": "add_principal", "name": name, "public_key": c.public_key(public_key),
                   "acl": dict(acl or {})}
        return self._call(request, c.nothing)

    def principals(self) -> List[t.PrincipalInfo]:
        """The registered principals."""
        return self._call({"op": "principals"}, c.many(t.PrincipalInfo))

    def remove_principal(self, name: str) -> None:
        """Removes a principal; its sessions and gateway tokens go with it."""
        return self._call({"op": "remove_principal", "name": name}, c.nothing)

    def create_api_token(self, principal: str, ttl: Optional[float] = None) -> str:
        """A bearer token for the HTTP gateway acting as ``principal`` (shown once)."""
        request = {"op": "create_api_token", "principal": principal, "ttl_ms": c.optional_millis("ttl", ttl)}
        return self._call(request, c.same)

    def api_tokens(self) -> List[t.ApiTokenInfo]:
        """The gateway tokens (by id)."""
        return self._call({"op": "api_tokens"}, c.many(t.ApiTokenInfo))

    def revoke_api_token(self, token_id: str) -> None:
        """Revokes a gateway token by its id, at once."""
        return self._call({"op": "revoke_api_token", "id": token_id}, c.nothing)

    # The audit trail ------------------------------------------------------

    def audit(
        self, limit: int = 100, *, after: Optional[int] = None, principal: Optional[str] = None,
        tenant: Optional[str] = None, minion: Optional[str] = None, action: Optional[str] = None,
        decision: Optional[str] = None, since: Optional[float] = None, until: Optional[float] = None,
        reads: bool = False,
    ) -> List[t.AuditRecord]:
        """Audit records in store order after the record ``after`` (the ``id`` of the
        last record of the page before), at most ``limit`` (the master caps it at
        1000), narrowed like ``halite audit list``: ``principal`` (who asked),
        ``tenant``, ``minion`` (one it concerns), ``action`` (``publish``,
        ``key_accept``, ``job_end``, ...), ``decision`` (``granted``, ``refused``,
        ``failed``, or a final state), ``since``/``until`` (Unix seconds). Root and
        administrators read every record, a tenant's principal its tenant's alone
        (naming another tenant finds nothing), any other principal its own. The
        records of reads of the trail itself (``audit_list``) are left out unless
        ``reads`` is true (or ``action="audit_list"``)."""
        filter: Dict[str, Any] = {"principal": principal, "tenant": tenant, "minion": minion, "action": action,
                                  "decision": decision, "reads": True if reads else None}
        if since is not None:
            filter["since_ms"] = int(since * 1000)
        if until is not None:
            filter["until_ms"] = int(until * 1000)
        filter = {k: v for k, v in filter.items() if v is not None}
        request = {"op": "audit", "filter": filter, "after": after, "limit": limit}
        return self._call(request, c.many(t.AuditRecord))

    def audit_verify(self) -> t.AuditVerification:
        """The master's check of every audit chain in its store (root and
        administrators): ``broken`` names the first record removed, changed or
        moved, ``None`` when every chain is whole."""
        return self._call({"op": "audit_verify"}, c.one(t.AuditVerification))

    # Software configs and deployments (Heat's model) -----------------------

    def create_config(
        self,
        config: Any,
        group: str = "script",
        inputs: Optional[List[Mapping[str, Any]]] = None,
        outputs: Optional[List[Mapping[str, Any]]] = None,
        options: Optional[Mapping[str, Any]] = None,
        name: str = "",
    ) -> t.SoftwareConfig:
        """Stores an immutable config, as ``OS::Heat::SoftwareConfig`` has it (inputs and
        outputs are lists of ``{"name", "type", "default", ...}``)."""
        spec = c.config_spec(config, group, inputs, outputs, options, name)
        return self._call({"op": "create_config", "config": spec}, c.one(t.SoftwareConfig))

    def show_config(self, config_id: str) -> t.SoftwareConfig:
        """One config."""
        return self._call({"op": "show_config", "id": config_id}, c.one(t.SoftwareConfig))

    def list_configs(self, limit: int = 100) -> List[t.SoftwareConfig]:
        """The newest configs."""
        return self._call({"op": "list_configs", "limit": limit}, c.many(t.SoftwareConfig))

    def delete_config(self, config_id: str) -> None:
        """Deletes a config."""
        return self._call({"op": "delete_config", "id": config_id}, c.nothing)

    def create_deployment(
        self,
        config_id: str,
        server_id: str,
        input_values: Optional[Mapping[str, Any]] = None,
        action: str = "CREATE",
        stack_id: str = "",
        resource_name: str = "",
        signal_transport: Optional[str] = None,
        signal_id: Optional[str] = None,
        signal_verb: Optional[str] = None,
        timeout: Optional[int] = None,
        input_key: Optional[str] = None,
        input_values_validation: Optional[str] = None,
    ) -> t.SoftwareDeployment:
        """Deploys a config to a server (its minion id; it need not have connected
        yet): the master pushes it at once, or when the minion connects. ``timeout``
        is the seconds the hook may run."""
        spec = c.deployment_spec(config_id, server_id, input_values, action, stack_id, resource_name,
                                 signal_transport, signal_id, signal_verb, timeout, input_key,
                                 input_values_validation)
        return self._call({"op": "create_deployment", "spec": spec}, c.one(t.SoftwareDeployment))

    def update_deployment(
        self,
        deployment_id: str,
        config_id: Optional[str] = None,
        input_values: Optional[Mapping[str, Any]] = None,
        action: Optional[str] = None,
    ) -> t.SoftwareDeployment:
        """Changes a deployment's config, inputs or action (``UPDATE``, ``DELETE``,
        ``SUSPEND``, ``RESUME``): a new derived config is pushed."""
        update: Dict[str, Any] = {}
        if config_id is not None:
            update["config_id"] = config_id
        if input_values is not None:
            update["input_values"] = dict(input_values)
        if action is not None:
            update["action"] = action
        request = {"op": "update_deployment", "id": deployment_id, "update": update}
        return self._call(request, c.one(t.SoftwareDeployment))

    def show_deployment(self, deployment_id: str) -> t.SoftwareDeployment:
        """One deployment."""
        return self._call({"op": "show_deployment", "id": deployment_id}, c.one(t.SoftwareDeployment))

    def list_deployments(self, server_id: Optional[str] = None) -> List[t.SoftwareDeployment]:
        """Deployments, all or one server's."""
        return self._call({"op": "list_deployments", "server_id": server_id}, c.many(t.SoftwareDeployment))

    def delete_deployment(self, deployment_id: str) -> None:
        """Deletes a deployment."""
        return self._call({"op": "delete_deployment", "id": deployment_id}, c.nothing)

    def server_configs(self, server_id: str) -> List[Dict[str, Any]]:
        """Every derived config of a server (Heat's per-server metadata)."""
        return self._call({"op": "server_configs", "server_id": server_id}, c.same)

    def wait_for_deployment(self, deployment_id: str, timeout: Optional[float] = None) -> t.SoftwareDeployment:
        """Waits until a deployment is ``COMPLETE`` or ``FAILED``, pushed by the master
        (never polled). Past ``timeout`` seconds: :class:`~halite.errors.MasterTimeout`."""
        request = {"op": "wait_for_deployment", "id": deployment_id,
                   "timeout_ms": c.optional_millis("timeout", timeout)}
        return self._call(request, c.one(t.SoftwareDeployment))

    def create_deployment_group(
        self,
        config_id: str,
        servers: Sequence[str],
        input_values: Optional[Mapping[str, Any]] = None,
        action: str = "CREATE",
        stack_id: str = "",
        resource_name: str = "",
        timeout: Optional[int] = None,
        batch: Optional[c.Amount] = None,
        batch_wait: float = 0,
        max_errors: Optional[c.Amount] = None,
        canary: int = 0,
        abort_on: Sequence[str] = (),
    ) -> t.DeploymentGroup:
        """Deploys a config to several servers, rolled out with the options of
        :meth:`Client.publish` (Heat's ``SoftwareDeploymentGroup``)."""
        spec: Dict[str, Any] = {
            "config_id": config_id,
            "servers": list(servers),
            "input_values": dict(input_values or {}),
            "action": action,
            "stack_id": stack_id,
            "resource_name": resource_name,
            "timeout_secs": timeout,
            "rollout": c.rollout(batch, batch_wait, max_errors, canary, abort_on),
        }
        return self._call({"op": "create_deployment_group", "spec": spec}, c.one(t.DeploymentGroup))

    def update_deployment_group(
        self,
        group_id: str,
        config_id: Optional[str] = None,
        input_values: Optional[Mapping[str, Any]] = None,
        servers: Optional[Sequence[str]] = None,
        action: str = "UPDATE",
        batch: Optional[c.Amount] = None,
        batch_wait: float = 0,
        max_errors: Optional[c.Amount] = None,
        canary: int = 0,
        abort_on: Sequence[str] = (),
    ) -> t.DeploymentGroup:
        """Changes a group in place, rolled out (Heat's group update): the servers it
        keeps run ``action`` with the new config and inputs, new servers ``CREATE``;
        servers left out leave the group (run their ``DELETE`` and delete their
        deployments yourself). Without rollout options, as the group's last rollout."""
        update: Dict[str, Any] = {"action": action}
        if config_id is not None:
            update["config_id"] = config_id
        if input_values is not None:
            update["input_values"] = dict(input_values)
        if servers is not None:
            update["servers"] = list(servers)
        rollout = c.rollout(batch, batch_wait, max_errors, canary, abort_on)
        if rollout is not None:
            update["rollout"] = rollout
        request = {"op": "update_deployment_group", "id": group_id, "update": update}
        return self._call(request, c.one(t.DeploymentGroup))

    def show_deployment_group(self, group_id: str) -> t.DeploymentGroup:
        """One deployment group."""
        return self._call({"op": "show_deployment_group", "id": group_id}, c.one(t.DeploymentGroup))

    def wait_for_deployment_group(self, group_id: str, timeout: Optional[float] = None) -> t.DeploymentGroup:
        """Waits until a group is ``COMPLETE`` or ``FAILED`` (pushed, never polled)."""
        request = {"op": "wait_for_deployment_group", "id": group_id,
                   "timeout_ms": c.optional_millis("timeout", timeout)}
        return self._call(request, c.one(t.DeploymentGroup))


class FollowedJob:
    """What a job iterator keeps: the job, and each minion's final state as it comes."""

    def __init__(self, jid: str, minions: List[str], unknown: Sequence[str] = ()) -> None:
        #: The job id.
        self.jid = jid
        #: Every minion the job was sent to or waits for.
        self.minions = minions
        #: Ids the target named (a list, or an id without wildcards) that no minion this
        #: principal may target has. Each is also in the results, final at once as ``unknown``.
        self.unknown: List[str] = list(unknown)
        self._finals: Dict[str, t.MinionResult] = {}
        self._done = False

    def _seen(self, update: Optional[t.JobUpdate]) -> Optional[t.JobUpdate]:
        """Records `update` (``None``: the job is done); the update."""
        if update is None:
            self._done = True
        elif update.final:
            self._finals[update.minion] = t.MinionResult(update.minion, update.state, update.ret)
        return update

    def __repr__(self) -> str:
        unknown = f", unknown={self.unknown!r}" if self.unknown else ""
        return f"{type(self).__name__}(jid={self.jid!r}, minions={self.minions!r}{unknown})"


def publish_request(
    tgt: Union[str, Sequence[str]],
    fun: str,
    args: Sequence[Any],
    kwargs: Optional[Mapping[str, Any]],
    tgt_type: str,
    timeout: float,
    ttl: float,
    batch: Optional[c.Amount],
    batch_wait: float,
    max_errors: Optional[c.Amount],
    canary: int,
    abort_on: Sequence[str],
) -> Dict[str, Any]:
    """The ``publish`` request for :meth:`Client.publish`'s arguments."""
    return {
        "op": "publish",
        "target": c.target(tgt, tgt_type),
        "function": fun,
        "args": list(args),
        "kwargs": dict(kwargs or {}),
        "timeout_ms": c.millis("timeout", timeout),
        "ttl_ms": c.millis("ttl", ttl),
        "rollout": c.rollout(batch, batch_wait, max_errors, canary, abort_on),
    }
