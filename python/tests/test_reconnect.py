"""A master killed and restarted: the client connects again by itself, a job it
follows ends with every result, its event stream resumes, and calls made while no
master answers fail with a typed error in bounded time."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import halite
from processes import Master, wait_for


def test_the_client_reconnects_and_its_stream_resumes_after_a_master_restart() -> None:
    directory = Path(tempfile.mkdtemp(prefix="halite-py-restart-"))
    master = Master(directory)
    try:
        master.start_minion("web1")
        client = master.root(request_timeout=10)
        events = client.events("engine/*")
        results: list = []
        caller = threading.Thread(target=lambda: results.append(client.run("web1", "test.sleep", [2])))
        caller.start()
        wait_for("the job to run", lambda: any(j.states.get("running") for j in client.jobs(5)))
        master.kill()
        started = time.monotonic()
        try:
            client.keys("*")
        except (halite.DisconnectedError, halite.ConnectError, halite.RequestTimeout):
            pass
        else:
            raise AssertionError("a request was answered with no master running")
        assert time.monotonic() - started < 15

        master.start()
        # The job followed across the restart ends with the minion's result (its outbox
        # delivered it to the restarted master).
        caller.join(timeout=60)
        assert not caller.is_alive(), "the followed job never ended"
        assert results[0]["web1"].state == "returned", results
        wait_for("the client to reconnect", lambda: client.keys("web1"))
        tag = client.fire_event("after/restart", {"ok": True})
        event = events.next(timeout=20)
        while event is not None and event.tag != tag:
            event = events.next(timeout=20)
        assert event is not None and event.data["data"] == {"ok": True}
        master.wait_connected(["web1"])
        assert client.run("web1", "test.ping")["web1"].state == "returned"
        events.close()
        client.close()
    finally:
        master.stop()
        shutil.rmtree(directory, ignore_errors=True)
