#!/usr/bin/env python3
"""Benchmark: what pg_tsmove's monitoring costs a select-only workload.

Run as root from the repository, with the extension installed:

    python3 test/bench_monitor.py [--scale 10] [--rounds 6] [--seconds 20]
                                  [--clients 4] [--protocol simple]
                                  [--out test/bench_results/monitor_latest.md]

Not a pytest module: it takes several minutes and measures rather than
asserts.  One throwaway cluster (test/pgcluster.py, under /tmp) with
pgbench at --scale (10: 1.5 million rows, 150 MB, all in shared_buffers =
512MB, so the run is CPU-bound: the worst case for a per-query hook) is run
with `pgbench -n -S -c <clients> -j 2 -T <seconds>` in three
configurations, restarting the server between them:

    floor     shared_preload_libraries = ''   PostgreSQL alone
    on        pg_tsmove preloaded, defaults: track_coaccess on, the sampler
              at 10 s, concurrency ticks every 100 ms
    off       pg_tsmove preloaded, pg_tsmove.track_coaccess = off

The machine is shared and noisy, so the configurations alternate: --rounds
rounds, each running the three in a rotated order, each run after a 5 s
warm-up.  Per run: TPS (pgbench), and the server's CPU time per transaction
(the postmaster's reaped children's utime+stime plus its live children's,
before and after; a slower machine moment lowers TPS but hardly the CPU a
transaction needs).  The figures are read against the floor of the same
round (paired ratios), and the report gives their median, and the floor's
own spread from round to round as the noise.

On a shared machine the TPS of a 2-core box swings by tens of percent
from one run to the next, far more than the cost to be measured.  So each
round also measures, in the same server start, the CPU time one backend
spends per statement: a PL/pgSQL loop of --statements primary-key lookups
of pgbench_accounts (each one a full executor run, through every hook:
the same plan shape as pgbench -S), timed from the backend's own
/proc/<pid>/schedstat (CPU time in ns).  Other jobs can only add to a
process's CPU time, so the minimum over the rounds is the clean figure:
the hooks' cost is min(on) - min(floor) in microseconds per statement, and
the drop it implies is that cost over the server CPU a pgbench -S
transaction takes (min of the floor runs).

Targets: on: TPS >= 0.97 x floor (a drop of at most 3 %), and the implied
drop from the CPU measurement <= 3 %; off: TPS within 1 % of the floor and
an implied drop within 0.5 % (no cost beyond the measurement's resolution).
After the 'on' runs the script checks that co-access was recorded
(pgbench_accounts with its primary key, one execution per transaction), so
the hooks measured were really working.

Writes a markdown table to --out (and the data as JSON next to it).
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from pgcluster import Cluster, make_server_dir, processes_under  # noqa: E402

CONFIGS = {
    "floor": ["shared_preload_libraries = ''"],
    "on": ["shared_preload_libraries = 'pg_tsmove'",
           "pg_tsmove.track_coaccess = on"],
    "off": ["shared_preload_libraries = 'pg_tsmove'",
            "pg_tsmove.track_coaccess = off"],
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(cluster):
    """CPU seconds used by the cluster's processes so far: the postmaster's
    own, its reaped children's (cutime/cstime) and its live children's."""
    total = 0
    pm = cluster.postmaster_pid()
    with open("/proc/%d/stat" % pm) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[11..14] = utime stime cutime cstime (stat fields 14..17)
    total += sum(int(x) for x in fields[11:15])
    for pid in processes_under(cluster.data_dir):
        if pid == pm:
            continue
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / CLOCK_TICKS


def machine_busy():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    idle = cpu[3] + cpu[4]
    return sum(cpu) - idle, sum(cpu)


def run_once(cluster, args, seconds):
    cpu_before = server_cpu_seconds(cluster)
    busy_before = machine_busy()
    load_before = os.getloadavg()[0]
    result = cluster.pgbench_run_background(
        clients=args.clients, jobs=2, seconds=seconds,
        extra_args=["-S", "-M", args.protocol]).wait()
    time.sleep(0.5)                 # the backends exit and are reaped
    cpu_after = server_cpu_seconds(cluster)
    busy_after = machine_busy()
    return {
        "tps": result.tps,
        "transactions": result.transactions,
        "failed": result.failed_transactions,
        "cpu_us_per_tx": (cpu_after - cpu_before) * 1e6 / max(result.transactions, 1),
        "machine_busy_pct": 100.0 * (busy_after[0] - busy_before[0])
        / max(busy_after[1] - busy_before[1], 1),
        "load_before": load_before,
    }


def backend_cpu_ns(pid):
    """CPU time of one process in ns (/proc/<pid>/schedstat; stat's ticks
    where schedstat is missing)."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0])
    except OSError:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1e9 / CLOCK_TICKS


STATEMENT_LOOP = """
DO $$
DECLARE
  balance int;
BEGIN
  FOR i IN 1 .. %d LOOP
    SELECT abalance INTO balance FROM pgbench_accounts WHERE aid = (i * 7919) %% %d + 1;
  END LOOP;
END
$$"""


def statement_cpu_us(cluster, statements, rows):
    """Least CPU microseconds per statement of one backend over 3 loops."""
    best = None
    with cluster.conn() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute(STATEMENT_LOOP % (1000, rows))         # plans cached
        for _ in range(3):
            before = backend_cpu_ns(pid)
            conn.execute(STATEMENT_LOOP % (statements, rows))
            us = (backend_cpu_ns(pid) - before) / 1000.0 / statements
            best = us if best is None else min(best, us)
    return best


def configure(cluster, name):
    cluster.append_conf(CONFIGS[name])
    cluster.restart()


def coaccess_check(cluster):
    """The pair pgbench -S reads: (pgbench_accounts, its primary key)."""
    rows = cluster.sql("""
        SELECT executions, coaccess_weight FROM tsmove.coaccess
        WHERE (rel_a, rel_b) IN (('pgbench_accounts'::regclass, 'pgbench_accounts_pkey'::regclass),
                                 ('pgbench_accounts_pkey'::regclass, 'pgbench_accounts'::regclass))""")
    return rows[0] if rows else (0, 0)


def git_head():
    try:
        return subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--protocol", default="simple", choices=["simple", "extended", "prepared"])
    ap.add_argument("--statements", type=int, default=200000,
                    help="primary-key lookups per CPU measurement loop")
    ap.add_argument("--out", default=os.path.join(HERE, "bench_results", "monitor_latest.md"))
    args = ap.parse_args()

    started = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    t0 = time.monotonic()
    base = tempfile.mkdtemp(prefix="tsmbench_", dir="/tmp")
    os.chmod(base, 0o755)
    make_server_dir(base, 0o755)
    cluster = Cluster(base, "bench")
    cluster.init(extra_conf=["shared_buffers = '512MB'", "max_wal_size = '2GB'"])
    cluster.start()
    runs = {name: [] for name in CONFIGS}
    checks = []
    try:
        cluster.sql("CREATE EXTENSION pg_tsmove")
        cluster.pgbench_init(args.scale)
        version = cluster.sql_scalar("SELECT version()")
        order = list(CONFIGS)
        for r in range(args.rounds):
            rotated = order[r % 3:] + order[:r % 3]
            for name in rotated:
                configure(cluster, name)
                if name == "on":
                    cluster.sql("SELECT tsmove.coaccess_reset()")
                run_once(cluster, args, 5)              # warm-up
                if name == "on":
                    before = coaccess_check(cluster)[0]
                run = run_once(cluster, args, args.seconds)
                if name == "on":
                    executions = coaccess_check(cluster)[0] - before
                    checks.append((run["transactions"], executions))
                run["round"] = r
                run["statement_cpu_us"] = statement_cpu_us(cluster, args.statements,
                                                           args.scale * 100000)
                runs[name].append(run)
                print("round %d %-5s %8.0f tps  %6.1f us CPU/tx  %6.3f us CPU/statement  "
                      "machine %3.0f%% busy  load %.1f"
                      % (r, name, run["tps"], run["cpu_us_per_tx"], run["statement_cpu_us"],
                         run["machine_busy_pct"], run["load_before"]), flush=True)
    finally:
        cluster.destroy()

    def paired(name, key):
        return [x[key] / f[key] for x, f in zip(runs[name], runs["floor"])]

    floor_tps = [x["tps"] for x in runs["floor"]]
    noise = (max(floor_tps) - min(floor_tps)) / statistics.median(floor_tps)
    summary = {}
    for name in CONFIGS:
        tps = [x["tps"] for x in runs[name]]
        cpu = [x["cpu_us_per_tx"] for x in runs[name]]
        summary[name] = {
            "tps_median": statistics.median(tps), "tps_min": min(tps), "tps_max": max(tps),
            "cpu_us_median": statistics.median(cpu),
            "tps_ratio_median": statistics.median(paired(name, "tps")),
            "cpu_ratio_median": statistics.median(paired(name, "cpu_us_per_tx")),
            "failed": sum(x["failed"] for x in runs[name]),
        }
    floor_stmt = min(x["statement_cpu_us"] for x in runs["floor"])
    floor_tx_cpu = min(x["cpu_us_per_tx"] for x in runs["floor"])
    for name in CONFIGS:
        best = min(x["statement_cpu_us"] for x in runs[name])
        summary[name]["statement_cpu_us_min"] = best
        summary[name]["added_us"] = best - floor_stmt
        summary[name]["implied_drop_pct"] = 100.0 * (best - floor_stmt) / floor_tx_cpu
    on_ok = summary["on"]["tps_ratio_median"] >= 0.97
    off_ok = abs(1 - summary["off"]["tps_ratio_median"]) <= 0.01
    on_cpu_ok = summary["on"]["implied_drop_pct"] <= 3.0
    off_cpu_ok = summary["off"]["implied_drop_pct"] <= 0.5
    hooks_ok = all(e >= 0.99 * t for t, e in checks)

    elapsed = time.monotonic() - t0
    busy = statistics.mean(x["machine_busy_pct"] for v in runs.values() for x in v)
    loads = [x["load_before"] for v in runs.values() for x in v]
    with open("/proc/meminfo") as f:
        mem_gib = int(f.readline().split()[1]) / 1048576
    lines = [
        "Run %s, %.0f s; %d cores (nproc), %.1f GiB RAM; %s; git HEAD %s."
        % (started.isoformat(), elapsed, os.cpu_count(), mem_gib, version.split(" on ")[0],
           git_head()),
        "Machine shared with other jobs: the whole machine was %.0f %% busy on average during "
        "the runs, load average %.1f-%.1f before them."
        % (busy, min(loads), max(loads)),
        "pgbench -n -S -M %s -c %d -j 2 -T %d, scale %d, shared_buffers 512MB; %d rounds, "
        "configurations in rotated order, each run after a 5 s warm-up."
        % (args.protocol, args.clients, args.seconds, args.scale, args.rounds),
        "",
        "| configuration | median TPS | min-max TPS | TPS / floor (median of rounds) "
        "| server CPU us/tx | CPU / floor | target | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    targets = {"floor": ("-", ""), "on": (">= 0.97", "PASS" if on_ok else "MISS"),
               "off": ("1.00 +- 0.01", "PASS" if off_ok else "MISS")}
    labels = {"floor": "floor: PostgreSQL alone (not preloaded)",
              "on": "pg_tsmove preloaded, monitoring on (defaults)",
              "off": "pg_tsmove preloaded, track_coaccess = off"}
    for name in CONFIGS:
        s = summary[name]
        lines.append("| %s | %.0f | %.0f-%.0f | %.3f | %.1f | %.3f | %s | %s |"
                     % (labels[name], s["tps_median"], s["tps_min"], s["tps_max"],
                        s["tps_ratio_median"], s["cpu_us_median"], s["cpu_ratio_median"],
                        targets[name][0], targets[name][1]))
    lines += [
        "",
        "Floor TPS varied by %.0f %% from round to round (max-min over median): the noise "
        "against which the ratios are read." % (noise * 100),
        "",
        "CPU of one backend per statement (PL/pgSQL loop of %d primary-key lookups of "
        "pgbench_accounts, least of 3 loops per round, least of the rounds), and the drop it "
        "implies for pgbench -S, whose transactions took %.1f us of server CPU (least of the "
        "floor runs):" % (args.statements, floor_tx_cpu),
        "",
        "| configuration | us CPU / statement | added us | implied TPS drop | target | |",
        "|---|---|---|---|---|---|",
    ]
    cpu_targets = {"floor": ("-", ""), "on": ("<= 3 %", "PASS" if on_cpu_ok else "MISS"),
                   "off": ("<= 0.5 %", "PASS" if off_cpu_ok else "MISS")}
    for name in CONFIGS:
        s = summary[name]
        lines.append("| %s | %.3f | %+.3f | %.2f %% | %s | %s |"
                     % (labels[name], s["statement_cpu_us_min"], s["added_us"],
                        s["implied_drop_pct"], cpu_targets[name][0], cpu_targets[name][1]))
    lines += [
        "",
        "Co-access recorded during the 'on' runs: %s executions of (pgbench_accounts, "
        "pgbench_accounts_pkey) for %s transactions (%s)."
        % ("/".join(str(e) for _, e in checks), "/".join(str(t) for t, _ in checks),
           "the hooks were working" if hooks_ok else "MISSING: the hooks did not record"),
        "Failed transactions: %d." % sum(s["failed"] for s in summary.values()),
    ]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump({"args": vars(args), "runs": runs, "summary": summary,
                   "coaccess_checks": checks, "started": started.isoformat()}, f, indent=1)
    print()
    print(text)
    return 0 if hooks_ok else 1


if __name__ == "__main__":
    sys.exit(main())
