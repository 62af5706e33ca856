#!/usr/bin/env python3
"""Benchmark: a hot standby relocating its own copy of a tablespace.

Run as root from the repository (the extension must be installed):

    python3 test/bench_standby_relocate.py [--scale 50] [--out test/bench_results/standby_relocate_latest.json]

Not a pytest module: it measures rather than asserts.  A primary with
pgbench at --scale (every table and index in tablespace ts_a) and a
streaming standby of it (hot_standby_feedback on, the server settings of
bench_move.py).  Under TPC-B on the primary (pgbench -c 4 -j 2), a client
on the standby runs point queries on pgbench_accounts by index, one after
the other, and a sampler reads every 100 ms how far the standby's replay
is behind the primary (bytes of WAL, and seconds since the last replayed
commit's time on the primary).  After a warm-up and a baseline window the
standby's ts_a is relocated (tsmove.relocate_tablespace() on the standby,
default rate); then another window.

Reports, for the baseline and during the relocation: the standby query's
latency (median, 99th percentile, worst) and its errors (a cancel is one),
the replay lag (worst bytes, worst seconds); and the
relocation's duration, bytes and how long it held replay paused
(switch_ms).  Writes a markdown table to standby_relocate_latest.md next to
--out, the data as JSON to --out.  Exit status 1 if the relocation failed
or a check of the standby's data against the primary's failed.
"""

import argparse
import datetime
import json
import os
import random
import sys
import tempfile
import threading
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_move import SERVER_CONF, machine_facts  # noqa: E402
from benchlib import fmt, git_head, log, so_mtime  # noqa: E402
from pgcluster import Cluster, make_server_dir  # noqa: E402

WARMUP_S = 10.0
BASELINE_S = 15.0
AFTER_S = 10.0


class StandbyProbe(threading.Thread):
    """Point queries on the standby, back to back, and every 100 ms the
    replay lag; each sample with its time."""

    def __init__(self, primary, standby, accounts):
        super().__init__(daemon=True)
        self.primary, self.standby, self.accounts = primary, standby, accounts
        self.queries = []           # (t, ms)
        self.errors = []            # (t, sqlstate)
        self.lag = []               # (t, bytes, seconds)
        self.stop = threading.Event()

    def run(self):
        next_lag = 0.0
        with self.primary.conn() as pconn:
            sconn = self.standby.conn()
            while not self.stop.is_set():
                aid = random.randint(1, self.accounts)
                t0 = time.time()
                try:
                    sconn.execute("SELECT abalance FROM pgbench_accounts WHERE aid = %s",
                                  (aid,)).fetchone()
                    self.queries.append((t0, (time.time() - t0) * 1000))
                except psycopg.Error as e:
                    self.errors.append((t0, e.sqlstate))
                    sconn.close()
                    sconn = self.standby.conn()
                if t0 >= next_lag:
                    next_lag = t0 + 0.1
                    lsn = pconn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
                    row = sconn.execute(
                        "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())::bigint, "
                        "extract(epoch FROM pg_catalog.clock_timestamp() "
                        "        - pg_last_xact_replay_timestamp())::float8",
                        (lsn,)).fetchone()
                    self.lag.append((t0, row[0], row[1]))
            sconn.close()

    def window(self, start, end):
        lat = sorted(ms for t, ms in self.queries if start <= t < end)
        lags = [(b, s) for t, b, s in self.lag if start <= t < end]

        def pct(p):
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else None
        return {
            "queries": len(lat),
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": lat[-1] if lat else None,
            "errors": [s for t, s in self.errors if start <= t < end],
            "max_lag_bytes": max((b for b, _ in lags), default=None),
            "max_lag_s": max((s for _, s in lags if s is not None), default=None),
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "bench_results", "standby_relocate_latest.json"))
    args = ap.parse_args()

    base = tempfile.mkdtemp(prefix="tsm_bench_standby_")
    make_server_dir(base, 0o755)
    primary = Cluster(base, "primary")
    standby = None
    result = {"ok": False}
    try:
        primary.init(extra_conf=SERVER_CONF).start()
        primary.create_tablespace("ts_a")
        primary.sql("CREATE EXTENSION pg_tsmove")
        log("pgbench -i -s %d into ts_a" % args.scale)
        primary.pgbench_init(args.scale, extra_args=["--tablespace=ts_a",
                                                     "--index-tablespace=ts_a"])
        primary.sql("CHECKPOINT")
        standby = primary.make_standby("standby", extra_conf=SERVER_CONF +
                                       ["hot_standby_feedback = on"])
        primary.wait_for_replay(standby)
        standby.sql("CHECKPOINT")
        new_dir = make_server_dir(os.path.join(standby.root_dir, "relocated"))
        accounts = 100000 * args.scale

        probe = StandbyProbe(primary, standby, accounts)
        probe.start()
        bench = primary.pgbench_run_background(clients=4, jobs=2, seconds=3600)
        time.sleep(WARMUP_S)
        t_base = time.time()
        time.sleep(BASELINE_S)
        t0 = time.time()
        job = standby.sql_scalar("SELECT tsmove.relocate_tablespace('ts_a', %s)", (new_dir,))
        while True:
            state = standby.sql_scalar("SELECT state FROM tsmove.jobs WHERE job_id = %s", (job,))
            if state in ("done", "failed", "cancelled"):
                break
            time.sleep(0.2)
        t1 = time.time()
        time.sleep(AFTER_S)
        t_after = time.time()
        probe.stop.set()
        probe.join(30)
        bench.process.terminate()                # pgbench -T outlasts the run
        job_row = dict(zip(("state", "bytes_written", "switch_ms", "switch_attempts", "error"),
                           standby.sql("SELECT state, bytes_written, switch_ms, switch_attempts, "
                                       "error FROM tsmove.jobs WHERE job_id = %s", (job,))[0]))
        try:
            bench.wait(timeout=30)
        except Exception:
            pass                                # terminated: no summary
        problems = primary.amcheck()            # and CREATE EXTENSION amcheck
        primary.wait_for_replay(standby, timeout=300)
        same = primary.row_hash("pgbench_accounts", "aid") == standby.row_hash(
            "pgbench_accounts", "aid")
        problems += standby.balance_invariant() + standby.amcheck()
        result = {
            "ok": state == "done" and same and not problems,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "git": git_head(), "so_mtime": so_mtime(), "machine": machine_facts(primary),
            "scale": args.scale, "job": job_row, "seconds": t1 - t0,
            "rate_mb_s": (job_row["bytes_written"] or 0) / 1048576 / max(t1 - t0, 1e-6),
            "baseline": probe.window(t_base, t0), "during": probe.window(t0, t1),
            "after": probe.window(t1, t_after),
            "same_data": same, "problems": problems[:10],
        }
    finally:
        for c in (standby, primary):
            if c is not None:
                try:
                    c.destroy()
                except Exception:
                    pass
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2, default=str)
    if "baseline" in result:
        rows = [("baseline", result["baseline"]), ("during the relocation", result["during"]),
                ("after", result["after"])]
        md = ["# A hot standby relocating its own tablespace copy",
              "",
              "`python3 test/bench_standby_relocate.py --scale %d` at %s (%s); %s cores, "
              "%.0f GiB, PostgreSQL %s, %s; primary under pgbench -c 4 -j 2." % (
                  result["scale"], result["git"], result["date"], result["machine"]["nproc"],
                  result["machine"]["mem_gib"], result["machine"]["pg_version"],
                  result["machine"]["disk"]),
              "",
              "Relocation: %s, %.1f s, %s MB at %.1f MB/s, replay held paused %s ms (%s attempts)."
              % (result["job"]["state"], result["seconds"],
                 fmt((result["job"]["bytes_written"] or 0) / 1048576, "%.0f"),
                 result["rate_mb_s"], fmt(result["job"]["switch_ms"], "%.1f"),
                 result["job"]["switch_attempts"]),
              "",
              "| window | standby queries | p50 ms | p99 ms | worst ms | errors | worst replay lag (bytes) | worst replay lag (s) |",
              "|---|---|---|---|---|---|---|---|"]
        for name, w in rows:
            md.append("| %s | %d | %s | %s | %s | %d | %s | %s |" % (
                name, w["queries"], fmt(w["p50_ms"]), fmt(w["p99_ms"]), fmt(w["max_ms"]),
                len(w["errors"]), fmt(w["max_lag_bytes"], "%d"), fmt(w["max_lag_s"])))
        md += ["", "Standby data equal to the primary's afterwards: %s; balance invariant and "
               "amcheck on the standby: %s." % (result["same_data"],
                                                "clean" if not result["problems"] else result["problems"])]
        with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
            f.write("\n".join(md) + "\n")
        print("\n".join(md))
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
