"""The blocking client: every call waits with the GIL released, so any number of
threads may share one :class:`Client`."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import _calls as c
from ._calls import DEFAULT_JOB_TIMEOUT
from . import _native
from . import types as t
from ._operations import FollowedJob, Operations, publish_request


def connect_options(**options: Any) -> str:
    """The options of :meth:`Client.connect` as ``halite._native`` takes them."""
    masters = options.get("masters")
    if isinstance(masters, str):
        options["masters"] = [masters]
    for path in ("config_file", "master_config", "key_file"):
        if options.get(path) is not None:
            options[path] = str(options[path])
    return json.dumps({k: v for k, v in options.items() if v is not None})


class Client(Operations):
    """A session with a halite master (or a cluster's masters) as a principal.

    Connect with :meth:`connect`, :meth:`from_config` or :meth:`local_root`. The
    connection is re-established by itself when lost: calls in flight then fail
    with :class:`~halite.errors.DisconnectedError`, event streams resume after
    their last event, and followed jobs are watched again. Use it as a context
    manager, or :meth:`close` it.
    """

    @classmethod
    def connect(
        cls,
        masters: Union[str, Sequence[str], None] = None,
        principal: Optional[str] = None,
        key_file: Optional[str] = None,
        master_key: Optional[str] = None,
        *,
        config_file: Optional[str] = None,
        master_config: Optional[str] = None,
        connect_timeout: Optional[float] = None,
        request_timeout: Optional[float] = None,
        reconnect: Optional[bool] = None,
    ) -> "Client":
        """Connects and authenticates to the first of ``masters`` (``"host:port"``)
        that answers, as ``principal`` with the key in ``key_file``, pinning
        ``master_key`` (64 hex digits, or the path of the master's ``master.pub``;
        for a cluster, the cluster key). Or give only ``config_file`` (a client
        config file, see :meth:`from_config`) or ``master_config`` (root, on the
        master's own host). Timeouts are seconds."""
        options = connect_options(
            masters=masters, principal=principal, key_file=key_file, master_key=master_key,
            config_file=config_file, master_config=master_config, connect_timeout=connect_timeout,
            request_timeout=request_timeout, reconnect=reconnect,
        )
        return cls(_native.NativeClient.connect(options))

    @classmethod
    def from_config(cls, path: str) -> "Client":
        """Connects as a client config file says (TOML: ``masters``, ``master_key``,
        ``principal``, ``key_file``, and optionally ``connect_timeout_secs``,
        ``request_timeout_secs``, ``reconnect``)."""
        return cls.connect(config_file=path)

    @classmethod
    def local_root(cls, master_config: str = "/etc/halite/master.toml") -> "Client":
        """Connects as root on the master's own host, through its config file."""
        return cls.connect(master_config=master_config)

    def _call(self, request: Dict[str, Any], convert: Callable[[Any], Any]) -> Any:
        return convert(json.loads(self._native.call(c.encode(request))))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    # Jobs -----------------------------------------------------------------

    def publish(
        self,
        tgt: Union[str, Sequence[str]],
        fun: str,
        args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None,
        *,
        tgt_type: str = "glob",
        timeout: float = DEFAULT_JOB_TIMEOUT,
        ttl: float = 0,
        batch: Optional[c.Amount] = None,
        batch_wait: float = 0,
        max_errors: Optional[c.Amount] = None,
        canary: int = 0,
        abort_on: Sequence[str] = (),
    ) -> "Job":
        """Publishes ``fun`` to the minions ``tgt`` names and returns at once with the
        job: iterate it for updates as they happen, or :meth:`Job.wait` for every
        final state.

        ``tgt_type`` is Salt's: ``glob``, ``list`` (or pass a list of ids),
        ``pcre``, ``grain``, ``compound``, ``nodegroup``. ``timeout``: seconds
        each minion has; ``ttl``: seconds an offline minion is waited for.
        Rollout, as ``salt -b``: ``batch`` (``2`` or ``"25%"``) at once,
        ``batch_wait`` seconds between, stop past ``max_errors`` failures, run
        ``canary`` targets alone first, stop on events matching ``abort_on``.
        """
        request = publish_request(tgt, fun, args, kwargs, tgt_type, timeout, ttl, batch, batch_wait,
                                  max_errors, canary, abort_on)
        published = self._call(request, c.same)
        return Job(self, published["jid"], published["minions"], published.get("unknown", []))

    def run(
        self,
        tgt: Union[str, Sequence[str]],
        fun: str,
        args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None,
        **options: Any,
    ) -> Dict[str, t.MinionResult]:
        """:meth:`publish`, then wait for every minion's final state (like ``salt``)."""
        return self.publish(tgt, fun, args, kwargs, **options).wait()

    def follow(self, jid: str) -> "Job":
        """A job published elsewhere (by this principal or one allowed to see it), to
        iterate or wait for like one this client published."""
        detail = self._call({"op": "watch", "jid": jid}, c.one(t.JobDetail))
        return Job(self, jid, [m.minion for m in detail.minions])

    def next_job_event(self, jid: str) -> Optional[t.JobUpdate]:
        """The next state change of job ``jid``; ``None`` once every minion reached a
        final state (each final state is handed out once before that)."""
        return self._call({"op": "next_job_event", "jid": jid}, c.job_event)

    # Events ---------------------------------------------------------------

    def events(self, patterns: Union[str, Sequence[str]] = "*", after: Optional[str] = None) -> "EventStream":
        """Subscribes to the events whose tags match any of the globs ``patterns``: an
        iterator of :class:`~halite.types.Event`, pushed by the master. It survives
        reconnects (resuming after its last event); ``after`` resumes after an
        event id a previous stream received."""
        patterns = [patterns] if isinstance(patterns, str) else list(patterns)
        return EventStream(self._native.subscribe(patterns, after))


class Job(FollowedJob):
    """A published job: iterate it for :class:`~halite.types.JobUpdate` s until every
    minion reached a final state, or :meth:`wait`. One thread should read a job."""

    def __init__(self, client: Client, jid: str, minions: List[str], unknown: Sequence[str] = ()) -> None:
        super().__init__(jid, minions, unknown)
        self._client = client

    def __iter__(self) -> Iterator[t.JobUpdate]:
        return self

    def __next__(self) -> t.JobUpdate:
        update = None if self._done else self._seen(self._client.next_job_event(self.jid))
        if update is None:
            raise StopIteration
        return update

    def wait(self) -> Dict[str, t.MinionResult]:
        """Every minion's final state, by minion id, once all are in."""
        for _update in self:
            pass
        return dict(self._finals)

    def cancel(self) -> t.JobDetail:
        """Cancels the job (see :meth:`Client.cancel`)."""
        return self._client.cancel(self.jid)


class EventStream:
    """The events of one subscription, in order. Iterate it, or call :meth:`next`
    with a timeout; :meth:`close` it (or use it as a context manager) to stop."""

    def __init__(self, native: _native.NativeEvents) -> None:
        self._native = native

    def __iter__(self) -> Iterator[t.Event]:
        return self

    def __next__(self) -> t.Event:
        event = self.next()
        assert event is not None  # no timeout: waits until there is one
        return event

    def next(self, timeout: Optional[float] = None) -> Optional[t.Event]:
        """The next event; ``None`` if ``timeout`` seconds pass first."""
        text = self._native.next(timeout)
        return None if text is None else t.Event.from_json(json.loads(text))

    def close(self) -> None:
        """Ends the subscription."""
        self._native.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()
