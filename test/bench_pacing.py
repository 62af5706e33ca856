#!/usr/bin/env python3
"""Benchmark of pacing (issue 9): what a move costs TPC-B with adaptive
pacing and with a fixed rate, read against floors and a control measured in
the same run.

Run as root from the repository (the extension must be installed):

    python3 test/bench_pacing.py [--scales 20,50] [--load-seconds 120]
                                 [--floor-reps 2] [--move-reps 1] [--keep]

Not a pytest module: it measures rather than asserts, for about half an
hour.  For each scale it starts a throwaway cluster (bench_move.py's
settings), loads pgbench (pgbench_accounts in ts_a) and runs, each under
pgbench -n -b tpcb-like -c 4 -j 2 -T load-seconds after a 10 s warm-up:

  floors (repeated --floor-reps times; no pg_tsmove involved):
    file 64 MB/s   a plain process copies pgbench_accounts' file into a
                   scratch directory next to ts_b at 64 MB/s, starting
                   writeback every 64 blocks and fsyncing every 64 MB;
    WAL 64 MB/s    a session adds 64 MB/s of WAL (pg_logical_emit_message,
                   1 MB records, non-transactional: written by others'
                   commits and the WAL writer, as a move's page images are);
    WAL 8 MB/s     the same at 8 MB/s;
    each for 30 s;
  then --move-reps times (each a fresh pgbench run, the table moving back
  and forth):
    fixed 64       a move at pg_tsmove.pacing = fixed, max_rate_mb 64 (the
                   old default);
    adaptive       a move at pg_tsmove.pacing = adaptive, no ceiling (the
                   default);
    nothing        the control: nothing runs, for as long as the adaptive
                   move before it took.  It reads what the measurement
                   itself says when there is nothing to find: on this VM a
                   quiet 15 s window of TPC-B reads 0.91-1.10 of the 15 s
                   before it.

Each figure is TPS in the window / baseline TPS, and the baseline brackets
the window: the 15 s before it and the 15 s starting 3 s after it, weighted
by their lengths, so that a drift of the load over the run does not read as
the move's cost (the ratio to the 15 s before alone is also kept, as tps_ratio_before).  When
less than 5 s of load is left after the window, the baseline is the 15 s
before only.  Worst latency is that of the transactions overlapping the
window, with the worst eight and their time relative to its end in the JSON;
also the move's duration and the pace it chose.  Single runs of the same
move vary by 10-20 points on a 2-core VM: the summary gives the median and
range of each.

And once, idle (no pgbench): adaptive against fixed unthrottled (rate 0),
wall time of each.

After every move: balance invariant, amcheck, orphan files.  Results go to
test/bench_results/pacing_latest.{md,json}.  Exit 1 if a move failed or an
integrity check did; targets missed are reported, not fatal.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_move import (AFTER_GAP_S, AFTER_MIN_S, BASELINE_S, SERVER_CONF,  # noqa: E402
                        TABLE, WARMUP_S, integrity, machine_facts, other_ts,
                        rel_size, run_tsmove, table_tablespace)
from benchlib import PacedCopier, Pgbench, Sampler, fmt, log, verdict  # noqa: E402
from pgcluster import Cluster, chown_to_server_user  # noqa: E402

DISTURB_S = 30.0
TARGET_TPS_RATIO = 0.90
TARGET_MAX_LATENCY_MS = 100.0
MB = 1024 * 1024


class WalWriter(threading.Thread):
    """Add rate MB/s of WAL from one session for seconds."""

    def __init__(self, c, rate, seconds):
        super().__init__(daemon=True)
        self.c, self.rate, self.seconds = c, rate, seconds
        self.bytes = 0

    def run(self):
        with self.c.conn() as conn:
            t0 = time.time()
            while time.time() - t0 < self.seconds:
                conn.execute("SELECT pg_logical_emit_message(false, 'bench', "
                             "repeat('w', 1048576))")
                self.bytes += MB
                due = t0 + self.bytes / (self.rate * MB)
                time.sleep(max(0.0, due - time.time()))


def relation_files(c):
    path = c.sql_scalar("SELECT pg_relation_filepath(%s)", (TABLE,))
    base = os.path.join(c.data_dir, path)
    files = [base]
    n = 1
    while os.path.exists("%s.%d" % (base, n)):
        files.append("%s.%d" % (base, n))
        n += 1
    return files


def under_load(c, load_seconds, workdir, action):
    """Run pgbench; after warm-up and the first baseline window, run action()
    (returns a dict with start, end); returns the windows."""
    c.sql("VACUUM pgbench_branches")
    c.sql("VACUUM pgbench_tellers")
    c.sql("CHECKPOINT")
    bench = Pgbench(c, load_seconds, workdir)
    sampler = Sampler(c, bench.t0)
    sampler.start()
    time.sleep(max(0.0, bench.t0 + WARMUP_S + BASELINE_S - time.time()))
    r = action()
    bench.wait()
    sampler.stop.set()
    sampler.join()
    base, before, after = bench.bracketed_baseline(r["start"], r["end"], BASELINE_S,
                                                   AFTER_GAP_S, AFTER_MIN_S)
    during = bench.window(r["start"], min(r["end"], bench.t_last_tx))
    r.update({"before": before, "after": after, "baseline": base, "during": during,
              "tps_ratio": during["tps"] / base["tps"] if base["tps"] else None,
              "tps_ratio_before": during["tps"] / before["tps"] if before["tps"] else None,
              "max_latency_ms": during["max_latency_ms"],
              # (latency ms, completion s relative to the end): where the worst fell
              "top_latencies": bench.top_latencies(r["start"], r["end"]),
              "finished_in_load": r["end"] <= bench.t_last_tx,
              "pgbench_rc": bench.rc,
              "failed": bench.summary_number(r"^number of failed transactions: (\d+)", int),
              "samples": sampler.samples})
    return r


def floor_load_seconds():
    """A floor's pgbench run: warm-up, baseline, disturbance, after-window."""
    return int(WARMUP_S + BASELINE_S + DISTURB_S + AFTER_GAP_S + BASELINE_S + 2)


def floor_run(c, kind, load_seconds, workdir):
    def action():
        t0 = time.time()
        if kind == "file 64 MB/s":
            dest = os.path.join(os.path.dirname(c.sql_scalar(
                "SELECT pg_tablespace_location(oid) FROM pg_tablespace "
                "WHERE spcname = 'ts_b'")), "floor_scratch")
            w = PacedCopier(relation_files(c), dest, 64, max_seconds=DISTURB_S,
                            fsync_every=64 * MB)
        else:
            w = WalWriter(c, 64 if "64" in kind else 8, DISTURB_S)
        w.start()
        w.join()
        return {"start": t0, "end": time.time(), "bytes": w.bytes}
    r = under_load(c, load_seconds, workdir, action)
    r["kind"] = kind
    r["rate_mb_s"] = r["bytes"] / MB / (r["end"] - r["start"])
    log("floor %-13s %.1f MB/s: TPS %.0f -> %.0f (ratio %.2f, to the before-window %.2f), "
        "max latency %.1f ms"
        % (kind, r["rate_mb_s"], r["baseline"]["tps"], r["during"]["tps"],
           r["tps_ratio"], r["tps_ratio_before"], r["max_latency_ms"]))
    return r


def set_pacing(c, pacing):
    c.sql("ALTER SYSTEM SET pg_tsmove.pacing = %s" % pacing)
    c.sql("SELECT pg_reload_conf()")
    time.sleep(0.3)


def move_run(c, label, load_seconds, workdir):
    pacing, rate = ("fixed", 64) if label == "fixed 64" else ("adaptive", None)
    set_pacing(c, pacing)
    target = other_ts(table_tablespace(c))

    def action():
        return run_tsmove(c, target, rate=rate, wait_timeout_s=load_seconds * 3)
    r = under_load(c, load_seconds, workdir, action)
    r["label"] = label
    r["seconds"] = r["end"] - r["start"]
    r["integrity"] = integrity(c, "load " + label)
    r["size"] = rel_size(c)
    rates = [s["job"][4] for s in r["samples"] if s.get("job")]
    r["mean_rate_mb_s"] = sum(rates) / len(rates) if rates else None
    r["paces"] = [s["job"][5] for s in r["samples"] if s.get("job")]
    log("move  %-13s %.1f s (%s): TPS %.0f -> %.0f (ratio %.2f, to the before-window %.2f), "
        "max latency %.1f ms, mean rate %s MB/s%s"
        % (label, r["seconds"], r.get("state"), r["baseline"]["tps"], r["during"]["tps"] or 0,
           r["tps_ratio"] or 0, r["tps_ratio_before"] or 0, r["max_latency_ms"],
           fmt(r["mean_rate_mb_s"], "%.1f"),
           "" if r["finished_in_load"] else " (ENDED AFTER pgbench)"))
    return r


def control_run(c, seconds, load_seconds, workdir):
    """Nothing runs for seconds: what the measurement reads with no cost to find."""
    def action():
        t0 = time.time()
        time.sleep(seconds)
        return {"start": t0, "end": time.time(), "ok": True}
    r = under_load(c, load_seconds, workdir, action)
    r["label"] = "nothing"
    r["seconds"] = r["end"] - r["start"]
    r["integrity"] = {"ok": True}
    r["size"] = None
    r["mean_rate_mb_s"] = None
    log("control (nothing) %.1f s: TPS %.0f -> %.0f (ratio %.2f, to the before-window %.2f), "
        "max latency %.1f ms"
        % (r["seconds"], r["baseline"]["tps"], r["during"]["tps"], r["tps_ratio"],
           r["tps_ratio_before"], r["max_latency_ms"]))
    return r


def idle_run(c, label):
    pacing, rate = ("fixed", 0) if label == "fixed unthrottled" else ("adaptive", None)
    set_pacing(c, pacing)
    c.sql("CHECKPOINT")
    r = run_tsmove(c, other_ts(table_tablespace(c)), rate=rate)
    r["label"] = label
    r["seconds"] = r["end"] - r["start"]
    r["integrity"] = integrity(c, "idle " + label)
    log("idle  %-17s %.2f s (%s)" % (label, r["seconds"], r.get("state")))
    return r


def report(res):
    lines = []
    m = res["machine"]
    lines.append("Run %s; %s cores, %.1f GiB RAM, %s; PostgreSQL %s; shared_buffers %s, "
                 "synchronous_commit %s; pg_tsmove.so of %s, git HEAD %s."
                 % (res["started"], m["nproc"], m["mem_gib"], m["disk"], m["pg_version"],
                    m["shared_buffers"], m["synchronous_commit"], m["tsmove_so_mtime"],
                    m["git_head"]))
    lines.append("Load: pgbench -n -b tpcb-like -c 4 -j 2 -T %d; warm-up %d s; floors disturb "
                 "for %d s; baseline: the %d s before the window and the %d s from %d s after "
                 "it; 'to before' uses the %d s before only; 'nothing' is the control (no move, "
                 "as long as the adaptive move before it)."
                 % (res["load_seconds"], WARMUP_S, DISTURB_S, BASELINE_S, BASELINE_S,
                    AFTER_GAP_S, BASELINE_S))
    lines.append("")
    lines.append("| scale | run | MB/s | TPS before | TPS during | TPS after | TPS ratio | "
                 "to before | target | max latency ms | target | duration s |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def after_tps(r):
        return fmt(r["after"]["tps"], "%.0f") if r.get("after") else "-"

    for sc in res["scales"]:
        for f in sc["floors"]:
            lines.append("| %d | floor: %s | %.1f | %.0f | %.0f | %s | %.2f | %.2f | | %.1f | | |"
                         % (sc["scale"], f["kind"], f["rate_mb_s"], f["before"]["tps"],
                            f["during"]["tps"], after_tps(f), f["tps_ratio"],
                            f["tps_ratio_before"], f["max_latency_ms"]))
        for mv in sc["moves"]:
            judged = mv["label"] == "adaptive"
            ok_tps = mv["tps_ratio"] is not None and mv["tps_ratio"] >= TARGET_TPS_RATIO
            ok_lat = mv["max_latency_ms"] <= TARGET_MAX_LATENCY_MS
            name = ("nothing (control)" if mv["label"] == "nothing" else
                    "tsmove %s (%s MiB)" % (mv["label"], fmt(mv["size"] / MB, "%.0f")))
            lines.append("| %d | %s | %s | %.0f | %s | %s | %s | %s | %s | %.1f | %s | %.1f%s |"
                         % (sc["scale"], name, fmt(mv["mean_rate_mb_s"], "%.1f"),
                            mv["before"]["tps"], fmt(mv["during"]["tps"], "%.0f"),
                            after_tps(mv), fmt(mv["tps_ratio"]), fmt(mv["tps_ratio_before"]),
                            verdict(ok_tps) if judged else "", mv["max_latency_ms"],
                            verdict(ok_lat) if judged else "",
                            mv["seconds"], "" if mv["ok"] else " FAILED"))
    lines.append("")
    lines.append("| scale | run | runs | TPS ratio median (min-max) | to before, median (min-max) "
                 "| target | max latency ms median (max) | duration s median (min-max) |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for sc in res["scales"]:
        for label in ("fixed 64", "adaptive", "nothing"):
            runs = [mv for mv in sc["moves"] if mv["label"] == label and mv["tps_ratio"] is not None]
            if not runs:
                continue
            ratios = [mv["tps_ratio"] for mv in runs]
            before = [mv["tps_ratio_before"] for mv in runs]
            lat = [mv["max_latency_ms"] for mv in runs]
            secs = [mv["seconds"] for mv in runs]
            lines.append("| %d | %s | %d | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %s | %.0f (%.0f) "
                         "| %.1f (%.1f-%.1f) |"
                         % (sc["scale"], "nothing (control)" if label == "nothing"
                            else "tsmove " + label, len(runs),
                            statistics.median(ratios), min(ratios), max(ratios),
                            statistics.median(before), min(before), max(before),
                            "" if label != "adaptive"
                            else verdict(statistics.median(ratios) >= TARGET_TPS_RATIO),
                            statistics.median(lat), max(lat), statistics.median(secs),
                            min(secs), max(secs)))
    lines.append("")
    lines.append("| idle (scale %d) | duration s | state |" % res["idle_scale"])
    lines.append("|---|---|---|")
    for r in res["idle"]:
        lines.append("| tsmove %s | %.2f | %s |" % (r["label"], r["seconds"], r.get("state")))
    return "\n".join(lines) + "\n"


def run_scale(args, scale, base, res, rc):
    c = Cluster(base, "s%d" % scale)
    sc = {"scale": scale, "floors": [], "moves": []}
    res["scales"].append(sc)
    try:
        c.init(extra_conf=SERVER_CONF).start()
        c.create_tablespace("ts_a")
        c.create_tablespace("ts_b")
        for ext in ("pg_tsmove", "amcheck"):
            c.sql("CREATE EXTENSION %s" % ext)
        log("scale %d: pgbench -i" % scale)
        c.pgbench_init(scale, extra_args=["--tablespace=ts_a"])
        res.setdefault("machine", machine_facts(c))
        for rep in range(args.floor_reps):
            for kind in ("file 64 MB/s", "WAL 64 MB/s", "WAL 8 MB/s"):
                sc["floors"].append(floor_run(c, kind, floor_load_seconds(), base))
        for rep in range(args.move_reps):
            for label in ("fixed 64", "adaptive"):
                r = move_run(c, label, args.load_seconds, base)
                sc["moves"].append(r)
                if not r["ok"] or not r["integrity"]["ok"]:
                    rc = 1
            sc["moves"].append(control_run(c, r["seconds"], args.load_seconds, base))
        if scale == max(args.scales):
            res["idle_scale"] = scale
            for label in ("fixed unthrottled", "adaptive"):
                r = idle_run(c, label)
                res["idle"].append(r)
                if not r["ok"] or not r["integrity"]["ok"]:
                    rc = 1
    finally:
        if args.keep:
            log("cluster kept: %s" % c.root_dir)
        else:
            c.destroy()
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", default="20,50")
    ap.add_argument("--load-seconds", type=int, default=120)
    ap.add_argument("--floor-reps", type=int, default=2)
    ap.add_argument("--move-reps", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "bench_results", "pacing_latest.json"))
    args = ap.parse_args()
    args.scales = [int(s) for s in args.scales.split(",")]
    if os.geteuid() != 0:
        sys.exit("run as root (servers run as postgres through runuser)")
    base = tempfile.mkdtemp(prefix="pgtsm_pace_", dir="/tmp")
    os.chmod(base, 0o755)
    chown_to_server_user(base)
    res = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
           "load_seconds": args.load_seconds, "move_reps": args.move_reps,
           "scales": [], "idle": []}
    rc = 0
    t0 = time.monotonic()
    try:
        for scale in args.scales:
            rc = run_scale(args, scale, base, res, rc)
    except Exception as e:
        rc = 2
        res["exception"] = "%s: %s" % (type(e).__name__, e)
        log("ABORTED: %s" % res["exception"])
        import traceback
        traceback.print_exc()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    res["elapsed_s"] = time.monotonic() - t0
    res["exit_status"] = rc
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    if "machine" in res:
        text = report(res)
        with open(args.out.replace(".json", ".md"), "w") as f:
            f.write(text)
        print()
        print(text)
    log("%.0f s in all; exit %d" % (res["elapsed_s"], rc))
    return rc


if __name__ == "__main__":
    sys.exit(main())
