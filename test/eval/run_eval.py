#!/usr/bin/env python3
"""The essay's experiment in PostgreSQL: every way to move table B's data
to a second disk, under the same four query streams, side by side.

    sudo bash test/eval/run.sh             # installs, builds, then runs this
    python3 test/eval/run_eval.py [--rows N] [--warmup-s S] [--settle-s S]
            [--transition-timeout-s S] [--methods a,b,...] [--disks auto|emulate|dirs]
            [--tsmove-rate-mb MB] [--out-dir DIR]      (--help: every option)

Tchervenski (Waterloo, 2008) moved DB2 container CB1 of tablespace TSB from
disk HDA to disk HDB while two merge-join streams read tables A and B and
one update stream wrote each table, and reported per stream the TPM after
warm-up, during the move and at the final state, the length of the move and
the time to reach a stable state (his Table 5).  This script does the same
on one machine, in one run, for every method in methods.py:

 1. Load.  One cluster (pg_tsmove preloaded), tablespaces TSA and TSB on
    HDA and TSB2 (empty) on HDB (disks.py: two throttled loop devices, or
    plain directories with a warning); tables A and B as in workload.py.
    EXPLAIN of the SELECT must be a merge join of two index scans.  The
    stopped cluster and both disks are saved as the starting state.
 2. Floor.  Copy B's files from HDA to HDB, idle, under the same limits.
 3. Per method, from the same starting state (restored, caches dropped):
    start the server in the disks' cgroups, start the four pgbench streams,
    warm up (--warmup-s), move (the transition; --transition-timeout-s
    bounds it), settle (--settle-s), stop the streams, and check the data
    (checks.py), with the limits off.  A method that is not available
    (pg_tsmove without relocate_tablespace, no pg_repack) gets a row that
    says so.
 4. Report (report.py) in --out-dir (test/eval/latest/ by default):
    report.md (the table), series.json
    (TPM per stream per second, the windows, every figure), tpm.png (one
    panel per method, transition shaded).  A progress line every 10 s.

Loop devices, mounts, cgroups and servers are removed at the end, also on
an error or Ctrl-C; a run killed with SIGKILL is cleaned up by the next.

Exit status: 0 when every available method ran and every data check
passed (a method that did not finish in time is a result, not an error),
1 when a data check failed or a method raised, 2 when the set-up failed
or the run was interrupted.

Locking: none of its own.  The methods take what their tools take
(methods.py); the harness only terminates its own pgbench sessions
(application_name eval_*) to stop the streams.
"""

import argparse
import datetime
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from benchlib import git_head  # noqa: E402
from pgcluster import (PG_BIN, Cluster, become_subreaper,  # noqa: E402
                       chown_to_server_user)
import checks  # noqa: E402
import disks as disks_mod  # noqa: E402
import methods as methods_mod  # noqa: E402
import report  # noqa: E402
import workload  # noqa: E402

SERVER_CONF = [
    "shared_buffers = 128MB",
    "max_wal_size = 4GB",
    "min_wal_size = 1GB",
    "checkpoint_timeout = 15min",
    "log_checkpoints = on",
    "log_lock_waits = on",
    "track_io_timing = on",
]


def log(msg):
    print("[%s] %s" % (datetime.datetime.now().strftime("%H:%M:%S"), msg), flush=True)


class EvalCluster(Cluster):
    """A Cluster whose server runs inside the emulated disks' cgroups."""

    def __init__(self, base_dir, name, disks):
        super().__init__(base_dir, name)
        self.disks = disks

    def start(self, timeout=60):
        become_subreaper()
        argv = [os.path.join(PG_BIN, "pg_ctl"), "start", "-w", "-t", str(timeout),
                "-D", self.data_dir, "-l", self.log_file]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        proc = subprocess.run(self.disks.in_cgroups(argv), capture_output=True,
                              text=True, timeout=timeout + 10, cwd="/")
        if proc.returncode != 0:
            raise RuntimeError("%s: start failed: %s\n%s" % (self.name, proc.stderr,
                                                              self.log_tail()))
        return self


def control_s(args):
    """The control's transition: --control-s, or the transition timeout."""
    return args.control_s if args.control_s is not None else args.transition_timeout_s


class Run:
    """What a method needs: the cluster, the disks, the streams."""

    def __init__(self, cluster, disks, streams, transition_timeout, tsmove_rate_mb,
                 control_s):
        self.cluster = cluster
        self.disks = disks
        self.streams = streams
        self.transition_timeout = transition_timeout
        self.tsmove_rate_mb = tsmove_rate_mb     # None: pg_tsmove.max_rate_mb
        self.control_s = control_s               # the control's transition

    def chown(self, path):
        chown_to_server_user(path)

    def start_server(self):
        self.cluster.start()


class Progress(threading.Thread):
    """Prints one line every `every` seconds: method, phase, live TPM of each
    stream (pgbench -P), and the state of running pg_tsmove jobs."""

    def __init__(self, every=10.0):
        super().__init__(daemon=True)
        self.every = every
        self.stop_event = threading.Event()
        self.method = ""
        self.phase = ""
        self.phase_start = time.time()
        self.streams = None
        self.cluster = None

    def set(self, phase, method=None, streams=None, cluster=None):
        self.phase, self.phase_start = phase, time.time()
        if method is not None:
            self.method = method
        if streams is not None:
            self.streams = streams
        if cluster is not None:
            self.cluster = cluster

    def line(self):
        parts = ["%s | %s %.0f s" % (self.method, self.phase, time.time() - self.phase_start)]
        streams = self.streams
        if streams is not None:
            tpm = []
            for s in streams.streams:
                tpm.append("%s %s" % (s.name, _live_tpm(s)))
            parts.append("TPM " + ", ".join(tpm))
        if self.cluster is not None and self.phase == "transition":
            try:
                jobs = self.cluster.sql(
                    "SELECT relname, state, blocks_copied, blocks_total, dirty_backlog "
                    "FROM tsmove.jobs WHERE state NOT IN ('done', 'failed', 'cancelled') "
                    "ORDER BY job_id")
                if jobs:
                    parts.append("jobs " + ", ".join("%s %s %s/%s (backlog %s)" % j
                                                     for j in jobs))
            except Exception:
                pass
        return " | ".join(parts)

    def run(self):
        while not self.stop_event.wait(self.every):
            if self.phase:
                log(self.line())


class JobTimeline(threading.Thread):
    """Samples the running pg_tsmove jobs once a second during the
    transition, so that a dip of the streams can be matched with what the
    move was doing then (report.py: the worst 5 s of each stream group).
    Tolerates a server that is down (the offline method stops it)."""

    COLUMNS = ("t", "job_id", "state", "blocks_copied", "blocks_recopied", "dirty_backlog",
               "bytes_written", "switch_attempts", "lock_wait_ms", "pace_mb_s")

    def __init__(self, cluster, every=1.0):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.every = every
        self.stop_event = threading.Event()
        self.rows = []

    def run(self):
        while not self.stop_event.wait(self.every):
            try:
                rows = self.cluster.sql(
                    "SELECT extract(epoch FROM clock_timestamp())::float8, job_id, state, "
                    "blocks_copied, blocks_recopied, dirty_backlog, bytes_written, "
                    "switch_attempts, lock_wait_ms::float8, pace_mb_s::float8 "
                    "FROM tsmove.jobs WHERE state NOT IN ('done', 'failed', 'cancelled', 'skipped') "
                    "ORDER BY job_id")
            except Exception:
                continue
            self.rows += [list(r) for r in rows]

    def stop(self):
        self.stop_event.set()
        self.join()
        return {"columns": list(self.COLUMNS), "rows": self.rows}


def _live_tpm(stream):
    """TPM of the last pgbench -P report of the stream's current segment."""
    if not stream.segments:
        return "-"
    try:
        with open(stream.segments[-1][1] + ".out") as f:
            found = re.findall(r"^progress: [\d.]+ s, ([\d.]+) tps", f.read(), re.M)
        return "%.0f" % (float(found[-1]) * 60) if found else "-"
    except OSError:
        return "-"


# ---------------------------------------------------------------------------
# starting state

def sh(argv):
    subprocess.run(argv, check=True)


def clear_dir(path):
    for entry in os.listdir(path):
        if entry == "lost+found":
            continue
        full = os.path.join(path, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)


def save_state(cluster, disks, snap):
    os.makedirs(snap)
    sh(["cp", "-a", cluster.data_dir, os.path.join(snap, "data")])
    for name, path in (("hda", disks.hda), ("hdb", disks.hdb)):
        os.makedirs(os.path.join(snap, name))
        sh(["cp", "-a", path + "/.", os.path.join(snap, name)])
        lf = os.path.join(snap, name, "lost+found")
        if os.path.isdir(lf):
            shutil.rmtree(lf)


def restore_state(cluster, disks, snap, tablespaces):
    """The stopped cluster and both disks as they were after the load; no
    page of HDA or HDB left in the page cache."""
    shutil.rmtree(cluster.data_dir, ignore_errors=True)
    sh(["cp", "-a", os.path.join(snap, "data"), cluster.data_dir])
    for name, path in (("hda", disks.hda), ("hdb", disks.hdb)):
        clear_dir(path)
        sh(["cp", "-a", os.path.join(snap, name) + "/.", path])
    sh(["sync"])
    disks.drop_caches()
    open(cluster.log_file, "w").close()     # one server log per method
    cluster.tablespaces = dict(tablespaces)


def measure_copy_floor(cluster, disks):
    """Idle copy of TSB's directory from HDA to HDB, under the limits, in
    the server's cgroups, page cache dropped first: the fastest any method
    can move B's data."""
    src = cluster.tablespaces["tsb"]
    dst = os.path.join(disks.hdb, "floor_copy")
    nbytes = int(subprocess.run(["du", "-sb", src], capture_output=True, text=True,
                                check=True).stdout.split()[0])
    disks.drop_caches()
    disks.apply_limits()
    t = time.time()
    try:
        sh(disks.in_cgroups(["sh", "-c", 'cp -a "$1" "$2" && sync -f "$2"', "sh",
                             src, dst]))
        seconds = time.time() - t
    finally:
        disks.clear_limits()
        shutil.rmtree(dst, ignore_errors=True)
    return {"bytes": nbytes, "seconds": seconds}


# ---------------------------------------------------------------------------
# one method

def sleep_until(t):
    while True:
        left = t - time.time()
        if left <= 0:
            return
        time.sleep(min(left, 0.5))


def wait_for_selects_started_before(cluster, epoch, timeout_s):
    """Wait until no SELECT stream runs a query that started before epoch;
    False on timeout or if the server cannot be asked."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            running = cluster.sql_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name "
                "LIKE 'eval\\_select%%' AND state = 'active' "
                "AND query_start < to_timestamp(%s)", (epoch,))
        except Exception:
            return False
        if running == 0:
            return True
        time.sleep(0.2)
    return False


def run_method(method, args, cluster, disks, snap, tablespaces, expected, progress,
               logdir):
    res = {"key": method.key, "label": method.label, "essay": method.essay,
           "available": True}
    restore_state(cluster, disks, snap, tablespaces)
    conf = list(method.server_conf) + list(args.conf or [])
    if conf:
        cluster.append_conf(conf)
    res["server_conf"] = conf
    old_tsb_dir = tablespaces["tsb"]
    disks.apply_limits()
    cluster.start()
    streams = workload.StreamSet(
        cluster, logdir, args.rows, args.query_range,
        max_seconds=args.warmup_s + max(args.transition_timeout_s, control_s(args)) +
        args.settle_s + 900,
        update_rate=args.update_rate, third_table=args.third_table)
    run = Run(cluster, disks, streams, args.transition_timeout_s, args.tsmove_rate_mb,
              control_s(args))
    try:
        res["t_streams_start"] = run.t_streams_start = time.time()
        streams.start()
        progress.set("warm-up", streams=streams, cluster=cluster)
        sleep_until(res["t_streams_start"] + args.warmup_s)
        progress.set("transition")
        t_transition = time.time()
        timeline = JobTimeline(cluster)
        timeline.start()
        try:
            tr = method.run(run)
        except Exception as e:
            tr = methods_mod.Transition(start=t_transition,
                                        end=time.time(), error="%s: %s" % (
                                            type(e).__name__, e))
            res["exception"] = traceback.format_exc()
            log("%s raised: %s" % (method.label, e))
        finally:
            res["job_timeline"] = timeline.stop()
        res["transition"] = tr.__dict__
        log("%s: transition %s in %.1f s%s" % (
            method.label, "finished" if tr.finished else "NOT finished",
            tr.end - tr.start, (": " + tr.error) if tr.error else ""))
        progress.set("settle")
        res["t_final_end"] = tr.end + args.settle_s
        sleep_until(res["t_final_end"])
        # Let the SELECTs running at the end of the final window finish:
        # stopping the streams kills a query in flight, and its share of
        # the window would be lost.
        progress.set("draining")
        res["drained"] = wait_for_selects_started_before(
            cluster, res["t_final_end"], args.transition_timeout_s)
        if method.after_settle:
            res["after_settle"] = method.after_settle(run)
    finally:
        progress.set("stopping streams")
        streams.pause()
        res["t_streams_stop"] = time.time()
        streams.close()
        progress.set("data checks", streams=None)
        disks.clear_limits()
    res["memory_max_usage_mb"] = disks.memory_usage_mb()
    res["streams"] = {}
    for s in streams.streams:
        starts, ends, failed = s.transactions()
        res["streams"][s.name] = {"starts": starts, "ends": ends, "failed": failed,
                                  "events": s.events, "segments": len(s.segments)}
    res["checks"] = checks.run_checks(
        cluster, disks, expected, res["transition"]["finished"],
        old_tsb_dir if method.moves_tablespace else None,
        moved=res["transition"]["details"].get("moved"))
    log("%s: data checks %s" % (method.label, "OK" if res["checks"]["ok"] else
                                "FAILED: %s" % res["checks"]["problems"]))
    res["server_log_problems"] = [l for l in cluster.log_contents().splitlines()
                                  if re.search(r"\b(PANIC|FATAL|ERROR|WARNING):", l)][:50]
    # where each committed switch's time under its locks went (worker.c)
    res["switch_timings"] = [m.group(1) for m in re.finditer(
        r"pg_tsmove: (job \d+ switched: .*)", cluster.log_contents())][:20]
    cluster.stop("fast")
    report.method_metrics(res, {"warmup_s": args.warmup_s, "settle_s": args.settle_s})
    res["tpm_1s"] = {n: [round(v, 2) for _, v in series]
                     for n, series in report.binned(res, 1.0).items()}
    return res


def keep_server_logs(workdir, out_dir):
    """Each method's server log, as <out-dir>/logs/<method>.server.log: what
    the worker said about its switch attempts is read there."""
    logs = os.path.join(workdir, "logs")
    for key in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        src = os.path.join(logs, key, "server.log")
        if os.path.exists(src):
            os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
            shutil.copy(src, os.path.join(out_dir, "logs", key + ".server.log"))


def slim(res):
    """The result without per-transaction arrays (series.json keeps the
    1-second TPM series instead)."""
    out = dict(res)
    if "streams" in out:
        out["streams"] = {n: {k: v for k, v in s.items() if k not in ("starts", "ends")}
                          for n, s in out["streams"].items()}
    return out


# ---------------------------------------------------------------------------

def machine_facts(cluster, disks):
    mem = 0
    cpu = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 2**20
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    git = git_head() or "?"
    version = cluster.sql_scalar("SHOW server_version")
    repack = methods_mod._repack_exe()
    repack_v = subprocess.run([repack, "--version"], capture_output=True,
                              text=True).stdout.strip() if repack else "none"
    facts = {"nproc": os.cpu_count(), "mem_gib": round(mem, 1), "cpu": cpu,
             "kernel": platform.release(), "pg_version": version, "git_head": git,
             "pg_repack": repack_v, "loadavg_start": os.getloadavg()[0],
             "tsmove_max_rate_mb": cluster.sql_scalar("SHOW pg_tsmove.max_rate_mb"),
             "tsmove_switch_lock_timeout": cluster.sql_scalar(
                 "SHOW pg_tsmove.switch_lock_timeout")}
    return facts


def machine_summary(f):
    return ("%d cores (%s), %.1f GiB RAM, kernel %s; PostgreSQL %s; pg_tsmove at git %s "
            "(pg_tsmove.max_rate_mb %s, switch_lock_timeout %s); %s; load average "
            "%.1f at the start, %.1f at the end"
            % (f["nproc"], f["cpu"], f["mem_gib"], f["kernel"], f["pg_version"],
               f["git_head"], f["tsmove_max_rate_mb"], f["tsmove_switch_lock_timeout"],
               f["pg_repack"], f["loadavg_start"], f.get("loadavg_end", float("nan"))))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=150000,
                    help="rows per table (default 150000: ~390 MiB each, 3x shared_buffers)")
    ap.add_argument("--query-range", type=int, default=10000,
                    help="keys per SELECT, @top - @bottom (default 10000, as the essay)")
    ap.add_argument("--update-rate", type=int, default=None,
                    help="transactions/s of each update stream (pgbench -R); "
                         "default: closed streams, as fast as they go")
    ap.add_argument("--third-table", nargs="?", const="hda", choices=("hda", "hdb"),
                    help="a table C, on HDA beside A (or on HDB, in tsb2, the "
                         "target), with a stream of range scans of C alone and one "
                         "of updates of C")
    ap.add_argument("--conf", action="append", metavar="SETTING",
                    help="a postgresql.conf line added after the method's (repeatable)")
    ap.add_argument("--warmup-s", type=int, default=60)
    ap.add_argument("--settle-s", type=int, default=60)
    ap.add_argument("--transition-timeout-s", type=int, default=150)
    ap.add_argument("--control-s", type=int, default=None,
                    help="how long the control (nothing moves) lets the streams run "
                         "in its transition (default: --transition-timeout-s)")
    ap.add_argument("--methods", default=",".join(m.key for m in methods_mod.METHODS),
                    help="comma-separated subset of: %s"
                    % ", ".join(m.key for m in methods_mod.METHODS))
    ap.add_argument("--tsmove-rate-mb", type=float, default=None,
                    help="max_rate_mb of the pg_tsmove calls (default: NULL, i.e. "
                    "pg_tsmove.max_rate_mb; 0 = unthrottled)")
    ap.add_argument("--disks", choices=("auto", "emulate", "dirs"), default="auto")
    ap.add_argument("--disk-read-iops", type=int, default=6000)
    ap.add_argument("--disk-write-iops", type=int, default=6000)
    ap.add_argument("--disk-read-mb-s", type=int, default=100)
    ap.add_argument("--disk-write-mb-s", type=int, default=100)
    ap.add_argument("--disk-size-mb", type=int, default=4096)
    ap.add_argument("--memory-mb", type=int, default=448,
                    help="server memory cgroup limit (shared_buffers is 128MB)")
    ap.add_argument("--shared-buffers", default="128MB")
    ap.add_argument("--progress-s", type=float, default=10.0)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "latest"))
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.methods.split(",") if k.strip()]
    known = {m.key for m in methods_mod.METHODS}
    unknown = [k for k in keys if k not in known]
    if unknown:
        ap.error("unknown method(s) %s; choose from %s" % (unknown, sorted(known)))
    args.method_keys = keys
    if args.query_range >= args.rows:
        ap.error("--query-range must be smaller than --rows")
    return args


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    # Clean up on Ctrl-C and SIGTERM, also when started in the background
    # (where a shell without job control leaves SIGINT ignored); on SIGHUP
    # only if it is not ignored (nohup).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _raise_interrupt)
    os.makedirs(args.out_dir, exist_ok=True)
    tables = ("a", "b", "c") if args.third_table else ("a", "b")
    for stale in disks_mod.clean_stale_runs("/tmp"):
        log("removed what a killed evaluation left: %s" % stale)
    t_start = time.time()
    workdir = tempfile.mkdtemp(prefix=disks_mod.STALE_PREFIX, dir="/tmp")
    os.chmod(workdir, 0o755)
    chown_to_server_user(workdir)
    limits = disks_mod.DiskLimits(
        size_mb=args.disk_size_mb, read_iops=args.disk_read_iops,
        write_iops=args.disk_write_iops, read_mb_s=args.disk_read_mb_s,
        write_mb_s=args.disk_write_mb_s, memory_mb=args.memory_mb)
    disks = disks_mod.Disks(workdir, limits, args.disks)
    cluster = None
    progress = Progress(args.progress_s)
    res = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
           "command": "python3 test/eval/run_eval.py " + " ".join(
               shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
           "settings": {"rows": args.rows, "query_range": args.query_range,
                        "update_rate": args.update_rate, "third_table": args.third_table,
                        "warmup_s": args.warmup_s, "settle_s": args.settle_s,
                        "transition_timeout_s": args.transition_timeout_s,
                        "control_s": control_s(args),
                        "tsmove_rate_mb": args.tsmove_rate_mb,
                        "shared_buffers": args.shared_buffers,
                        "server_conf": SERVER_CONF,
                        "stable_window_s": report.STABLE_WINDOW_S,
                        "stable_fraction": report.STABLE_FRACTION},
           "methods": []}
    rc = 0
    try:
        disks.setup()
        res["disks"] = disks.describe()
        if disks.warning:
            log("WARNING: " + disks.warning)
        else:
            log("disks: HDA %s on %s, HDB %s on %s" % (disks.hda, disks.loops["hda"],
                                                       disks.hdb, disks.loops["hdb"]))
        for d in (disks.hda, disks.hdb):
            chown_to_server_user(d)
        cluster = EvalCluster(workdir, "pg", disks)
        cluster.init(extra_conf=SERVER_CONF + ["shared_buffers = %s" % args.shared_buffers]
                     + disks.server_conf())
        cluster.start()
        progress.start()
        progress.set("load", method="set-up", cluster=cluster)
        for ext in ("pg_tsmove", "amcheck"):
            cluster.sql("CREATE EXTENSION %s" % ext)
        if methods_mod.repack_available(cluster) is None:
            cluster.sql("CREATE EXTENSION pg_repack")
        workload.create_schema(cluster, os.path.join(disks.hda, "tsa"),
                               os.path.join(disks.hda, "tsb"),
                               os.path.join(disks.hdb, "tsb2"), tables=tables,
                               third_on=args.third_table)
        log("loading %d rows into %s" % (args.rows, ", ".join(tables)))
        t = time.time()
        workload.load_data(cluster, args.rows, tables)
        res["load_s"] = time.time() - t
        res["data"] = workload.data_facts(cluster)
        log("loaded in %.0f s: a %.0f MiB, b %.0f MiB (with indexes)"
            % (res["load_s"], res["data"]["a"]["total_bytes"] / 2**20,
               res["data"]["b"]["total_bytes"] / 2**20))
        res["plan"], problem = workload.plan_of_query(cluster, args.rows, args.query_range)
        if problem:
            raise RuntimeError(problem)
        res["machine"] = machine_facts(cluster, disks)
        available = {}
        for m in methods_mod.METHODS:
            if m.key in args.method_keys:
                available[m.key] = m.available(cluster) if m.available else None
        tablespaces = dict(cluster.tablespaces)
        cluster.stop("fast")
        snap = os.path.join(workdir, "snapshot")
        save_state(cluster, disks, snap)
        res["copy_floor"] = measure_copy_floor(cluster, disks)
        log("floor: idle copy of TSB's %.0f MiB to HDB in %.1f s"
            % (res["copy_floor"]["bytes"] / 2**20, res["copy_floor"]["seconds"]))
        selected = [m for m in methods_mod.METHODS if m.key in args.method_keys]
        for i, m in enumerate(selected, 1):
            name = "%d/%d %s" % (i, len(selected), m.label)
            progress.set("restore", method=name)
            if available[m.key]:
                log("%s: %s" % (name, available[m.key]))
                res["methods"].append({"key": m.key, "label": m.label, "essay": m.essay,
                                       "available": False, "reason": available[m.key]})
                continue
            log("%s: restoring the starting state" % name)
            logdir = os.path.join(workdir, "logs", m.key)
            os.makedirs(logdir)
            chown_to_server_user(logdir)
            try:
                r = run_method(m, args, cluster, disks, snap, tablespaces,
                               res["data"], progress, logdir)
                if r["transition"].get("end") and res["copy_floor"]["seconds"] > 0 \
                        and not m.is_control:
                    r["copy_floor_ratio"] = ((r["transition"]["end"] -
                                              r["transition"]["start"]) /
                                             res["copy_floor"]["seconds"])
                if not r["checks"]["ok"] or r.get("exception"):
                    rc = 1
                g = r["metrics"]["groups"]
                log("%s: TPM update_b %s -> %s (lowest %s) -> %s; stable after %s"
                    % (name, report.fmt_tpm(g["update_b"]["after_warmup"]),
                       report.fmt_tpm(g["update_b"]["during"]),
                       report.fmt_tpm(g["update_b"]["lowest_5s_during"]),
                       report.fmt_tpm(g["update_b"]["final"]),
                       report.fmt_s(r["metrics"]["time_to_stable_s"])))
            except Exception as e:
                rc = 1
                log("%s FAILED: %s" % (name, e))
                traceback.print_exc()
                r = {"key": m.key, "label": m.label, "essay": m.essay, "available": True,
                     "exception": "%s: %s" % (type(e).__name__, e)}
                if cluster.is_running():
                    cluster.stop("immediate")
            # the method's server log, a failed one's too (the next method's
            # restore empties it)
            if os.path.exists(cluster.log_file):
                shutil.copy(cluster.log_file, os.path.join(logdir, "server.log"))
            res["methods"].append(slim(r) if "streams" in r else r)
            res["methods"][-1]["_full"] = r
    except KeyboardInterrupt as e:
        rc = 2
        res["exception"] = "interrupted (%s)" % (e or "Ctrl-C")
        log("interrupted; cleaning up")
    except Exception as e:
        rc = 2
        res["exception"] = "%s: %s" % (type(e).__name__, e)
        log("ABORTED: %s" % res["exception"])
        traceback.print_exc()
    finally:
        progress.stop_event.set()
        res["elapsed_s"] = time.time() - t_start
        if "machine" in res:
            res["machine"]["loadavg_end"] = os.getloadavg()[0]
            res["machine"]["summary"] = machine_summary(res["machine"])
        cleanup_errors = []
        if cluster is not None:
            try:
                cluster.destroy()
            except Exception as e:
                cleanup_errors.append("cluster: %s" % e)
        try:
            disks.teardown()
        except Exception as e:
            cleanup_errors.append(str(e))
        try:
            keep_server_logs(workdir, args.out_dir)
        except OSError as e:
            cleanup_errors.append("server logs: %s" % e)
        shutil.rmtree(workdir, ignore_errors=True)
        for e in cleanup_errors:
            log("clean-up problem: %s" % e)
    write_outputs(res, args.out_dir)
    log("exit %d; %.0f s in all" % (rc, res["elapsed_s"]))
    return rc


def write_outputs(res, out_dir):
    full = [m.pop("_full", None) for m in res["methods"]]
    paths = {"json": os.path.join(out_dir, "series.json"),
             "md": os.path.join(out_dir, "report.md"),
             "png": os.path.join(out_dir, "tpm.png")}
    report.write_json(res, paths["json"])
    if "machine" not in res or "data" not in res:
        log("no report: the set-up did not finish (%s)" % res.get("exception"))
        return
    fulls = dict(res)
    fulls["methods"] = [f if f is not None else m for f, m in zip(full, res["methods"])]
    text = report.markdown(fulls)
    with open(paths["md"], "w") as f:
        f.write(text)
    report.plot(fulls, paths["png"])
    print()
    print(text)
    log("wrote %s, %s, %s" % (paths["md"], paths["json"], paths["png"]))


if __name__ == "__main__":
    sys.exit(main())
