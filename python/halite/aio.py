"""The asyncio client: the same calls as :class:`halite.Client`, as awaitables.
Cancelling an await drops the call (an event being awaited is not lost)."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _calls as c
from ._calls import DEFAULT_JOB_TIMEOUT
from . import _native
from . import types as t
from ._operations import FollowedJob, Operations, publish_request
from .client import connect_options


class AsyncClient(Operations):
    """:class:`halite.Client` for asyncio: every method of it returns an awaitable
    (``await client.keys()``), :meth:`publish` gives an :class:`AsyncJob` and
    :meth:`events` an async iterator. Use ``async with``, or :meth:`close` it."""

    @classmethod
    async def connect(
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
    ) -> "AsyncClient":
        """As :meth:`halite.Client.connect`."""
        options = connect_options(
            masters=masters, principal=principal, key_file=key_file, master_key=master_key,
            config_file=config_file, master_config=master_config, connect_timeout=connect_timeout,
            request_timeout=request_timeout, reconnect=reconnect,
        )
        return cls(await _native.NativeClient.connect_async(options))

    @classmethod
    async def from_config(cls, path: str) -> "AsyncClient":
        """As :meth:`halite.Client.from_config`."""
        return await cls.connect(config_file=path)

    @classmethod
    async def local_root(cls, master_config: str = "/etc/halite/master.toml") -> "AsyncClient":
        """As :meth:`halite.Client.local_root`."""
        return await cls.connect(master_config=master_config)

    def _call(self, request: Dict[str, Any], convert: Callable[[Any], Any]) -> Awaitable[Any]:
        answer = self._native.call_async(c.encode(request))

        async def converted() -> Any:
            return convert(json.loads(await answer))

        return converted()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *_exc: Any) -> None:
        self.close()

    async def publish(
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
    ) -> "AsyncJob":
        """As :meth:`halite.Client.publish`."""
        request = publish_request(tgt, fun, args, kwargs, tgt_type, timeout, ttl, batch, batch_wait,
                                  max_errors, canary, abort_on)
        published = await self._call(request, c.same)
        return AsyncJob(self, published["jid"], published["minions"], published.get("unknown", []))

    async def run(
        self,
        tgt: Union[str, Sequence[str]],
        fun: str,
        args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None,
        **options: Any,
    ) -> Dict[str, t.MinionResult]:
        """As :meth:`halite.Client.run`."""
        job = await self.publish(tgt, fun, args, kwargs, **options)
        return await job.wait()

    async def follow(self, jid: str) -> "AsyncJob":
        """As :meth:`halite.Client.follow`."""
        detail = await self._call({"op": "watch", "jid": jid}, c.one(t.JobDetail))
        return AsyncJob(self, jid, [m.minion for m in detail.minions])

    def next_job_event(self, jid: str) -> Awaitable[Optional[t.JobUpdate]]:
        """As :meth:`halite.Client.next_job_event`."""
        return self._call({"op": "next_job_event", "jid": jid}, c.job_event)

    async def events(
        self, patterns: Union[str, Sequence[str]] = "*", after: Optional[str] = None
    ) -> "AsyncEventStream":
        """As :meth:`halite.Client.events`: ``async for event in await client.events(...)``."""
        patterns = [patterns] if isinstance(patterns, str) else list(patterns)
        return AsyncEventStream(await self._native.subscribe_async(patterns, after))


class AsyncJob(FollowedJob):
    """A published job: ``async for update in job``, or ``await job.wait()``."""

    def __init__(self, client: AsyncClient, jid: str, minions: List[str], unknown: Sequence[str] = ()) -> None:
        super().__init__(jid, minions, unknown)
        self._client = client

    def __aiter__(self) -> AsyncIterator[t.JobUpdate]:
        return self

    async def __anext__(self) -> t.JobUpdate:
        update = None if self._done else self._seen(await self._client.next_job_event(self.jid))
        if update is None:
            raise StopAsyncIteration
        return update

    async def wait(self) -> Dict[str, t.MinionResult]:
        """Every minion's final state, by minion id, once all are in."""
        async for _update in self:
            pass
        return dict(self._finals)

    async def cancel(self) -> t.JobDetail:
        """Cancels the job."""
        return await self._client.cancel(self.jid)


class AsyncEventStream:
    """The events of one subscription, as an async iterator."""

    def __init__(self, native: _native.NativeEvents) -> None:
        self._native = native

    def __aiter__(self) -> AsyncIterator[t.Event]:
        return self

    async def __anext__(self) -> t.Event:
        return t.Event.from_json(json.loads(await self._native.next_async()))

    def close(self) -> None:
        """Ends the subscription."""
        self._native.close()

    async def __aenter__(self) -> "AsyncEventStream":
        return self

    async def __aexit__(self, *_exc: Any) -> None:
        self.close()
