"""The asyncio client: the same calls as awaitables, concurrent on one connection."""

from __future__ import annotations

import asyncio

import halite


def test_async_client_runs_jobs_concurrently_and_streams_updates(master) -> None:
    async def main() -> None:
        async with await halite.AsyncClient.local_root(str(master.config)) as client:
            assert {k.id for k in await client.keys("*")} >= {"web1", "web2", "db1"}
            runs = await asyncio.gather(*(client.run("web*", "test.echo", [n]) for n in range(10)))
            for n, results in enumerate(runs):
                assert {m: r.outputs for m, r in results.items()} == {"web1": n, "web2": n}
            job = await client.publish("db1", "test.sleep", [0.2])
            states = [update.state async for update in job]
            assert states[-1] == "returned", states
            detail = await client.job(job.jid)
            assert detail.done
            try:
                await client.job("20990101000000000000")
            except halite.NotFound:
                pass
            else:
                raise AssertionError("a missing job was found")

    asyncio.run(main())


def test_async_events_survive_a_cancelled_wait(master) -> None:
    """A wait for an event cancelled by a timeout drops nothing: the event that comes
    later is the next one read."""

    async def main() -> None:
        client = await halite.AsyncClient.local_root(str(master.config))
        events = await client.events(["engine/*"])
        try:
            await asyncio.wait_for(events.__anext__(), timeout=0.3)
        except asyncio.TimeoutError:
            pass
        else:
            raise AssertionError("an event came from nowhere")
        tag = await client.fire_event("async/one", 1)
        event = await asyncio.wait_for(events.__anext__(), timeout=10)
        assert (event.tag, event.data["data"]) == (tag, 1)
        # Another task keeps running while one waits.
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        waiter = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.3)
        await client.fire_event("async/two", 2)
        second = await asyncio.wait_for(waiter, timeout=10)
        ticker.cancel()
        assert second.data["data"] == 2 and ticks >= 10
        events.close()
        client.close()

    asyncio.run(main())
