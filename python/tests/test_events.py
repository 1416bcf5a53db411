"""Bus events: pushed in order, with a timeout, fired by engines, surviving a master restart."""

from __future__ import annotations

import halite


def test_events_are_pushed_as_jobs_run(root: halite.Client) -> None:
    with root.events("halite/job/*/ret/*") as events:
        job = root.publish("web*", "test.ping")
        seen = {}
        while len(seen) < 2:
            event = events.next(timeout=20)
            assert event is not None, "no return event within 20 s"
            if event.tag.startswith(f"halite/job/{job.jid}/ret/"):
                seen[event.tag.rsplit("/", 1)[1]] = event
        assert sorted(seen) == ["web1", "web2"]
        assert all(e.id for e in seen.values())
        job.wait()
        # Nothing more is coming for this pattern: the timeout says so.
        assert events.next(timeout=0.2) is None


def test_engines_fire_events_that_subscribers_receive(root: halite.Client) -> None:
    with root.events("engine/*") as events:
        tag = root.fire_event("stack/web/ready", {"servers": 2})
        assert tag == "engine/root/stack/web/ready"
        event = next(iter(events))
        assert event.tag == tag
        assert event.data["data"] == {"servers": 2}
    try:
        root.fire_event("../bad tag")
    except halite.errors.BadRequest as error:
        assert error.kind == "bad_request"
    else:
        raise AssertionError("a malformed tag was accepted")


def test_a_closed_stream_says_so(root: halite.Client) -> None:
    events = root.events("nothing/*")
    events.close()
    try:
        events.next(timeout=1)
    except halite.DisconnectedError:
        pass
    else:
        raise AssertionError("next() on a closed stream returned")


def test_the_gil_is_released_while_a_call_waits(root: halite.Client) -> None:
    """A thread waits a whole second for an event that never comes; meanwhile this
    thread keeps running Python (held, the GIL would stop it for that second)."""
    import threading

    events = root.events("never/*")
    waiter = threading.Thread(target=events.next, kwargs={"timeout": 1.0})
    waiter.start()
    spins = 0
    while waiter.is_alive():
        spins += 1
    waiter.join()
    events.close()
    assert spins > 100_000, spins
