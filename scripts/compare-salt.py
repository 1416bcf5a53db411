#!/usr/bin/env python3
"""Prints halite against Salt, side by side, from one run of scripts/bench-vs-salt.sh.

Usage: compare-salt.py HALITE_JSON SALT_JSON [OUT_JSON]
HALITE_JSON is bench-tiers' output; SALT_JSON is ../shared/bench/salt/bench.py's.
"""
import json
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        halite = json.load(f)
    with open(argv[2]) as f:
        salt = json.load(f)
    rows = []

    def row(what, ours, theirs, unit, higher_is_better=False):
        if ours is None or theirs is None or ours <= 0 or theirs <= 0:
            return
        ratio = ours / theirs if higher_is_better else theirs / ours
        rows.append({"figure": what, "halite": ours, "salt": theirs, "unit": unit, "halite_better_by": ratio})

    for n, tier in sorted(halite["tiers"].items(), key=lambda kv: int(kv[0])):
        theirs = salt["tiers"].get(n)
        if not theirs:
            continue
        row(f"test.ping, {n} minions, CLI wall time", tier["cli_test_ping_s"], theirs["cli_test_ping_s"]["median"], "s")
        row(f"cmd.run 'echo hi', {n} minions, CLI wall time", tier["cli_cmd_run_s"], theirs["cli_cmd_run_s"]["median"], "s")
        row(f"sequential test.ping to one minion, {n} connected", tier["seq_jobs_per_s"],
            theirs["seq_ping_one_minion"]["jobs_per_s"]["median"], "jobs/s", higher_is_better=True)
        row(f"minion RSS, {n} minions", tier["minion_rss_mib"], theirs["mem_one_minion"]["rss_mib"], "MiB")
    row("minion cold start: spawn → first job answered", halite["cold_start_first_job_s"],
        salt["cold_start"]["first_ping_s"]["median"], "s")
    row("local call test.ping", halite["local_call_s"], salt["salt_call_local_test_ping_s"]["median"], "s")

    print(f"{'figure':<56} {'halite':>12} {'Salt 3008.5':>12}  halite better by")
    for r in rows:
        print(f"{r['figure']:<56} {r['halite']:>10.4g} {r['unit']:<4}{r['salt']:>8.4g} {r['unit']:<6} x{r['halite_better_by']:.0f}")
    if len(argv) > 3:
        with open(argv[3], "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
