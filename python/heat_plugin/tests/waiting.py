"""How the Heat plugin's tests wait: for the event or the state they need, ending as soon
as it holds, within a bound sized for a loaded 2-core CI machine (the whole suite beside
them). A bound is never the check itself: what is checked is the state reached."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")

#: The longest anything is waited for: a stack to settle, a resource, a minion to connect,
#: a process to answer. Generous (a loaded machine), and each wait ends once it holds.
TIMEOUT = 180.0


def until(what: str, check: Callable[[], Optional[T]], timeout: float = TIMEOUT, interval: float = 0.1) -> T:
    """``check()``'s first true value, asked every ``interval`` seconds. An exception from it
    means "not yet" (the thing is not up) and is retried; the last one is reported if the
    bound passes."""
    deadline = time.monotonic() + timeout
    last_error: Optional[BaseException] = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as error:  # noqa: BLE001 - not up yet: asked again
            last_error = error
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last_error!r})")
        time.sleep(min(interval, left))


@contextlib.contextmanager
def connecting(client, minions: Iterable[str], timeout: float = TIMEOUT) -> Iterator[None]:
    """Waits, when the block ends, until each of ``minions`` is connected: on its
    ``halite/minion/<id>/connected`` event, subscribed to before the block starts them, or
    seen connected in the master's list (asked again each second, in case a connection
    came before the subscription did)."""
    waiting = set(minions)
    with client.events([f"halite/minion/{m}/connected" for m in sorted(waiting)]) as events:
        yield
        deadline = time.monotonic() + timeout
        while True:
            waiting -= {m.id for m in client.minions("*") if m.connected}
            if not waiting:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for minions {sorted(waiting)} "
                                     "to connect")
            event = events.next(timeout=min(1.0, left))
            if event is not None:
                waiting.discard(event.tag.split("/")[2])
