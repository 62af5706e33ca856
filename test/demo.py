#!/usr/bin/env python3
"""pg_tsmove's story in a few minutes, as a DBA would watch it.

    sudo bash test/demo.sh            # installs and builds first, then runs this
    python3 test/demo.py [--rows N] [--watch-s S] [--after-s S]

The essay's experiment on one machine (test/eval/): tables A and B, read
together by merge joins and updated one row at a time, both on disk HDA;
disk HDB empty.  The demo prints

 1. what the emulation is and what it cannot do (two throttled loop
    devices, a memory cgroup; without root, two directories and a warning);
 2. the problem, once the monitoring has watched for --watch-s seconds:
    tsmove.tablespace_io (HDA busy, HDB idle), tsmove.coaccess (A and B
    read together, on one device), and tsmove.advise() naming the move and
    its predicted gain;
 3. the advised move, run under the load, with its progress every 5 s;
 4. throughput of the streams before, during and after the move, and
    tsmove.report() saying whether it helped, for --after-s seconds after.

Everything (cluster, loop devices, cgroups) is removed at the end.  The
evaluation (test/eval/run_eval.py) is the measured version of the same,
every method side by side; the autopilot's method there makes the decision
this demo leaves to the DBA.
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "eval"))

from pgcluster import chown_to_server_user  # noqa: E402
import disks as disks_mod  # noqa: E402
import workload  # noqa: E402
from run_eval import SERVER_CONF, EvalCluster, _live_tpm  # noqa: E402

DEMO_CONF = [
    "shared_buffers = 128MB",
    "pg_tsmove.sample_interval = '2s'",
    "pg_tsmove.history_interval = '6s'",
    "pg_tsmove.relation_map_refresh = '5s'",
    "pg_tsmove.switch_lock_timeout = '30s'",   # the joins hold B for seconds
]


def say(text=""):
    print(text, flush=True)


def table(cluster, query, params=None):
    """Print a query's rows as psql would, roughly."""
    with cluster.conn() as conn:
        cur = conn.execute(query, params)
        names = [d.name for d in cur.description]
        rows = [["" if v is None else str(v) for v in r] for r in cur.fetchall()]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
    say("  " + " | ".join(n.ljust(w) for n, w in zip(names, widths)))
    say("  " + "-+-".join("-" * w for w in widths))
    for r in rows:
        say("  " + " | ".join(v.ljust(w) for v, w in zip(r, widths)))
    if not rows:
        say("  (no rows)")


def tpm(streams, t1, t2):
    out = {}
    for s in streams.streams:
        starts, ends, _ = s.transactions()
        out[s.name] = workload.tpm_window(starts, ends, t1, t2)
    return out


def fmt_tpm(d):
    return ", ".join("%s %.0f" % (k, v) for k, v in d.items())


def live(streams):
    """Each stream's TPM over pgbench's last progress report (5 s)."""
    return ", ".join("%s %s" % (s.name, _live_tpm(s)) for s in streams.streams)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=60000, help="rows per table (160 MB each)")
    ap.add_argument("--watch-s", type=int, default=45, help="load before the advice")
    ap.add_argument("--after-s", type=int, default=55,
                    help="load after the move (at least 52: the measure's window ends "
                         "45 s after the move, and the history row must be closed)")
    ap.add_argument("--memory-mb", type=int, default=300)
    args = ap.parse_args()

    disks_mod.clean_stale_runs("/tmp")
    workdir = tempfile.mkdtemp(prefix=disks_mod.STALE_PREFIX, dir="/tmp")
    os.chmod(workdir, 0o755)
    chown_to_server_user(workdir)
    disks = disks_mod.Disks(workdir, disks_mod.DiskLimits(size_mb=1024, memory_mb=args.memory_mb))
    cluster = streams = None
    try:
        disks.setup()
        say("== 1. Two disks on one machine")
        if disks.emulated:
            lim = disks.limits
            say("HDA (%s) and HDB (%s): loop devices, each throttled to %d read IOPS and %d MB/s "
                "(cgroup v1 blkio); the server's memory is capped at %d MB so that the page "
                "cache cannot hide them.  Not emulated: seek time (a random read costs what a "
                "sequential one does), and both are files on this machine's one disk, which "
                "pg_tsmove.device_disks tells the monitoring to ignore."
                % (os.path.basename(disks.loops["hda"]), os.path.basename(disks.loops["hdb"]),
                   lim.read_iops, lim.read_mb_s, lim.memory_mb))
        else:
            say("WARNING: %s." % disks.warning)
        cluster = EvalCluster(workdir, "demo", disks).init(
            extra_conf=SERVER_CONF + DEMO_CONF + disks.server_conf())
        cluster.start()
        cluster.sql("CREATE EXTENSION pg_tsmove")
        workload.create_schema(cluster, os.path.join(disks.hda, "tsa"),
                               os.path.join(disks.hda, "tsb"), os.path.join(disks.hdb, "tsb2"))
        say("loading %d rows into a (tablespace tsa) and b (tsb), both on HDA; tsb2 on HDB "
            "is empty ..." % args.rows)
        workload.load_data(cluster, args.rows)
        disks.apply_limits()
        logdir = os.path.join(workdir, "logs")
        os.makedirs(logdir)
        chown_to_server_user(logdir)
        streams = workload.StreamSet(cluster, logdir, args.rows, 10000, max_seconds=3600)
        t0 = time.time()
        streams.start()
        say()
        say("== 2. The problem: four streams (two merge joins of A and B, updates of each), "
            "watched for %d s" % args.watch_s)
        while time.time() < t0 + args.watch_s:
            time.sleep(15)
            now = time.time()
            say("  %3.0f s  TPM %s" % (now - t0, live(streams)))
        say()
        say("tsmove.tablespace_io: where each tablespace lives, and how busy it is")
        table(cluster, "SELECT tablespace, device, round(util_pct::numeric, 1) AS util_pct, "
                       "round(r_await_ms::numeric, 2) AS r_await_ms, round(reads_s::numeric) AS reads_s "
                       "FROM tsmove.tablespace_io WHERE tablespace IN ('tsa', 'tsb', 'tsb2') ORDER BY 1")
        say()
        say("tsmove.coaccess: relations read together")
        table(cluster, "SELECT rel_a, rel_b, same_device, executions, "
                       "pg_size_pretty(coaccess_weight_read * 8192) AS read_together "
                       "FROM tsmove.coaccess ORDER BY coaccess_weight_read DESC LIMIT 4")
        say()
        say("tsmove.advise(): what to move, and what it predicts (share-of-busy-time model)")
        table(cluster, "SELECT rank, relation, target_tablespace AS target, benefit_pct, "
                       "source_util_pct || ' -> ' || source_util_after_pct AS source_util, "
                       "target_util_pct || ' -> ' || target_util_after_pct AS target_util, "
                       "capacity_gain_pct, command "
                       "FROM tsmove.advise(min_read_mb => 8, horizon => '30 seconds') "
                       "WHERE target_tablespace = 'tsb2' LIMIT 3")
        advised = cluster.sql(
            "SELECT command, benefit_pct, read_share_pct "
            "FROM tsmove.advise(min_read_mb => 8, horizon => '30 seconds') "
            "WHERE target_tablespace = 'tsb2' ORDER BY rank LIMIT 1")
        command, predicted, read_share = advised[0] if advised else (None, None, None)
        if command is None:
            say("no advice to move to HDB: nothing to show (see the warning above)")
            return 1
        say()
        say("== 3. The move, under the load: %s" % command)
        t_move = time.time()
        job = cluster.sql_scalar(command)
        while True:
            row = cluster.sql("SELECT state, progress, dirty_backlog, rate_mb_s, switch_attempts "
                              "FROM tsmove.jobs WHERE job_id = %s", (job,))[0]
            now = time.time()
            say("  %3.0f s  job %s %s, %s copied, backlog %s, %s MB/s, switch attempts %s | TPM %s"
                % (now - t_move, job, row[0], row[1], row[2], row[3], row[4], live(streams)))
            if row[0] in ("done", "failed", "cancelled"):
                break
            time.sleep(5)
        t_done = time.time()
        say()
        say("== 4. After the move: %d s more of the same load" % args.after_s)
        time.sleep(args.after_s)
        t_end = time.time()
        streams.pause()             # pgbench writes its logs out as it ends
        say("TPM per stream (the SELECTs take seconds each; each is counted pro rata):")
        say("TPM before the move (last 30 s): %s" % fmt_tpm(tpm(streams, t_move - 30, t_move)))
        say("TPM during the move (%.0f s):    %s" % (t_done - t_move, fmt_tpm(tpm(streams, t_move, t_done))))
        say("TPM after the move (last 30 s):  %s" % fmt_tpm(tpm(streams, t_end - 30, t_end)))
        say()
        say("tsmove.report(): the devices before and after, in pg_tsmove's own words")
        table(cluster, "SELECT side, period, device, util_pct, await_ms, blocks_read_s, note "
                       "FROM tsmove.report(now() - interval '1 hour', compare => '30 seconds') "
                       "WHERE job_id = %s ORDER BY side, period_start", (job,))
        say()
        say("The prediction against the outcome, by the autopilot's own measure "
            "(tsmove.autopilot_measure(): the busier device's utilisation 20 s before the move, "
            "less the busier one's from 25 to 45 s after it, each device scaled to the work the "
            "old load puts on it, from the share of the reads advise() saw):")
        measured, detail = cluster.sql(
            "SELECT benefit_pct, measured FROM tsmove.autopilot_measure(%s, '20 seconds', %s::numeric)",
            (job, read_share if read_share and read_share > 0 else None))[0]
        if measured is None:
            say("  not measurable (too little history, or the workload changed too much): %s" % detail)
        else:
            say("  predicted %s points, measured %s points (%+.0f %%); work after / before: %s"
                % (predicted, measured, 100.0 * (float(predicted) - float(measured)) / float(measured)
                   if float(measured) else 0.0, detail.get("work_ratio")))
        return 0
    finally:
        if streams is not None:
            streams.pause()
            streams.close()
        disks.clear_limits()
        if cluster is not None:
            cluster.destroy()
        disks.teardown()


if __name__ == "__main__":
    sys.exit(main())
