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
from one run to the next, far more than the cost to be measured.  So the
script also counts the instructions PostgreSQL executes per statement,
with valgrind's callgrind, which other jobs cannot disturb: after the
pgbench rounds it stops the server and runs the same statement as pgbench
-S, `SELECT abalance FROM pgbench_accounts WHERE aid = <n>`, 2000 and then
6000 times through `postgres --single` (each line through
exec_simple_query, as pgbench's simple protocol), in each configuration;
the difference of the two totals over 4000 is the cost of one statement,
start-up excluded.  The same again with a prepared statement (PREPARE
once, then EXECUTE: no parsing or planning, so the hooks weigh more; the
worst case).  Skipped, with a note, where valgrind is missing.

Targets: on: TPS >= 0.97 x floor and at most 3 % more instructions per
statement; off: TPS within 1 % of the floor and at most 0.5 % more
instructions (no cost beyond the hooks' calls).  After the 'on' runs the
script checks that co-access was recorded (pgbench_accounts with its
primary key, one execution per transaction), so the hooks measured were
really working.

Writes a markdown table to --out (and the data as JSON next to it).
"""

import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from benchlib import git_head  # noqa: E402
from pgcluster import (PG_BIN, Cluster, make_server_dir, processes_under,  # noqa: E402
                       server_command)

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


CALLGRIND_SIZES = (2000, 6000)


def statement_file(directory, mode, n):
    """n pgbench -S statements (fixed random keys) for postgres --single."""
    path = os.path.join(directory, "statements_%s_%d.sql" % (mode, n))
    rnd = random.Random(1)
    with open(path, "w") as f:
        if mode == "prepared":
            f.write("PREPARE q(int) AS SELECT abalance FROM pgbench_accounts WHERE aid = $1;\n")
        for _ in range(n):
            aid = rnd.randint(1, 100000)
            if mode == "prepared":
                f.write("EXECUTE q(%d);\n" % aid)
            else:
                f.write("SELECT abalance FROM pgbench_accounts WHERE aid = %d;\n" % aid)
    os.chmod(path, 0o644)
    return path


def callgrind_instructions(cluster, name, statements, out_dir):
    """Instructions postgres --single executes for a statement file."""
    options = {"floor": ["-c", "shared_preload_libraries="],
               "on": ["-c", "shared_preload_libraries=pg_tsmove",
                      "-c", "pg_tsmove.track_coaccess=on"],
               "off": ["-c", "shared_preload_libraries=pg_tsmove",
                       "-c", "pg_tsmove.track_coaccess=off"]}[name]
    out = os.path.join(out_dir, "callgrind.%s.%s" % (name, os.path.basename(statements)))
    argv = server_command(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                           os.path.join(PG_BIN, "postgres"), "--single", "-D", cluster.data_dir]
                          + options + ["postgres"])
    with open(statements) as f:
        proc = subprocess.run(argv, stdin=f, capture_output=True, text=True, cwd="/")
    if proc.returncode != 0:
        raise RuntimeError("postgres --single under callgrind failed: %s" % proc.stderr[-2000:])
    with open(out) as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError("no summary in %s" % out)


def instructions_per_statement(cluster, base):
    """{mode: {config: instructions per statement}} or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    out_dir = make_server_dir(os.path.join(base, "callgrind"), 0o755)
    result = {}
    for mode in ("simple", "prepared"):
        files = [statement_file(out_dir, mode, n) for n in CALLGRIND_SIZES]
        result[mode] = {}
        for name in CONFIGS:
            small, large = (callgrind_instructions(cluster, name, f, out_dir) for f in files)
            result[mode][name] = (large - small) / (CALLGRIND_SIZES[1] - CALLGRIND_SIZES[0])
            print("callgrind %-8s %-5s %9.0f instructions/statement"
                  % (mode, name, result[mode][name]), flush=True)
    return result


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--protocol", default="simple", choices=["simple", "extended", "prepared"])
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
    instructions = None
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
                runs[name].append(run)
                print("round %d %-5s %8.0f tps  %6.1f us CPU/tx  machine %3.0f%% busy  load %.1f"
                      % (r, name, run["tps"], run["cpu_us_per_tx"],
                         run["machine_busy_pct"], run["load_before"]), flush=True)
        cluster.stop()
        instructions = instructions_per_statement(cluster, base)
    finally:
        cluster.destroy()
        shutil.rmtree(base, ignore_errors=True)

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
    on_ok = summary["on"]["tps_ratio_median"] >= 0.97
    off_ok = abs(1 - summary["off"]["tps_ratio_median"]) <= 0.01
    hooks_ok = all(e >= 0.99 * t for t, e in checks)

    elapsed = time.monotonic() - t0
    busy = statistics.mean(x["machine_busy_pct"] for v in runs.values() for x in v)
    loads = [x["load_before"] for v in runs.values() for x in v]
    with open("/proc/meminfo") as f:
        mem_gib = int(f.readline().split()[1]) / 1048576
    lines = [
        "Run %s, %.0f s; %d cores (nproc), %.1f GiB RAM; %s; git HEAD %s."
        % (started.isoformat(), elapsed, os.cpu_count(), mem_gib, version.split(" on ")[0],
           git_head() or "?"),
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
    ]
    if instructions is None:
        lines += ["", "Instructions per statement: not measured (valgrind is not installed)."]
    else:
        lines += [
            "",
            "Instructions per statement (valgrind --tool=callgrind, postgres --single, the "
            "difference between %d and %d statements over %d: deterministic, whatever else "
            "the machine runs):" % (CALLGRIND_SIZES[0], CALLGRIND_SIZES[1],
                                    CALLGRIND_SIZES[1] - CALLGRIND_SIZES[0]),
            "",
            "| statement | floor | monitoring on | added | track_coaccess = off | added | targets | |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for mode, label in (("simple", "pgbench -S: SELECT ... WHERE aid = n (simple protocol)"),
                            ("prepared", "EXECUTE of it prepared (worst case)")):
            ins = instructions[mode]
            on_pct = 100.0 * (ins["on"] - ins["floor"]) / ins["floor"]
            off_pct = 100.0 * (ins["off"] - ins["floor"]) / ins["floor"]
            verdict = "PASS" if on_pct <= 3.0 and off_pct <= 0.5 else "MISS"
            lines.append("| %s | %.0f | %.0f | %+.0f (%+.2f %%) | %.0f | %+.0f (%+.2f %%) "
                         "| on <= 3 %%, off <= 0.5 %% | %s |"
                         % (label, ins["floor"], ins["on"], ins["on"] - ins["floor"], on_pct,
                            ins["off"], ins["off"] - ins["floor"], off_pct, verdict))
    lines += [
        "",
        "Co-access recorded during the 'on' runs: %s executions of (pgbench_accounts, "
        "pgbench_accounts_pkey) for %s transactions (%s)."
        % ("/".join(str(e) for _, e in checks), "/".join(str(t) for t, _ in checks),
           "the hooks were working" if hooks_ok else "MISSING: the hooks did not record"),
        "Failed transactions: %d." % sum(summary[name]["failed"] for name in CONFIGS),
    ]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump({"args": vars(args), "runs": runs, "summary": summary,
                   "instructions": instructions, "coaccess_checks": checks,
                   "started": started.isoformat()}, f, indent=1)
    print()
    print(text)
    return 0 if hooks_ok else 1


if __name__ == "__main__":
    sys.exit(main())
