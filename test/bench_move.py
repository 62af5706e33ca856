#!/usr/bin/env python3
"""Benchmark: pg_tsmove against ALTER TABLE SET TABLESPACE and pg_repack.

Run as root from the repository (the extension must be installed, and
pg_repack 1.4.x with its extension, Debian package postgresql-15-repack):

    python3 test/bench_move.py [--scale 50] [--load-seconds 100]
                               [--out test/bench_results/latest.json] [--keep]

Not a pytest module (no test_ prefix, no test functions): it takes several
minutes and measures rather than asserts.  It starts one throwaway cluster
with test/pgcluster.py under /tmp, loads one pgbench database (scale 50 by
default: pgbench_accounts is ~640 MiB; the script checks that it is at least
600 MiB and says so), and moves pgbench_accounts -- the table only, never
its indexes -- between tablespaces ts_a and ts_b with three methods:

    ALTER     ALTER TABLE pgbench_accounts SET TABLESPACE <target>
    tsmove    SELECT tsmove.move('pgbench_accounts', <target>[, max_rate_mb => 0]);
              CALL tsmove.wait_for(job)  (moves.wait_job_without_snapshot)
    pg_repack pg_repack --no-order --table=pgbench_accounts --tablespace=<target>
              (without --moveidx: the indexes are rebuilt where they are)

A. Idle, unthrottled (tsmove with max_rate_mb => 0).  CHECKPOINT before each
   method.  Per method: wall time, WAL bytes (pg_current_wal_insert_lsn
   before/after), WAL / relation size; for tsmove blocks_total,
   blocks_recopied and switch_ms from tsmove.jobs.
   Targets: tsmove time / ALTER time <= 1.0;
            tsmove WAL / ((blocks_total + blocks_recopied) * 8192) <= 1.15.

B. Under TPC-B load, one method after the other on the same database:
   pgbench -n -b tpcb-like -c 4 -j 2 -P 1 --log -T <load-seconds>; after a
   10 s warm-up a 15 s baseline window; then the move starts (tsmove at its
   DEFAULT rate, i.e. pg_tsmove.max_rate_mb, which is SHOWn and reported)
   and the script waits for it to end.  From pgbench's per-transaction log
   (completion timestamp and latency of every transaction): TPS of the
   move window [move start, move end] over the baseline's, the baseline
   being the 15 s before the move and the 15 s from 3 s after it, pooled
   (a drift of the load over the run would otherwise read as the move's
   cost: with no move at all, the 15 s after 25 s read 0.91-1.10 of the
   15 s before in five runs; the ratio to the 15 s before alone is also
   given), the largest latency of the transactions that overlapped the move
   window (so a transaction blocked by a switch or by ALTER's lock counts),
   and failed transactions.  For tsmove also switch_ms, lock_wait_ms,
   switch_attempts and blocks_recopied.  If a move ends after pgbench, the
   report says so.
   Targets (tsmove): TPS ratio >= 0.90; max latency <= 100 ms; 0 failed.

After every move (A and B): pgbench balance invariant, amcheck of
pgbench_accounts and its primary key (heap + heapallindexed btree check),
and orphan files (pgcluster.balance_invariant / amcheck / orphan_files).
Any integrity problem, or a move that fails, makes the exit status non-zero
(1); missed performance targets are reported as MISS but do not.

C. Prints one markdown table (methods side by side, targets, PASS/MISS) with
   the machine facts, writes it to test/bench_results/latest.md (next to
   --out) and the same data as JSON to --out; the server log is saved as
   latest_server.log there too.

Server settings (what a DBA would use on this 2-core / 24 GiB machine; the
rest are PostgreSQL defaults, plus what pgcluster.init() writes:
wal_level=replica, pg_tsmove preloaded):
    shared_buffers = 256MB
    max_wal_size = 4GB, min_wal_size = 1GB   (checkpoints do not dominate)
    checkpoint_timeout = 15min
    fsync = on, synchronous_commit = on, full_page_writes = on (defaults)
    log_checkpoints = on                     (so a checkpoint in a window shows)
    autovacuum = on (default)
pg_tsmove settings are its defaults (max_rate_mb 32, switch_lock_timeout
20ms, switch_backlog_blocks 256).

During each loaded run a sampler thread records, once a second, the
machine's CPU busy % (/proc/stat), the disk's write MB/s (/proc/diskstats)
and tsmove.job_progress(); the JSON keeps the series, the table shows the
baseline/move means, and the JSON lists the largest latencies of the move
window with their completion time relative to the move's end (to tell a
switch stall from a writeback stall).

A run at scale 50 with the defaults takes about 6 minutes on 2 cores
(351 s measured; --load-seconds 100 x 3 methods dominate).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (Pgbench, Sampler, fmt, git_head, log, server_log_problems,  # noqa: E402
                      so_mtime, verdict, wal_diff, wal_lsn)
from moves import wait_job_without_snapshot  # noqa: E402
from pgcluster import PG_BIN, Cluster, chown_to_server_user  # noqa: E402

TABLE = "pgbench_accounts"
BLOCK = 8192
MIN_REL_BYTES = 600 * 1024 * 1024
WARMUP_S = 10.0
BASELINE_S = 15.0
# The baseline also takes BASELINE_S from this long after the move ends
# (benchlib.Pgbench.bracketed_baseline), unless less than AFTER_MIN_S is left.
AFTER_GAP_S = 3.0
AFTER_MIN_S = 5.0

SERVER_CONF = [
    "shared_buffers = 256MB",
    "max_wal_size = 4GB",
    "min_wal_size = 1GB",
    "checkpoint_timeout = 15min",
    "fsync = on",
    "synchronous_commit = on",
    "full_page_writes = on",
    "log_checkpoints = on",
]

TARGETS = {
    "idle_time_ratio": 1.0,        # tsmove time / ALTER time, <=
    "idle_wal_ratio": 1.15,        # WAL / ((total + recopied) * 8192), <=
    "load_tps_ratio": 0.90,        # TPS during move / baseline, >=
    "load_max_latency_ms": 100.0,  # <=
    "load_failed": 0,              # ==
}


# ---------------------------------------------------------------------------
# helpers on the cluster

def other_ts(ts):
    return "ts_b" if ts == "ts_a" else "ts_a"


def table_tablespace(c):
    return c.sql_scalar("""
        SELECT coalesce(t.spcname, 'pg_default') FROM pg_class c
        LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace
        WHERE c.oid = %s::regclass""", (TABLE,))


def rel_size(c):
    return int(c.sql_scalar("SELECT pg_relation_size(%s)", (TABLE,)))


def index_tablespaces(c):
    return c.sql("""
        SELECT i.indexrelid::regclass::text, coalesce(t.spcname, 'pg_default')
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace
        WHERE i.indrelid = %s::regclass ORDER BY 1""", (TABLE,))


def job_row(c, job):
    cols = ("state", "blocks_total", "blocks_copied", "blocks_recopied",
            "bytes_written", "wal_bytes", "switch_attempts", "lock_wait_ms",
            "switch_ms", "max_rate_mb_s", "started_at", "finished_at", "error")
    row = c.sql("SELECT " + ", ".join(cols) +
                " FROM tsmove.jobs WHERE job_id = %s", (job,))[0]
    out = dict(zip(cols, row))
    for k in ("started_at", "finished_at"):
        if out[k] is not None:
            out[k] = out[k].isoformat()
    for k in ("blocks_total", "blocks_copied", "blocks_recopied",
              "bytes_written", "wal_bytes", "switch_attempts"):
        if out[k] is not None:
            out[k] = int(out[k])
    for k in ("lock_wait_ms", "switch_ms", "max_rate_mb_s"):
        if out[k] is not None:
            out[k] = float(out[k])
    return out


def integrity(c, label):
    """Balance invariant, amcheck of the table and its indexes, orphans."""
    t = time.monotonic()
    problems = []
    problems += c.balance_invariant()
    problems += c.amcheck(relations=[TABLE])
    problems += c.orphan_files()
    ts = table_tablespace(c)
    res = {"ok": not problems, "problems": problems, "tablespace": ts,
           "seconds": round(time.monotonic() - t, 1)}
    log("integrity after %s: %s (table in %s, %.0f s)"
        % (label, "OK" if not problems else "PROBLEMS: %s" % problems, ts,
           res["seconds"]))
    return res


# ---------------------------------------------------------------------------
# the three methods; each returns a dict with start/end wall clock times

def run_alter(c, target):
    with c.conn() as conn:
        t0 = time.time()
        conn.execute("ALTER TABLE %s SET TABLESPACE %s" % (TABLE, target))
        t1 = time.time()
    return {"start": t0, "end": t1, "ok": True}


def run_tsmove(c, target, rate=None, wait_timeout_s=1800):
    with c.conn() as conn:
        t0 = time.time()
        if rate is None:
            job = conn.execute("SELECT tsmove.move(%s, %s)",
                               (TABLE, target)).fetchone()[0]
        else:
            job = conn.execute("SELECT tsmove.move(%s, %s, max_rate_mb => %s)",
                               (TABLE, target, rate)).fetchone()[0]
    # not SELECT tsmove.wait(): its snapshot would cost pgbench
    state = wait_job_without_snapshot(c, job, wait_timeout_s)
    t1 = time.time()
    row = job_row(c, job)
    res = {"start": t0, "end": t1, "ok": state == "done", "job": job,
           "state": state, "jobrow": row}
    if state != "done":
        res["error"] = "job %s ended in state %s: %s" % (job, state, row["error"])
    return res


def run_repack(c, target):
    argv = ["pg_repack", "--no-order", "--table=%s" % TABLE,
            "--tablespace=%s" % target, "-h", c.socket_dir, "-p", str(c.port),
            "-U", "postgres", "-d", "postgres"]
    exe = os.path.join(PG_BIN, "pg_repack")
    if os.path.exists(exe):
        argv[0] = exe
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    t1 = time.time()
    res = {"start": t0, "end": t1, "ok": proc.returncode == 0,
           "output": (proc.stdout + proc.stderr).strip()}
    if proc.returncode != 0:
        res["error"] = "pg_repack exit %d: %s" % (proc.returncode, res["output"])
    return res


METHODS = {"ALTER": run_alter, "tsmove": run_tsmove, "pg_repack": run_repack}


# ---------------------------------------------------------------------------
# A. idle

def idle_move(c, method, target):
    c.sql("CHECKPOINT")
    size = rel_size(c)
    src = table_tablespace(c)
    lsn0 = wal_lsn(c)
    if method == "tsmove":
        r = METHODS[method](c, target, rate=0)
    else:
        r = METHODS[method](c, target)
    lsn1 = wal_lsn(c)
    wal = wal_diff(c, lsn0, lsn1)
    out = {"method": method, "from": src, "to": target,
           "rel_bytes_before": size, "rel_bytes_after": rel_size(c),
           "seconds": r["end"] - r["start"], "wal_bytes": wal,
           "wal_per_rel": wal / size, "ok": r["ok"],
           "tablespace_after": table_tablespace(c)}
    for k in ("error", "jobrow", "job", "output"):
        if k in r:
            out[k] = r[k]
    if method == "tsmove" and r.get("jobrow"):
        j = r["jobrow"]
        copied = (j["blocks_total"] + j["blocks_recopied"]) * BLOCK
        out["wal_per_copied"] = wal / copied if copied else None
    if r["ok"] and out["tablespace_after"] != target:
        out["ok"] = False
        out["error"] = "table is in %s after the move, not %s" % (
            out["tablespace_after"], target)
    log("idle %-9s %s -> %s: %.2f s, WAL %.1f MB (%.3f x rel)%s"
        % (method, src, target, out["seconds"], wal / 1e6, out["wal_per_rel"],
           "" if out["ok"] else "  FAILED: %s" % out.get("error")))
    return out


# ---------------------------------------------------------------------------
# B. under load

def loaded_move(c, method, target, load_seconds, workdir):
    src = table_tablespace(c)
    # What pgbench does before a run without -n (it would also truncate
    # pgbench_history, which the balance invariant needs): keep the small
    # hot tables from bloating from one run to the next.
    c.sql("VACUUM pgbench_branches")
    c.sql("VACUUM pgbench_tellers")
    c.sql("CHECKPOINT")
    size = rel_size(c)
    rate = c.sql_scalar("SHOW pg_tsmove.max_rate_mb")
    bench = Pgbench(c, load_seconds, workdir)
    sampler = Sampler(c, bench.t0)
    sampler.start()
    move_at = bench.t0 + WARMUP_S + BASELINE_S
    time.sleep(max(0.0, move_at - time.time()))
    log("load %-9s %s -> %s: move starts %.1f s into the pgbench run"
        % (method, src, target, time.time() - bench.t0))
    lsn0 = wal_lsn(c)
    try:
        r = METHODS[method](c, target)
    except Exception as e:          # keep pgbench's results and the log
        r = {"start": move_at, "end": time.time(), "ok": False,
             "error": "%s: %s" % (type(e).__name__, e)}
    lsn1 = wal_lsn(c)
    finished_in_load = r["end"] <= bench.t0 + load_seconds
    log("load %-9s move took %.1f s%s; waiting for pgbench"
        % (method, r["end"] - r["start"],
           "" if finished_in_load else " (ENDED AFTER pgbench's -T)"))
    bench.wait()
    sampler.stop.set()
    sampler.join()
    base, before, after_base = bench.bracketed_baseline(r["start"], r["end"], BASELINE_S,
                                                        AFTER_GAP_S, AFTER_MIN_S)
    mv = bench.window(r["start"], min(r["end"], bench.t_last_tx))
    after = bench.window(r["end"], min(r["end"] + 10, bench.t_last_tx))
    failed_total = bench.summary_number(
        r"^number of failed transactions: (\d+)", int)
    aborted = None
    m = re.search(r"^number of clients aborted: (\d+)", bench.stdout + bench.stderr,
                  re.MULTILINE)
    if m:
        aborted = int(m.group(1))
    out = {"method": method, "from": src, "to": target, "rel_bytes_before": size,
           "rel_bytes_after": rel_size(c), "default_rate_mb": rate,
           "move_seconds": r["end"] - r["start"],
           "move_start_s_into_run": r["start"] - bench.t0,
           "finished_before_pgbench_end": finished_in_load,
           "wal_bytes_during_move": wal_diff(c, lsn0, lsn1),
           "baseline": base, "baseline_before": before, "baseline_after": after_base,
           "during_move": mv, "after_move_10s": after,
           "tps_ratio": (mv["tps"] / base["tps"]) if base["tps"] and mv["tps"]
           is not None else None,
           "tps_ratio_before": (mv["tps"] / before["tps"]) if before["tps"] and mv["tps"]
           is not None else None,
           "max_latency_ms": mv["max_latency_ms"],
           "failed_in_window": mv["failed"],
           "pgbench_failed_total": failed_total,
           "pgbench_clients_aborted": aborted,
           "pgbench_rc": bench.rc,
           "pgbench_tps_total": bench.summary_number(r"^tps = ([\d.]+)"),
           "progress": bench.progress(), "ok": r["ok"],
           "samples": sampler.samples,
           "cpu_busy_pct_baseline": sampler.mean("cpu_busy_pct", WARMUP_S,
                                                 WARMUP_S + BASELINE_S),
           "cpu_busy_pct_move": sampler.mean(
               "cpu_busy_pct", r["start"] - bench.t0, r["end"] - bench.t0),
           "disk_write_mb_s_baseline": sampler.mean(
               "disk_write_mb_s", WARMUP_S, WARMUP_S + BASELINE_S),
           "disk_write_mb_s_move": sampler.mean(
               "disk_write_mb_s", r["start"] - bench.t0, r["end"] - bench.t0),
           "top_latencies_in_move": bench.top_latencies(r["start"], r["end"]),
           "tablespace_after": table_tablespace(c)}
    if bench.rc != 0:
        out["pgbench_stderr_tail"] = bench.stderr.splitlines()[-20:]
    for k in ("error", "jobrow", "job", "output"):
        if k in r:
            out[k] = r[k]
    if r["ok"] and out["tablespace_after"] != target:
        out["ok"] = False
        out["error"] = "table is in %s after the move, not %s" % (
            out["tablespace_after"], target)
    log("load %-9s baseline %.0f tps, during move %.0f tps (ratio %.2f), "
        "max latency %.1f ms, failed %s, pgbench rc %s%s"
        % (method, base["tps"] or 0, mv["tps"] or 0, out["tps_ratio"] or 0,
           mv["max_latency_ms"], failed_total, bench.rc,
           "" if out["ok"] else "  MOVE FAILED: %s" % out.get("error")))
    return out


# ---------------------------------------------------------------------------
# C. report

def build_report(res):
    A = {r["method"]: r for r in res["idle"]}
    B = {r["method"]: r for r in res["load"]}
    m = res["machine"]
    ta, tb = A.get("tsmove"), B.get("tsmove")
    checks = {}
    if ta and A.get("ALTER") and ta["ok"]:
        checks["idle_time_ratio"] = ta["seconds"] / A["ALTER"]["seconds"]
    if ta and ta.get("wal_per_copied") is not None:
        checks["idle_wal_ratio"] = ta["wal_per_copied"]
    if tb:
        checks["load_tps_ratio"] = tb["tps_ratio"]
        checks["load_max_latency_ms"] = tb["max_latency_ms"]
        checks["load_failed"] = (tb["pgbench_failed_total"] or 0) + \
            (tb["pgbench_clients_aborted"] or 0)
    passes = {
        "idle_time_ratio": lambda v: v <= TARGETS["idle_time_ratio"],
        "idle_wal_ratio": lambda v: v <= TARGETS["idle_wal_ratio"],
        "load_tps_ratio": lambda v: v >= TARGETS["load_tps_ratio"],
        "load_max_latency_ms": lambda v: v <= TARGETS["load_max_latency_ms"],
        "load_failed": lambda v: v == TARGETS["load_failed"],
    }
    res["targets"] = {k: {"value": checks.get(k), "target": TARGETS[k],
                          "pass": (passes[k](checks[k])
                                   if checks.get(k) is not None else None)}
                      for k in TARGETS}

    methods = ["ALTER", "tsmove", "pg_repack"]

    def row(label, fn, target="", key=None):
        cells = []
        for meth in methods:
            try:
                cells.append(fn(meth))
            except (KeyError, TypeError, ZeroDivisionError):
                cells.append("n/a")
        v = verdict(res["targets"][key]["pass"]) if key else ""
        return "| %s | %s | %s | %s |" % (label, " | ".join(cells), target, v)

    alter_s = A.get("ALTER", {}).get("seconds")
    lines = []
    lines.append("# pg_tsmove benchmark: %s, scale %d" % (TABLE, res["scale"]))
    lines.append("")
    lines.append("Run %s; %d cores (nproc), %.1f GiB RAM, %s; PostgreSQL %s; "
                 "shared_buffers %s, max_wal_size %s, checkpoint_timeout %s, "
                 "synchronous_commit %s, fsync %s, data checksums %s; "
                 "pg_tsmove.max_rate_mb (default rate) %s MB/s; "
                 "%s; pg_tsmove.so of %s, git HEAD %s."
                 % (res["started"], m["nproc"], m["mem_gib"], m["disk"],
                    m["pg_version"], m["shared_buffers"], m["max_wal_size"],
                    m["checkpoint_timeout"], m["synchronous_commit"],
                    m["fsync"], m["data_checksums"], m["tsmove_max_rate_mb"],
                    m["pg_repack"], m["tsmove_so_mtime"], m["git_head"]))
    lines.append("%s: %d blocks, %.1f MiB (%s the 600 MiB minimum); "
                 "ts_a and ts_b are directories on the same disk. "
                 "Load: pgbench -n -b tpcb-like -c 4 -j 2, -T %d per method, "
                 "warm-up %.0f s; baseline: the %.0f s before the move and the %.0f s from "
                 "%.0f s after it."
                 % (TABLE, res["rel_bytes"] // BLOCK, res["rel_bytes"] / 2**20,
                    "meets" if res["rel_bytes"] >= MIN_REL_BYTES else
                    "BELOW", res["load_seconds"], WARMUP_S, BASELINE_S, BASELINE_S,
                    AFTER_GAP_S))
    lines.append("")
    lines.append("| | ALTER TABLE | tsmove | pg_repack | tsmove target | tsmove |")
    lines.append("|---|---|---|---|---|---|")
    lines.append("| **A. idle, unthrottled** | | | | | |")
    lines.append(row("move (from -> to)",
                     lambda k: "%s -> %s" % (A[k]["from"], A[k]["to"])))
    lines.append(row("wall time, s", lambda k: fmt(A[k]["seconds"])))
    lines.append(row("time / ALTER time",
                     lambda k: fmt(A[k]["seconds"] / alter_s),
                     "<= %.2f" % TARGETS["idle_time_ratio"], "idle_time_ratio"))
    lines.append(row("WAL, MB", lambda k: fmt(A[k]["wal_bytes"] / 1e6, "%.1f")))
    lines.append(row("WAL / relation size",
                     lambda k: fmt(A[k]["wal_per_rel"], "%.3f")))
    lines.append(row("WAL / ((blocks_total + recopied) x 8 kB)",
                     lambda k: fmt(A[k]["wal_per_copied"], "%.3f")
                     if k == "tsmove" else "-",
                     "<= %.2f" % TARGETS["idle_wal_ratio"], "idle_wal_ratio"))
    lines.append(row("blocks_total / blocks_recopied",
                     lambda k: "%d / %d" % (A[k]["jobrow"]["blocks_total"],
                                            A[k]["jobrow"]["blocks_recopied"])
                     if k == "tsmove" else "-"))
    lines.append(row("switch_ms", lambda k: fmt(A[k]["jobrow"]["switch_ms"], "%.1f")
                     if k == "tsmove" else "-"))
    lines.append(row("integrity (balance, amcheck, orphans)",
                     lambda k: "OK" if A[k]["integrity"]["ok"] else "**FAIL**"))
    lines.append("| **B. under TPC-B load** | | | | | |")
    lines.append(row("move (from -> to)",
                     lambda k: "%s -> %s" % (B[k]["from"], B[k]["to"])))
    lines.append(row("rate", lambda k: ("default %s MB/s" % B[k]["default_rate_mb"])
                     if k == "tsmove" else "unthrottled"))
    lines.append(row("move duration, s", lambda k: fmt(B[k]["move_seconds"], "%.1f")))
    lines.append(row("ended before pgbench did",
                     lambda k: fmt(B[k]["finished_before_pgbench_end"])))
    lines.append(row("baseline TPS: before / after the move",
                     lambda k: "%s / %s" % (fmt(B[k]["baseline_before"]["tps"], "%.0f"),
                                            fmt(B[k]["baseline_after"]["tps"], "%.0f")
                                            if B[k]["baseline_after"] else "-")))
    lines.append(row("TPS during move", lambda k: fmt(B[k]["during_move"]["tps"], "%.0f")))
    lines.append(row("TPS ratio (move / baseline before and after)",
                     lambda k: fmt(B[k]["tps_ratio"]),
                     ">= %.2f" % TARGETS["load_tps_ratio"], "load_tps_ratio"))
    lines.append(row("TPS ratio to the baseline before only",
                     lambda k: fmt(B[k]["tps_ratio_before"])))
    lines.append(row("max latency in move window, ms",
                     lambda k: fmt(B[k]["max_latency_ms"], "%.1f"),
                     "<= %.0f" % TARGETS["load_max_latency_ms"],
                     "load_max_latency_ms"))
    lines.append(row("baseline max latency, ms",
                     lambda k: fmt(B[k]["baseline"]["max_latency_ms"], "%.1f")))
    lines.append(row("failed tx (+ aborted clients), whole run",
                     lambda k: "%s (+%s)" % (B[k]["pgbench_failed_total"],
                                             B[k]["pgbench_clients_aborted"] or 0),
                     "= 0", "load_failed"))
    lines.append(row("CPU busy %, baseline / move (2 cores)",
                     lambda k: "%s / %s" % (fmt(B[k]["cpu_busy_pct_baseline"], "%.0f"),
                                            fmt(B[k]["cpu_busy_pct_move"], "%.0f"))))
    lines.append(row("disk writes MB/s, baseline / move",
                     lambda k: "%s / %s" % (fmt(B[k]["disk_write_mb_s_baseline"], "%.0f"),
                                            fmt(B[k]["disk_write_mb_s_move"], "%.0f"))))
    lines.append(row("WAL during move, MB",
                     lambda k: fmt(B[k]["wal_bytes_during_move"] / 1e6, "%.1f")))
    lines.append(row("switch_ms / lock_wait_ms",
                     lambda k: "%s / %s" % (fmt(B[k]["jobrow"]["switch_ms"], "%.1f"),
                                            fmt(B[k]["jobrow"]["lock_wait_ms"], "%.1f"))
                     if k == "tsmove" else "-"))
    lines.append(row("switch_attempts / blocks_recopied",
                     lambda k: "%d / %d" % (B[k]["jobrow"]["switch_attempts"],
                                            B[k]["jobrow"]["blocks_recopied"])
                     if k == "tsmove" else "-"))
    lines.append(row("integrity (balance, amcheck, orphans)",
                     lambda k: "OK" if B[k]["integrity"]["ok"] else "**FAIL**"))
    lines.append("")
    notes = []
    for phase, rows in (("A", res["idle"]), ("B", res["load"])):
        for r in rows:
            if not r["ok"]:
                notes.append("%s %s: move FAILED: %s" % (phase, r["method"],
                                                         r.get("error")))
            if not r.get("integrity", {}).get("ok", True):
                notes.append("%s %s: integrity problems: %s"
                             % (phase, r["method"], r["integrity"]["problems"]))
            if phase == "B" and not r["finished_before_pgbench_end"]:
                notes.append("B %s: the move ended after pgbench's %d s run; "
                             "its window is cut at pgbench's end"
                             % (r["method"], res["load_seconds"]))
            if phase == "B" and r["pgbench_rc"] != 0:
                notes.append("B %s: pgbench exited %s" % (r["method"],
                                                           r["pgbench_rc"]))
    if res.get("server_log_problems"):
        notes.append("server log: %d WARNING/ERROR/FATAL/PANIC lines (see JSON "
                     "server_log_problems)" % len(res["server_log_problems"]))
    if res.get("checkpoints_logged") is not None:
        notes.append("checkpoints in the server log (incl. the explicit ones): %d"
                     % res["checkpoints_logged"])
    for n in notes:
        lines.append("- " + n)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------

def machine_facts(c):
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 2**20
    disk = "?"
    try:
        dev = subprocess.run(["df", "--output=source", c.data_dir],
                             capture_output=True, text=True).stdout.split()[-1]
        disk = "data and both tablespaces on %s" % dev
    except Exception:
        pass
    repack = subprocess.run(["pg_repack", "--version"], capture_output=True,
                            text=True).stdout.strip()

    def show(name):
        return c.sql_scalar("SHOW %s" % name)
    return {
        "nproc": os.cpu_count(),
        "mem_gib": mem,
        "kernel": platform.release(),
        "disk": disk,
        "pg_version": show("server_version"),
        "pg_version_full": c.sql_scalar("SELECT version()"),
        "shared_buffers": show("shared_buffers"),
        "max_wal_size": show("max_wal_size"),
        "checkpoint_timeout": show("checkpoint_timeout"),
        "synchronous_commit": show("synchronous_commit"),
        "fsync": show("fsync"),
        "full_page_writes": show("full_page_writes"),
        "wal_level": show("wal_level"),
        "data_checksums": show("data_checksums"),
        "tsmove_max_rate_mb": show("pg_tsmove.max_rate_mb"),
        "tsmove_switch_lock_timeout": show("pg_tsmove.switch_lock_timeout"),
        "tsmove_switch_backlog_blocks": show("pg_tsmove.switch_backlog_blocks"),
        "tsmove_yield_to_ddl": c.sql_scalar(
            "SELECT current_setting('pg_tsmove.yield_to_ddl', true)"),
        "pg_repack": repack,
        "tsmove_so_mtime": so_mtime(),
        "git_head": git_head(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=50)
    ap.add_argument("--load-seconds", type=int, default=100,
                    help="pgbench -T for each method under load (default 100)")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "bench_results",
                                                  "latest.json"))
    ap.add_argument("--keep", action="store_true",
                    help="keep the cluster (printed) instead of destroying it")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (servers run as postgres through runuser)")
    if args.load_seconds < WARMUP_S + BASELINE_S + 10:
        sys.exit("--load-seconds must be at least %d" % (WARMUP_S + BASELINE_S + 10))
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    md_path = os.path.join(out_dir, "latest.md")
    log_path = os.path.join(out_dir, "latest_server.log")

    base = tempfile.mkdtemp(prefix="pgtsm_bench_", dir="/tmp")
    os.chmod(base, 0o755)
    chown_to_server_user(base)
    c = Cluster(base, "bench")
    res = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
           "scale": args.scale, "load_seconds": args.load_seconds,
           "server_conf": SERVER_CONF, "idle": [], "load": []}
    t_start = time.monotonic()
    rc = 0
    try:
        c.init(extra_conf=SERVER_CONF).start()
        c.create_tablespace("ts_a")
        c.create_tablespace("ts_b")
        for ext in ("pg_tsmove", "pg_repack", "amcheck"):
            c.sql("CREATE EXTENSION %s" % ext)
        log("cluster %s up; pgbench -i -s %d --tablespace=ts_a"
            % (c.root_dir, args.scale))
        t = time.monotonic()
        c.pgbench_init(args.scale, extra_args=["--tablespace=ts_a"])
        log("loaded in %.0f s" % (time.monotonic() - t))
        res["machine"] = machine_facts(c)
        size = rel_size(c)
        res["rel_bytes"] = size
        res["indexes"] = index_tablespaces(c)
        log("%s: %d bytes = %.1f MiB, %s; indexes %s"
            % (TABLE, size, size / 2**20,
               "OK, >= 600 MiB" if size >= MIN_REL_BYTES
               else "BELOW the 600 MiB minimum", res["indexes"]))
        if size < MIN_REL_BYTES:
            log("WARNING: relation smaller than 600 MiB: raise --scale for "
                "meaningful numbers")
        assert table_tablespace(c) == "ts_a"

        # A. idle, unthrottled
        for method in ("ALTER", "tsmove", "pg_repack"):
            r = idle_move(c, method, other_ts(table_tablespace(c)))
            r["integrity"] = integrity(c, "idle " + method)
            res["idle"].append(r)
            if not r["integrity"]["ok"] or not r["ok"]:
                rc = 1

        # B. under load
        for method in ("tsmove", "ALTER", "pg_repack"):
            r = loaded_move(c, method, other_ts(table_tablespace(c)),
                            args.load_seconds, base)
            r["integrity"] = integrity(c, "load " + method)
            res["load"].append(r)
            if not r["integrity"]["ok"] or not r["ok"]:
                rc = 1
        res["indexes_after"] = index_tablespaces(c)
        if res["indexes_after"] != res["indexes"]:
            log("NOTE: index tablespaces changed: %s -> %s"
                % (res["indexes"], res["indexes_after"]))
    except Exception as e:
        rc = 2
        res["exception"] = "%s: %s" % (type(e).__name__, e)
        log("ABORTED: %s" % res["exception"])
        import traceback
        traceback.print_exc()
    finally:
        res["elapsed_s"] = time.monotonic() - t_start
        try:
            logtext = c.log_contents()
            with open(log_path, "w") as f:
                f.write(logtext)
            res["server_log_problems"] = server_log_problems(c)
            res["checkpoints_logged"] = len(re.findall(r"checkpoint complete",
                                                       logtext))
            res["tsmove_log_lines"] = [l for l in logtext.splitlines()
                                       if "tsmove" in l][-200:]
        except Exception as e:
            res["server_log_problems"] = ["could not read log: %s" % e]
        if args.keep:
            log("cluster kept: %s (port %d)" % (c.root_dir, c.port))
        else:
            try:
                c.destroy()
            except Exception as e:
                log("destroy failed: %s" % e)
            shutil.rmtree(base, ignore_errors=True)

    report = None
    if "machine" in res and "rel_bytes" in res:
        try:
            report = build_report(res)
        except Exception as e:
            log("report failed: %s" % e)
            import traceback
            traceback.print_exc()
            rc = rc or 2
    res["exit_status"] = rc
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    if report:
        with open(md_path, "w") as f:
            f.write(report)
        print()
        print(report)
    log("results: %s, %s, server log %s; %.0f s in all; exit %d"
        % (args.out, md_path if report else "(no markdown)", log_path,
           res["elapsed_s"], rc))
    return rc


if __name__ == "__main__":
    sys.exit(main())
