"""The audit trail through the SDK: what each principal may read of it, paging, the check."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, List

import pytest

import halite


def _eventually(read: Callable[[], List[halite.types.AuditRecord]], keep: Callable[[dict], bool]) -> List[dict]:
    """The entries ``read`` returns that ``keep`` keeps, once there are some (a job's end is
    recorded at the commit after it ends)."""
    deadline = time.monotonic() + 30
    while True:
        found = [r.entry for r in read() if keep(r.entry)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_requests_and_job_ends_are_recorded_and_each_principal_reads_its_own(
    master, root: halite.Client, tmp_path: Path
) -> None:
    jid = root.publish("web1", "test.ping").jid
    ops_key = tmp_path / "ops.key"
    root.add_principal("ops", halite.generate_key(str(ops_key)),
                       {"rules": [{"targets": "web*", "functions": ["test.*"]}]})
    acme_key = tmp_path / "acme.key"
    root.add_principal("acme", halite.generate_key(str(acme_key)),
                       {"tenant": "acme", "rules": [{"targets": "*", "functions": ["test.*"]}]})
    connect = lambda name, key: halite.Client.connect(  # noqa: E731
        [master.addr], principal=name, key_file=str(key), master_key=master.master_key_hex)
    with connect("ops", ops_key) as ops, connect("acme", acme_key) as acme:
        with pytest.raises(halite.Forbidden):
            ops.publish("web1", "cmd.run", ["id"])
        # Root reads everything: its own publish, the job's end, ops' refusal with its reason.
        ended = _eventually(lambda: root.audit(1000, action="job_end"), lambda e: e["detail"].get("jid") == jid)
        assert ended and ended[0]["minions"] == ["web1"], ended
        refused = _eventually(lambda: root.audit(1000, principal="ops", decision="refused"),
                              lambda e: e["action"] == "publish")
        assert refused and "cmd.run" in refused[0]["reason"], refused
        published = [r.entry for r in root.audit(1000, principal="root", action="publish")]
        assert any(e["detail"]["jid"] == jid and e["decision"] == "granted" for e in published), published
        # ops reads its own records alone; asking for root's finds nothing.
        assert {r.entry["principal"] for r in ops.audit(1000)} == {"ops"}
        assert ops.audit(1000, principal="root") == []
        # A tenant's principal reads its tenant's records alone, never another's or root's.
        acme.minions("*")
        assert all(r.entry.get("tenant") == "acme" for r in acme.audit(1000))
        assert acme.audit(1000, tenant="other") == []
        with pytest.raises(halite.Forbidden):
            acme.audit_verify()
    root.remove_principal("ops")
    root.remove_principal("acme")


def test_pages_follow_one_another_and_the_chain_verifies(root: halite.Client) -> None:
    for _ in range(5):
        root.keys("*")
    everything = root.audit(1000)
    assert len(everything) >= 5
    pages: List[halite.types.AuditRecord] = []
    after = None
    while True:
        page = root.audit(2, after=after)
        if not page:
            break
        pages.extend(page)
        after = page[-1].id
    # Paged, the trail is what one listing gave, in store order, and more (what came since).
    assert [r.id for r in pages[: len(everything)]] == [r.id for r in everything]
    assert [r.id for r in pages] == sorted(r.id for r in pages)
    first = pages[0]
    assert first.chain and first.seq >= 1 and len(first.hash) == 64 and len(first.signature) == 128
    since = root.audit(1000, since=time.time() - 3600, until=time.time() + 60)
    assert since and all(r.entry["at_ms"] >= (time.time() - 3600) * 1000 for r in since)
    verified = root.audit_verify()
    assert verified.broken is None and verified.records >= len(everything), verified
    assert verified.heads, verified
