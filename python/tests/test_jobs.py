"""Jobs through the blocking client: publish, follow, wait, target, roll out, cancel."""

from __future__ import annotations

import threading
import time

import pytest

import halite
from halite.types import JobDetail


def test_run_returns_every_minions_final_state_as_typed_results(root: halite.Client) -> None:
    results = root.run("web*", "test.echo", ["hello"])
    assert sorted(results) == ["web1", "web2"]
    for minion, result in results.items():
        assert result.state == "returned", result
        assert result.success and result.outputs == "hello"
        assert result.ret is not None and result.ret.minion == minion and result.ret.retcode == 0


def test_publish_streams_updates_until_every_minion_is_final(root: halite.Client) -> None:
    job = root.publish(["web1", "db1"], "test.sleep", [0.2])
    assert sorted(job.minions) == ["db1", "web1"]
    updates = list(job)
    finals = [u for u in updates if u.final]
    assert sorted(u.minion for u in finals) == ["db1", "web1"], updates
    assert all(u.jid == job.jid for u in updates)
    # Progress came before the end: each minion ran before it returned.
    for minion in ("web1", "db1"):
        states = [u.state for u in updates if u.minion == minion]
        assert states[-1] == "returned" and set(states[:-1]) <= {"sent", "running"}, states
    detail = root.job(job.jid)
    assert isinstance(detail, JobDetail) and detail.done
    assert detail.summary.function == "test.sleep" and detail.args == [0.2]
    assert {m.minion: m.state for m in detail.minions} == {"web1": "returned", "db1": "returned"}
    assert job.jid in [j.jid for j in root.jobs(limit=20)]
    assert job.jid in [j.jid for j in root.jobs(function="test.*", caller="root", since=time.time() - 600)]
    assert job.jid not in [j.jid for j in root.jobs(function="cmd.*")]
    assert root.jobs(until=86400) == []


def test_targets_take_salts_tgt_types(root: halite.Client) -> None:
    assert sorted(root.run("web1,db1", "test.ping", tgt_type="list")) == ["db1", "web1"]
    assert sorted(root.run("web[0-9]+", "test.ping", tgt_type="pcre")) == ["web1", "web2"]
    assert sorted(root.run("role:db", "test.ping", tgt_type="grain")) == ["db1"]
    assert sorted(root.run("G@role:web and not web2", "test.ping", tgt_type="compound")) == ["web1"]
    assert sorted(root.run("role:D.*", "test.ping", tgt_type="grain_pcre")) == ["db1"]
    assert {"db1", "web1", "web2"} <= set(root.run("0.0.0.0/0", "test.ping", tgt_type="ipcidr"))
    with pytest.raises(halite.InvalidArgument, match="tgt_type"):
        root.publish("web1", "test.ping", tgt_type="range")
    # A list naming an id the master does not know says which.
    job = root.publish(["web1", "nosuch"], "test.ping")
    assert (job.minions, job.unknown) == (["web1"], ["nosuch"]), job
    assert "nosuch" in repr(job)
    results = job.wait()
    assert {m: r.state for m, r in results.items()} == {"web1": "returned", "nosuch": "unknown"}, results
    assert {m.minion: m.state for m in root.job(job.jid).minions} == {"web1": "returned", "nosuch": "unknown"}


def test_failures_are_final_states_not_exceptions(root: halite.Client) -> None:
    results = root.run("web1", "cmd.run", ["exit 3"], {"shell": True})
    assert results["web1"].state == "failed"
    assert results["web1"].ret is not None and results["web1"].ret.retcode == 3
    assert not results["web1"].success


def test_a_rollout_stops_past_its_error_budget_and_skips_the_rest(root: halite.Client) -> None:
    job = root.publish(["web1", "web2", "db1"], "cmd.run", ["false"], batch=1, max_errors=0)
    results = job.wait()
    states = sorted(r.state for r in results.values())
    # The first target fails; nothing more starts.
    assert states == ["failed", "skipped", "skipped"], results
    detail = root.job(job.jid)
    assert detail.summary.rollout is not None
    assert detail.summary.rollout.state == "stopped"
    assert detail.summary.rollout.spec.batch == {"count": 1}
    with pytest.raises(halite.InvalidArgument, match="batch"):
        root.publish("web*", "test.ping", batch="150%")


def test_cancel_ends_a_running_job(root: halite.Client) -> None:
    job = root.publish("web1", "test.sleep", [30])
    for update in job:
        if update.state == "running":
            break
    detail = job.cancel()
    assert detail.jid == job.jid
    results = job.wait()
    assert results["web1"].state == "cancelled", results
    with pytest.raises(halite.NotFound):
        root.cancel(job.jid)


def test_follow_reads_a_job_published_by_another_client(master, root: halite.Client) -> None:
    job = root.publish("web2", "test.sleep", [0.3])
    with master.root() as other:
        followed = other.follow(job.jid)
        assert followed.minions == ["web2"]
        assert followed.wait()["web2"].state == "returned"


def test_threads_share_one_client(root: halite.Client) -> None:
    """Eight threads publish and wait at once on one connection (that the GIL is released
    while they wait is test_events.test_the_gil_is_released_while_a_call_waits)."""
    results: dict = {}
    errors: list = []

    def worker(n: int) -> None:
        try:
            results[n] = root.run(["web1", "web2", "db1"], "test.echo", [n])
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for n in range(8):
        assert {m: r.outputs for m, r in results[n].items()} == {"web1": n, "web2": n, "db1": n}
