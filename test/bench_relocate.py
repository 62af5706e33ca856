#!/usr/bin/env python3
"""Benchmark: relocating a tablespace online, against the other ways.

Run as root from the repository (the extension must be installed):

    python3 test/bench_relocate.py [--scale 50] [--load-seconds 80]
                                   [--out test/bench_results/relocate_latest.json]

Not a pytest module: it takes several minutes and measures rather than
asserts.  One throwaway cluster (test/pgcluster.py, the server settings of
bench_move.py), pgbench at scale 50 with every table and index in
tablespace ts_a (pgbench_accounts ~640 MiB, ~750 MiB in all), and four
ways to put those files on another directory, one after the other, each
under TPC-B (pgbench -c 4 -j 2, a 10 s warm-up and a 15 s baseline window
before the method starts, another from 3 s after it ends) except the
offline one:

    relocate  SELECT tsmove.relocate_tablespace('ts_a', <new dir>) at the
              default rate (pg_tsmove.max_rate_mb); CALL tsmove.wait_for()
    floor     the same bytes (the files of ts_a) copied by a plain process
              at the relocation's average rate, with writeback and fsync as
              pg_tsmove's sink does (benchlib.PacedCopier): what writing
              them costs on this disk, whoever writes them
    ALTER     ALTER TABLE ALL IN TABLESPACE ts_a SET TABLESPACE ts_b, then
              ALTER INDEX ALL IN TABLESPACE ts_a SET TABLESPACE ts_b
    offline   the procedure PostgreSQL's developers publish: stop the
              server (fast), copy the tablespace's directory, repoint
              pg_tblspc/<oid>, start; its downtime is the figure

Per method: bytes moved, duration, average rate, baseline TPS and TPS
during the move (from pgbench's per-transaction log), the largest latency
of the transactions that overlapped the move, failed transactions, the WAL
the job wrote itself (relocate) and the whole cluster's WAL during the
move, the locks' hold time (switch_ms).  After each: balance invariant,
amcheck, orphan files, and the tablespace's location.

Targets (relocate, default settings): TPS during >= 90 % of baseline, and
within 3 points of the floor's ratio; worst latency <= 100 ms; the job's
WAL <= 2 % of the bytes moved.

Writes a markdown table to relocate_latest.md next to --out, the data as
JSON to --out.  Exit status 1 if the relocation, the floor or the offline
copy failed or an integrity check found something; missed targets, and
ALTER failing (it can deadlock with pgbench), are reported, not fatal.
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_move import (AFTER_GAP_S, AFTER_MIN_S, BASELINE_S, SERVER_CONF,  # noqa: E402
                        WARMUP_S, machine_facts)
from benchlib import (PacedCopier, Pgbench, Sampler, fmt, log,  # noqa: E402
                      server_log_problems, verdict, wal_diff, wal_lsn)
from moves import wait_job_without_snapshot  # noqa: E402
from pgcluster import Cluster, chown_to_server_user, make_server_dir  # noqa: E402

TARGETS = {"tps_ratio": 0.90, "floor_points": 3.0, "max_latency_ms": 100.0,
           "wal_fraction": 0.02}


def location(c, spc):
    return c.sql_scalar("SELECT pg_tablespace_location(oid) FROM pg_tablespace "
                        "WHERE spcname = %s", (spc,))


def tablespace_files(c, spc):
    """Every file of the tablespace (all databases), and their size."""
    root = location(c, spc)
    files = []
    for dirpath, _, names in os.walk(root):
        files += [os.path.join(dirpath, n) for n in names]
    return files, sum(os.path.getsize(f) for f in files)


def integrity(c):
    problems = c.balance_invariant() + c.amcheck() + c.orphan_files()
    return {"ok": not problems, "problems": problems[:20]}


def run_relocate(c, spc, dest):
    t0 = time.time()
    job = c.sql_scalar("SELECT tsmove.relocate_tablespace(%s, %s)", (spc, dest))
    state = wait_job_without_snapshot(c, job)
    t1 = time.time()
    row = dict(zip(("bytes_written", "wal_bytes", "switch_ms", "lock_wait_ms",
                    "switch_attempts", "blocks_recopied", "blocks_under_lock", "error"),
                   c.sql("SELECT bytes_written, wal_bytes, switch_ms, lock_wait_ms, "
                         "switch_attempts, blocks_recopied, blocks_under_lock, error "
                         "FROM tsmove.jobs WHERE job_id = %s", (job,))[0]))
    return {"start": t0, "end": t1, "ok": state == "done", "state": state, "job": row}


def run_alter(c, spc, target):
    t0 = time.time()
    c.sql("ALTER TABLE ALL IN TABLESPACE %s SET TABLESPACE %s" % (spc, target))
    c.sql("ALTER INDEX ALL IN TABLESPACE %s SET TABLESPACE %s" % (spc, target))
    return {"start": t0, "end": time.time(), "ok": True}


def under_load(c, name, seconds, workdir, action):
    """pgbench for seconds; action() starts after warm-up and baseline."""
    c.sql("VACUUM pgbench_branches")
    c.sql("VACUUM pgbench_tellers")
    c.sql("CHECKPOINT")
    bench = Pgbench(c, seconds, workdir)
    sampler = Sampler(c, bench.t0)
    sampler.start()
    time.sleep(max(0.0, bench.t0 + WARMUP_S + BASELINE_S - time.time()))
    log("%-8s starts %.1f s into the pgbench run" % (name, time.time() - bench.t0))
    lsn0 = wal_lsn(c)
    try:
        r = action()
    except Exception as e:
        r = {"start": bench.t0 + WARMUP_S + BASELINE_S, "end": time.time(), "ok": False,
             "error": "%s: %s" % (type(e).__name__, e)}
    lsn1 = wal_lsn(c)
    bench.wait()
    sampler.stop.set()
    sampler.join()
    base, before, after = bench.bracketed_baseline(r["start"], r["end"], BASELINE_S,
                                                   AFTER_GAP_S, AFTER_MIN_S)
    during = bench.window(r["start"], min(r["end"], bench.t_last_tx))
    r.update({
        "seconds": r["end"] - r["start"],
        "ended_before_pgbench": r["end"] <= bench.t_last_tx,
        "baseline": base, "baseline_before": before, "baseline_after": after,
        "during": during,
        "tps_ratio": during["tps"] / base["tps"] if base["tps"] and during["tps"] else None,
        "tps_ratio_before": (during["tps"] / before["tps"]
                             if before["tps"] and during["tps"] else None),
        "max_latency_ms": during["max_latency_ms"],
        "failed": bench.summary_number(r"^number of failed transactions: (\d+)", int),
        "cluster_wal_bytes": wal_diff(c, lsn0, lsn1),
        "cpu_busy_pct": sampler.mean("cpu_busy_pct", r["start"] - bench.t0, r["end"] - bench.t0),
        "disk_write_mb_s": sampler.mean("disk_write_mb_s", r["start"] - bench.t0,
                                        r["end"] - bench.t0),
        "top_latencies": bench.top_latencies(r["start"], r["end"]),
    })
    log("%-8s %.1f s; baseline %.0f tps, during %.0f tps (ratio %s), max latency %.1f ms, "
        "failed %s%s" % (name, r["seconds"], base["tps"] or 0, during["tps"] or 0,
                         fmt(r["tps_ratio"]), r["max_latency_ms"], r["failed"],
                         "" if r["ok"] else "  FAILED: %s" % r.get("error", r.get("state"))))
    return r


def run_offline(c, spc, dest):
    """Stop, copy, repoint the link, start: the downtime is the time between
    the stop being asked for and the server accepting connections again."""
    old = location(c, spc)
    oid = c.sql_scalar("SELECT oid FROM pg_tablespace WHERE spcname = %s", (spc,))
    t0 = time.time()
    c.stop("fast")
    t_stopped = time.time()
    subprocess.run(["cp", "-a", old + "/.", dest], check=True)
    subprocess.run(["sync", "-f", dest], check=True)
    link = os.path.join(c.data_dir, "pg_tblspc", str(oid))
    os.unlink(link)
    os.symlink(dest, link)
    os.lchown(link, *_postgres_ids())
    t_copied = time.time()
    c.start()
    t_up = time.time()
    shutil.rmtree(os.path.join(old, os.listdir(old)[0]), ignore_errors=True)
    return {"start": t0, "end": t_up, "ok": location(c, spc) == dest,
            "downtime_s": t_up - t0, "stop_s": t_stopped - t0,
            "copy_s": t_copied - t_stopped, "start_s": t_up - t_copied}


def _postgres_ids():
    import pwd
    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


def build_report(res):
    R, F, A, O = (res["methods"].get(k, {}) for k in ("relocate", "floor", "ALTER", "offline"))
    moved = res["tablespace_bytes"]
    job = R.get("job", {})
    wal_fraction = job["wal_bytes"] / moved if job.get("wal_bytes") is not None else None
    floor_points = ((F["tps_ratio"] - R["tps_ratio"]) * 100
                    if R.get("tps_ratio") and F.get("tps_ratio") else None)
    rate = lambda r: moved / 2**20 / r["seconds"] if r.get("seconds") else None  # noqa: E731
    m = res["machine"]
    lines = [
        "Run %s; %d cores (nproc), %.1f GiB RAM, %s; PostgreSQL %s; shared_buffers %s, "
        "max_wal_size %s, synchronous_commit %s; pg_tsmove.max_rate_mb (default rate) %s MB/s; "
        "git HEAD %s.%s" % (res["started"], m["nproc"], m["mem_gib"], m["disk"], m["pg_version"],
                            m["shared_buffers"], m["max_wal_size"], m["synchronous_commit"],
                            m["tsmove_max_rate_mb"], m["git_head"],
                            " The machine was shared with other work during the run: "
                            "figures are noisy." if res.get("shared_machine") else ""),
        "Tablespace ts_a: pgbench scale %d, every table and index, %.1f MiB in %d files. "
        "Load: pgbench -n -b tpcb-like -c 4 -j 2, -T %d per method, warm-up %d s; baseline: "
        "the %d s before the method and the %d s from %d s after it."
        % (res["scale"], moved / 2**20, res["tablespace_files"], res["load_seconds"],
           WARMUP_S, BASELINE_S, BASELINE_S, AFTER_GAP_S),
        "",
        "| | relocate_tablespace | floor: plain copy | ALTER ... ALL IN TABLESPACE | offline (stop, copy, relink, start) | target (relocate) | |",
        "|---|---|---|---|---|---|---|",
        "| duration, s | %s | %s | %s | %s | | |" % (fmt(R.get("seconds"), "%.1f"), fmt(F.get("seconds"), "%.1f"),
                                                fmt(A.get("seconds"), "%.1f"), fmt(O.get("downtime_s"), "%.1f")),
        "| average rate, MiB/s | %s | %s | %s | %s | | |" % (fmt(rate(R), "%.1f"), fmt(rate(F), "%.1f"),
                                                         fmt(rate(A), "%.1f"), fmt(rate(O), "%.1f")),
        "| baseline TPS, before / after | %s | %s | %s | - | | |" % tuple(
            "%s / %s" % (fmt((r.get("baseline_before") or {}).get("tps"), "%.0f"),
                         fmt((r.get("baseline_after") or {}).get("tps"), "%.0f")) for r in (R, F, A)),
        "| TPS during | %s | %s | %s | 0 (server down) | | |" % tuple(
            fmt((r.get("during") or {}).get("tps"), "%.0f") for r in (R, F, A)),
        "| TPS ratio (during / baseline before and after) | %s | %s | %s | 0 | >= %.2f | %s |" % (
            fmt(R.get("tps_ratio")), fmt(F.get("tps_ratio")), fmt(A.get("tps_ratio")),
            TARGETS["tps_ratio"], verdict(R.get("tps_ratio") >= TARGETS["tps_ratio"]
                                          if R.get("tps_ratio") else None)),
        "| TPS ratio to the baseline before only | %s | %s | %s | 0 | | |" % tuple(
            fmt(r.get("tps_ratio_before")) for r in (R, F, A)),
        "| floor's ratio - relocation's, points | %s | | | | <= %.0f | %s |" % (
            fmt(floor_points, "%.1f"), TARGETS["floor_points"],
            verdict(floor_points <= TARGETS["floor_points"] if floor_points is not None else None)),
        "| max latency during, ms | %s | %s | %s | %s | <= %.0f | %s |" % (
            fmt(R.get("max_latency_ms"), "%.1f"), fmt(F.get("max_latency_ms"), "%.1f"),
            fmt(A.get("max_latency_ms"), "%.1f"), fmt(O.get("downtime_s") and O["downtime_s"] * 1000, "%.0f"),
            TARGETS["max_latency_ms"], verdict(R["max_latency_ms"] <= TARGETS["max_latency_ms"]
                                               if R.get("max_latency_ms") is not None else None)),
        "| failed transactions | %s | %s | %s | (pgbench stopped) | 0 | %s |" % (
            R.get("failed"), F.get("failed"), A.get("failed"), verdict(R.get("failed") == 0)),
        "| the job's own WAL / bytes moved | %s | - | - | - | <= %.0f %% | %s |" % (
            fmt(wal_fraction and wal_fraction * 100, "%.3f %%"), TARGETS["wal_fraction"] * 100,
            verdict(wal_fraction <= TARGETS["wal_fraction"] if wal_fraction is not None else None)),
        "| cluster WAL during the move, MiB | %s | %s | %s | - | | |" % tuple(
            fmt(r.get("cluster_wal_bytes") and r["cluster_wal_bytes"] / 2**20, "%.1f") for r in (R, F, A)),
        "| locks held (switch_ms) / waited, ms | %s / %s | - | whole copy | whole copy | | |" % (
            fmt(job.get("switch_ms"), "%.1f"), fmt(job.get("lock_wait_ms"), "%.1f")),
        "| blocks re-copied / under the lock | %s / %s | - | - | - | | |" % (
            job.get("blocks_recopied"), job.get("blocks_under_lock")),
        "| CPU busy %% during / disk writes MB/s during | %s / %s | %s / %s | %s / %s | - | | |" % (
            fmt(R.get("cpu_busy_pct"), "%.0f"), fmt(R.get("disk_write_mb_s"), "%.0f"),
            fmt(F.get("cpu_busy_pct"), "%.0f"), fmt(F.get("disk_write_mb_s"), "%.0f"),
            fmt(A.get("cpu_busy_pct"), "%.0f"), fmt(A.get("disk_write_mb_s"), "%.0f")),
        "| the method itself | %s | %s | %s | %s | | |" % tuple(
            ("ok" if r.get("ok") else "**failed**: %s" % (r.get("error") or r.get("state"))
             .splitlines()[0]) if r else "n/a" for r in (R, F, A, O)),
        "| integrity (balance, amcheck, orphans) | %s | %s | %s | %s | | |" % tuple(
            ("OK" if (r.get("integrity") or {}).get("ok") else "PROBLEMS") if r else "n/a"
            for r in (R, F, A, O)),
    ]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=50)
    ap.add_argument("--load-seconds", type=int, default=80)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "bench_results", "relocate_latest.json"))
    ap.add_argument("--shared-machine", action="store_true",
                    help="say in the report that other work ran on the machine")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (servers run as postgres through runuser)")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="pgtsm_reloc_", dir="/tmp")
    os.chmod(base, 0o755)
    chown_to_server_user(base)
    c = Cluster(base, "bench")
    res = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
           "scale": args.scale, "load_seconds": args.load_seconds,
           "server_conf": SERVER_CONF, "methods": {},
           "shared_machine": args.shared_machine}
    rc = 0
    t_start = time.monotonic()
    try:
        c.init(extra_conf=SERVER_CONF).start()
        c.create_tablespace("ts_a")
        c.create_tablespace("ts_b")
        c.sql("CREATE EXTENSION pg_tsmove")
        c.sql("CREATE EXTENSION amcheck")
        log("pgbench -i -s %d in ts_a" % args.scale)
        c.pgbench_init(args.scale, extra_args=["--tablespace=ts_a", "--index-tablespace=ts_a"])
        c.sql("VACUUM ANALYZE")
        c.sql("CHECKPOINT")
        res["machine"] = machine_facts(c)
        files, size = tablespace_files(c, "ts_a")
        res["tablespace_bytes"], res["tablespace_files"] = size, len(files)
        log("ts_a: %.1f MiB in %d files" % (size / 2**20, len(files)))

        dest = make_server_dir(os.path.join(base, "relocated"))
        r = under_load(c, "relocate", args.load_seconds, base,
                       lambda: run_relocate(c, "ts_a", dest))
        res["methods"]["relocate"] = r
        r["integrity"] = integrity(c)
        r["location_after"] = location(c, "ts_a")
        r["old_location_empty"] = os.listdir(c.tablespaces["ts_a"]) == []
        if not (r["ok"] and r["integrity"]["ok"] and r["old_location_empty"]):
            rc = 1

        floor_rate = size / 2**20 / r["seconds"]
        files, _ = tablespace_files(c, "ts_a")
        scratch = os.path.join(base, "floor_copy")

        def floor():
            copier = PacedCopier(files, scratch, floor_rate)
            t0 = time.time()
            copier.start()
            copier.join()
            return {"start": t0, "end": time.time(), "ok": copier.bytes > 0,
                    "bytes": copier.bytes, "rate_asked_mb_s": floor_rate,
                    "rate_mb_s": copier.rate_mb_s}
        r = under_load(c, "floor", args.load_seconds, base, floor)
        r["integrity"] = integrity(c)
        res["methods"]["floor"] = r

        r = under_load(c, "ALTER", args.load_seconds, base, lambda: run_alter(c, "ts_a", "ts_b"))
        r["integrity"] = integrity(c)
        res["methods"]["ALTER"] = r
        # ALTER ... ALL IN TABLESPACE can deadlock with pgbench: a result of
        # that method (the report says so), not a failure of the benchmark
        if not r["integrity"]["ok"]:
            rc = 1

        offline_dest = make_server_dir(os.path.join(base, "offline"))
        r = run_offline(c, "ts_b", offline_dest)
        r["seconds"] = r["copy_s"]
        r["integrity"] = integrity(c)
        res["methods"]["offline"] = r
        log("offline: down %.1f s (stop %.1f, copy %.1f, start %.1f)"
            % (r["downtime_s"], r["stop_s"], r["copy_s"], r["start_s"]))
        if not (r["ok"] and r["integrity"]["ok"]):
            rc = 1
    except Exception as e:
        rc = 2
        res["exception"] = "%s: %s" % (type(e).__name__, e)
        log("ABORTED: %s" % res["exception"])
        import traceback
        traceback.print_exc()
    finally:
        res["elapsed_s"] = time.monotonic() - t_start
        res["server_log_problems"] = server_log_problems(c)[:50]
        try:
            c.destroy()
        except Exception as e:
            log("destroy failed: %s" % e)
        shutil.rmtree(base, ignore_errors=True)

    res["exit_status"] = rc
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    if "relocate" in res["methods"] and "machine" in res:
        report = build_report(res)
        with open(os.path.join(out_dir, "relocate_latest.md"), "w") as f:
            f.write(report)
        print()
        print(report)
    log("%.0f s in all; exit %d" % (res["elapsed_s"], rc))
    return rc


if __name__ == "__main__":
    sys.exit(main())
