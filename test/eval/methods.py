"""The ways to move table B's data from HDA to HDB, each as a method the
evaluation runs under the four streams.

Every method function takes the Run (cluster, disks, streams, settings)
and returns a Transition: when the move started and ended (wall clock),
whether it finished, and what it reported.  The caller measures the
streams around it.

    relocate        tsmove.relocate_tablespace('tsb', <HDB>/tsb): the
                    container move itself (the essay's goal, section 4's
                    unbuilt dual-write method); tablespace TSB keeps its name
                    and OID, its directory moves.  With
                    pg_tsmove.relocation_switch_admits_readers on
                    (experimental, off by default): its switch's
                    ExclusiveLocks wait for the updates only, never for the
                    SELECTs that hold TSB's relations for seconds (with the
                    default AccessExclusiveLock it never switches here, as
                    tsmove_online).
    tsmove_online   tsmove.move('b', 'tsb2', with_indexes => true): B and its
                    primary key into tablespace TSB2 on HDB, online, with the
                    extension's defaults.
    tsmove_online_wait
                    the same with pg_tsmove.switch_lock_timeout = 30s: the
                    switch waits for the SELECTs that hold B (each runs for
                    seconds, and with the default 20 ms the switch's lock is
                    never granted while two of them overlap).
    tsmove_online_cancel
                    the same with pg_tsmove.switch_cancel_blockers_after =
                    5s: once the switch has been blocked 5 s, each attempt
                    cancels the SELECTs that hold B, then takes the lock.
    tsmove_quiesce  mode => 'quiesce' (switch_lock_timeout = 30s too): writes
                    to B wait during the copy (the essay's method 1, quiesce
                    and copy).
    alter           ALTER TABLE b SET TABLESPACE tsb2; ALTER INDEX b_pkey SET
                    TABLESPACE tsb2 (existing DDL, the essay's method 2
                    analogue).
    repack          pg_repack --no-order --table=public.b --tablespace=tsb2
                    --moveidx (online rewrite by an external tool).
    autopilot       nobody names what to move: the autopilot (pg_tsmove.autopilot)
                    watches the four streams in propose mode from the start,
                    is switched on when the transition starts, and must move
                    A or B to TSB2 on HDB by itself (its only policy:
                    pg_tsmove.autopilot_targets = tsb2, the new disk).  Its
                    decisions, predicted and measured benefit are kept.
    control         nothing moves: the streams run on for --control-s
                    seconds (by default as long as the transition timeout,
                    so that both draw their worst 5 s from as many
                    windows).  The control every other row is read
                    against: what the workload does to itself in the same
                    phase (autovacuum of A and B comes due about when the
                    transition starts, at 560 updates a second each, and
                    dips the streams about as deep as the autopilot's move
                    of A).
    offline_copy    stop the server, copy TSB's directory to HDB, repoint
                    pg_tblspc/<oid>, start (the storage-level way, the
                    essay's method 3 analogue, but with downtime: PostgreSQL
                    sees a path, not a volume that LVM could move under it).
"""

import os
import subprocess
import time
from dataclasses import dataclass, field

from moves import wait_job_without_snapshot
from pgcluster import PG_BIN


@dataclass
class Transition:
    available: bool = True
    reason: str = ""             # why not available
    start: float = None          # wall clock (epoch s)
    end: float = None
    finished: bool = False       # B's data is on HDB (the control: ran its time)
    error: str = None
    details: dict = field(default_factory=dict)


@dataclass
class Method:
    key: str
    label: str
    essay: str                  # which of the essay's scenarios it stands for
    run: object                 # function(run) -> Transition
    available: object = None    # function(cluster) -> None or reason
    moves_tablespace: bool = False   # TSB's location changes (not B's tablespace)
    server_conf: tuple = ()          # postgresql.conf lines for this method's run
    after_settle: object = None      # function(run) -> dict, before the streams stop
    is_control: bool = False         # moves nothing: what the others are read against


# ---------------------------------------------------------------------------
# pg_tsmove

def _tsmove_jobs(cluster, job):
    """The table's job and the index jobs queued behind it."""
    return [r[0] for r in cluster.sql(
        "SELECT job_id FROM tsmove.job WHERE job_id = %s OR parent_job = %s "
        "ORDER BY job_id", (job, job))]


def _job_rows(cluster, jobs):
    cols = ("job_id", "relname", "mode", "state", "blocks_total", "blocks_copied",
            "blocks_recopied", "bytes_written", "wal_bytes", "switch_attempts",
            "lock_wait_ms", "switch_ms", "started_at", "finished_at", "error")
    rows = cluster.sql("SELECT " + ", ".join(cols) + " FROM tsmove.jobs "
                       "WHERE job_id = ANY(%s) ORDER BY job_id", (jobs,))
    out = []
    for r in rows:
        d = dict(zip(cols, r))
        for k in ("started_at", "finished_at"):
            d[k] = d[k].isoformat() if d[k] is not None else None
        for k in ("lock_wait_ms", "switch_ms"):
            d[k] = float(d[k]) if d[k] is not None else None
        out.append(d)
    return out


def _wait_jobs(run, first_job, tr):
    """Wait for the job and the jobs queued behind it, until the transition
    timeout; on timeout cancel them (the cancel reaches the queued ones)."""
    deadline = tr.start + run.transition_timeout
    jobs = [first_job] + [j for j in _tsmove_jobs(run.cluster, first_job)
                          if j != first_job]
    states = {}
    for job in jobs:
        left = max(1.0, deadline - time.time())
        states[job] = wait_job_without_snapshot(run.cluster, job, left)
        if states[job] != "done":
            break
    tr.end = time.time()
    if all(states.get(j) == "done" for j in jobs):
        tr.finished = True
    else:
        tr.error = "jobs %s ended as %s after %.0f s" % (
            jobs, states, tr.end - tr.start)
        if any(s not in ("done", "failed", "cancelled") for s in states.values()):
            # what tsmove.jobs told the DBA at that moment: who blocks, what to do
            said = [r for r in _job_rows(run.cluster, jobs)
                    if r["state"] not in ("done", "failed", "cancelled")]
            tr.error = ("not finished within the transition timeout (%d s); "
                        "cancelled" % run.transition_timeout)
            if said and said[0]["error"]:
                tr.error += "; tsmove.jobs said then: %s" % said[0]["error"]
            run.cluster.sql_scalar("SELECT tsmove.cancel(%s)", (first_job,))
            for job in jobs:
                wait_job_without_snapshot(run.cluster, job, 120)
    tr.details["jobs"] = _job_rows(run.cluster, jobs)
    return tr


def _sql_rate(rate):
    """max_rate_mb as SQL text: NULL means pg_tsmove.max_rate_mb."""
    return "NULL" if rate is None else str(rate)


def tsmove_move(mode):
    def run_move(run):
        tr = Transition(start=time.time())
        job = run.cluster.sql_scalar(
            "SELECT tsmove.move('public.b', 'tsb2', mode => %s, "
            "max_rate_mb => %s::numeric, with_indexes => true)", (mode, run.tsmove_rate_mb))
        tr.details["call"] = ("SELECT tsmove.move('public.b', 'tsb2', mode => '%s', "
                              "max_rate_mb => %s, with_indexes => true)"
                              % (mode, _sql_rate(run.tsmove_rate_mb)))
        return _wait_jobs(run, job, tr)
    return run_move


RELOCATE_SIGNATURE = "tsmove.relocate_tablespace(name,text,numeric)"


def relocate_available(cluster):
    if cluster.sql_scalar("SELECT to_regprocedure(%s) IS NOT NULL",
                          (RELOCATE_SIGNATURE,)):
        return None
    return "not available in this build (no %s)" % RELOCATE_SIGNATURE


def run_relocate(run):
    new_location = os.path.join(run.disks.hdb, "tsb")
    os.makedirs(new_location, mode=0o700)
    run.chown(new_location)
    tr = Transition(start=time.time())
    job = run.cluster.sql_scalar(
        "SELECT tsmove.relocate_tablespace('tsb', %s, %s::numeric)",
        (new_location, run.tsmove_rate_mb))
    tr.details["call"] = ("SELECT tsmove.relocate_tablespace('tsb', '%s', %s)"
                          % (new_location, _sql_rate(run.tsmove_rate_mb)))
    _wait_jobs(run, job, tr)
    location = run.cluster.sql_scalar(
        "SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = 'tsb'")
    tr.details["location_after"] = location
    if tr.finished:
        run.cluster.tablespaces["tsb"] = location
        if location != new_location:
            tr.finished = False
            tr.error = "job done but tsb is at %s, not %s" % (location, new_location)
    return tr


# ---------------------------------------------------------------------------
# existing ways

def run_alter(run):
    tr = Transition(start=time.time())
    statements = ["ALTER TABLE b SET TABLESPACE tsb2",
                  "ALTER INDEX b_pkey SET TABLESPACE tsb2"]
    tr.details["call"] = "; ".join(statements)
    try:
        with run.cluster.conn() as conn:
            conn.execute("SET statement_timeout = '%ds'" % run.transition_timeout)
            for st in statements:
                conn.execute(st)
        tr.finished = True
    except Exception as e:
        tr.error = str(e).strip()
    tr.end = time.time()
    return tr


def repack_available(cluster):
    if not _repack_exe():
        return "not available in this build (pg_repack is not installed)"
    if not cluster.sql_scalar("SELECT count(*) FROM pg_available_extensions "
                              "WHERE name = 'pg_repack'"):
        return ("not available in this build (no pg_repack for PostgreSQL %s)"
                % cluster.sql_scalar("SHOW server_version"))
    return None


def _repack_exe():
    exe = os.path.join(PG_BIN, "pg_repack")
    if os.path.exists(exe):
        return exe
    from shutil import which
    return which("pg_repack")


def run_repack(run):
    c = run.cluster
    argv = [_repack_exe(), "--no-order", "--table=public.b", "--tablespace=tsb2",
            "--moveidx", "-h", c.socket_dir, "-p", str(c.port), "-U", "postgres",
            "-d", "postgres"]
    tr = Transition(start=time.time())
    tr.details["call"] = "pg_repack --no-order --table=public.b --tablespace=tsb2 --moveidx"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True,
                              timeout=run.transition_timeout)
        tr.details["output"] = (proc.stdout + proc.stderr).strip()[-2000:]
        if proc.returncode == 0:
            tr.finished = True
        else:
            tr.error = "pg_repack exited %d: %s" % (proc.returncode,
                                                    tr.details["output"][-500:])
    except subprocess.TimeoutExpired:
        tr.error = ("pg_repack did not finish within the transition timeout "
                    "(%d s); killed" % run.transition_timeout)
    tr.end = time.time()
    return tr


# ---------------------------------------------------------------------------
# the autopilot

AUTOPILOT_CONF = (
    "pg_tsmove.autopilot = propose",          # watching from the start
    "pg_tsmove.autopilot_interval = '5s'",
    "pg_tsmove.autopilot_evidence = '30s'",   # the warm-up holds two windows of it
    "pg_tsmove.autopilot_targets = 'tsb2'",   # where it may go: the new disk
    "pg_tsmove.autopilot_min_read_mb = 8",
    "pg_tsmove.relation_map_refresh = '5s'",
    "pg_tsmove.sample_interval = '2s'",       # history rows short enough for the window
    "pg_tsmove.history_interval = '6s'",
)
DECISION_COLUMNS = ("decision_id", "decided_at", "last_seen_at", "times", "mode", "action",
                    "relation", "kind", "source_tablespace", "target_tablespace", "reason",
                    "predicted_benefit_pct", "job_id", "measured_benefit_pct", "verdict",
                    "reason_code", "evidence", "measured")


def decision_log(cluster):
    rows = cluster.sql("SELECT " + ", ".join(DECISION_COLUMNS) +
                       " FROM tsmove.decisions ORDER BY decision_id")
    out = []
    for r in rows:
        d = dict(zip(DECISION_COLUMNS, r))
        for k in ("decided_at", "last_seen_at"):
            d[k] = d[k].timestamp() if d[k] is not None else None
        for k in ("predicted_benefit_pct", "measured_benefit_pct"):
            d[k] = float(d[k]) if d[k] is not None else None
        if d["evidence"]:
            d["evidence"] = {k: (float(v) if isinstance(v, (int, float)) or
                                 (isinstance(v, str) and v.replace(".", "", 1).lstrip("-").isdigit())
                                 else v)
                             for k, v in d["evidence"].items()
                             if k in ("relation", "kind", "partner", "source_device", "target_device",
                                      "source_util_pct", "target_util_pct", "source_util_after_pct",
                                      "target_util_after_pct", "source_await_ms",
                                      "source_await_after_ms", "capacity_gain_pct", "benefit_pct",
                                      "read_share_pct", "evidence_mb", "coaccess_mb_separated",
                                      "relation_mb")}
        out.append(d)
    return out


def share_audit(cluster):
    """What the prediction's shares are made of, at this moment: each
    relation's reads from outside shared buffers (pg_statio), each
    tablespace's totals and its last window (tsmove.tablespace_io), and
    the candidates' shares and predictions."""
    rel = cluster.sql(
        "SELECT relname, heap_blks_read + coalesce(toast_blks_read, 0), "
        "coalesce(idx_blks_read, 0) FROM pg_statio_user_tables ORDER BY 1")
    spc = cluster.sql(
        "SELECT tablespace, device, data_blocks_read, index_blocks_read, "
        "round(data_blocks_read_s + index_blocks_read_s), round(util_pct), stats_reset "
        "FROM tsmove.tablespace_io WHERE device IS NOT NULL ORDER BY 1")
    cand = cluster.sql(
        "SELECT relation::text, target_tablespace, read_share_pct, source_util_pct, "
        "benefit_pct FROM tsmove.advise_candidates(8, '30s') ORDER BY 1, 2")
    hist = cluster.sql(
        "SELECT DISTINCT ON (device, start_time) device, extract(epoch FROM start_time), "
        "round(util_pct::numeric, 1), round(reads_s::numeric), round(read_kb_s::numeric), "
        "round(writes_s::numeric), round(write_kb_s::numeric), round(r_await_ms::numeric, 2), "
        "round(w_await_ms::numeric, 2), round((data_blocks_read_s + index_blocks_read_s)::numeric) "
        "FROM tsmove.tablespace_io_history WHERE device IS NOT NULL "
        "AND start_time > now() - interval '4 minutes' ORDER BY device, start_time")
    return {"at": time.time(),
            "history": [[r[0]] + [float(x) if x is not None else None for x in r[1:]] for r in hist],
            "relations": [[r[0], int(r[1]), int(r[2])] for r in rel],
            "tablespaces": [[r[0], r[1], int(r[2] or 0), int(r[3] or 0), float(r[4] or 0),
                             float(r[5] or 0), str(r[6])] for r in spc],
            "candidates": [[r[0], r[1]] + [float(x) if x is not None else None for x in r[2:]]
                           for r in cand]}


def run_autopilot(run):
    cl = run.cluster
    tr = Transition(start=time.time())
    tr.details["share_audit"] = [share_audit(cl)]
    cl.sql("ALTER SYSTEM SET pg_tsmove.autopilot = 'on'")
    cl.sql("SELECT pg_reload_conf()")
    try:
        tr = _autopilot_transition(run, tr)
    finally:
        if not tr.finished:
            # No move, or the harness cancelled it: back to watching, or the
            # autopilot moves a table in the settle phase and the placement
            # check reads that as its own failure.
            cl.sql("ALTER SYSTEM SET pg_tsmove.autopilot = 'propose'")
            cl.sql("SELECT pg_reload_conf()")
    return tr


def _autopilot_transition(run, tr):
    """Wait for the autopilot's move and for its end (run_autopilot)."""
    cl = run.cluster
    deadline = tr.start + run.transition_timeout
    started = None
    while time.time() < deadline and started is None:
        started = next((d for d in decision_log(cl) if d["action"] == "started"), None)
        if started is None:
            time.sleep(1)
    log = decision_log(cl)
    proposals = [d for d in log if d["action"] == "proposed"]
    tr.details["first_proposal_s"] = (proposals[0]["decided_at"] - run.t_streams_start
                                      if proposals else None)
    if started is None:
        tr.end = time.time()
        tr.error = "the autopilot started no move within the transition timeout (%d s)" % (
            run.transition_timeout)
        tr.details["decisions"] = log
        return tr
    tr.details["decision_s"] = started["decided_at"] - run.t_streams_start
    tr.details["decision_after_on_s"] = started["decided_at"] - tr.start
    tr.details["moved"] = started["relation"].split(".")[-1]
    tr.details["call"] = "the autopilot: tsmove.move(%s, %s) as decision %d" % (
        started["relation"], started["target_tablespace"], started["decision_id"])
    return _wait_jobs(run, started["job_id"], tr)


def autopilot_after_settle(run, wait_s=60):
    """The decision log once the autopilot has measured its move (the window
    after the move must be over first)."""
    deadline = time.time() + wait_s
    while True:
        log = decision_log(run.cluster)
        done = [d for d in log if d["action"] == "done"]
        if (done and all(d["verdict"] for d in done)) or time.time() > deadline or \
                not any(d["action"] == "started" for d in log):
            return {"decisions": log, "share_audit_after": share_audit(run.cluster)}
        time.sleep(2)


# ---------------------------------------------------------------------------
# a move the DBA names, with the prediction checked against the outcome

# the relation the DBA moves; "auto": advise_candidates()' first candidate
# for TSB2, recommended or not
ADVISED_RELATION = os.environ.get("TSM_EVAL_ADVISED", "public.a")
ADVISED_CONF = tuple(c for c in AUTOPILOT_CONF if not c.startswith("pg_tsmove.autopilot"))


def run_advised(run):
    """Read advise_candidates()' prediction for moving ADVISED_RELATION to
    TSB2 (whatever its verdict, with no least volume of reads), then move
    it: the prediction of a move the autopilot might not make, for
    autopilot_measure() to check."""
    cl = run.cluster
    tr = Transition(start=time.time())
    tr.details["share_audit"] = [share_audit(cl)]
    rows = cl.sql("SELECT benefit_pct, source_util_pct, source_util_after_pct, "
                  "target_util_pct, target_util_after_pct, read_share_pct, verdict_code, "
                  "relation::text "
                  "FROM tsmove.advise_candidates(0, '30s') WHERE target_tablespace = 'tsb2' "
                  "AND (%s = 'auto' OR relation = to_regclass(%s)) "
                  "ORDER BY verdict_code NULLS FIRST, benefit_pct DESC",
                  (ADVISED_RELATION, ADVISED_RELATION))
    row = [r[:7] for r in rows[:1]]
    relation = rows[0][7] if rows else ADVISED_RELATION
    if relation == "auto":
        tr.end = time.time()
        tr.error = "advise_candidates() weighed no move to tsb2"
        return tr
    if "." not in relation:
        relation = "public." + relation
    tr.details["prediction"] = ([float(x) if x is not None and not isinstance(x, str) else x
                                 for x in row[0]] if row else None)
    run.advised_read_share_pct = tr.details["prediction"][5] if row else None
    job = cl.sql_scalar("SELECT tsmove.move(%s, 'tsb2')", (relation,))
    tr.details["advised_job"] = job
    tr.details["moved"] = relation.split(".")[-1]
    tr.details["call"] = "SELECT tsmove.move('%s', 'tsb2')" % relation
    return _wait_jobs(run, job, tr)


def advised_after_settle(run):
    """autopilot_measure() of the advised move, once its window after (two
    30-s windows and the relation map's 5 s after its end) is over."""
    job, finished = run.cluster.sql(
        "SELECT job_id, extract(epoch FROM finished_at) FROM tsmove.job "
        "WHERE parent_job IS NULL ORDER BY job_id DESC LIMIT 1")[0]
    deadline = (float(finished) if finished is not None else time.time()) + 70
    while True:
        # the share its prediction saw, for equal work per device
        share = getattr(run, "advised_read_share_pct", None)
        row = run.cluster.sql("SELECT benefit_pct, measured FROM tsmove.autopilot_measure(%s, '30s', %s::numeric)",
                              (job, share if share and share > 0 else None))
        if (row and row[0][0] is not None) or time.time() > deadline:
            break
        time.sleep(2)
    return {"measured_benefit_pct": float(row[0][0]) if row and row[0][0] is not None else None,
            "measured": row[0][1] if row else None,
            "share_audit_after": share_audit(run.cluster)}


def run_offline_copy(run):
    """Stop, copy, relink, start: every stream waits for the whole copy."""
    c = run.cluster
    oid, old = c.sql("SELECT oid, pg_tablespace_location(oid) FROM pg_tablespace "
                     "WHERE spcname = 'tsb'")[0]
    new = os.path.join(run.disks.hdb, "tsb")
    link = os.path.join(c.data_dir, "pg_tblspc", str(oid))
    tr = Transition(start=time.time())
    tr.details["call"] = ("pg_ctl stop -m fast; cp -a %s %s; sync; "
                          "ln -sfn %s pg_tblspc/%d; pg_ctl start" % (old, new, new, oid))
    run.streams.pause()
    c.stop("fast")
    t_copy = time.time()
    # In the server's cgroups: the copy competes for the same throttled disks.
    subprocess.run(run.disks.in_cgroups(
        ["sh", "-c", 'cp -a "$1" "$2" && sync -f "$2"', "sh", old, new]), check=True)
    tr.details["copy_s"] = round(time.time() - t_copy, 2)
    tmp = link + ".new"
    os.symlink(new, tmp)
    os.rename(tmp, link)
    fd = os.open(os.path.dirname(link), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    run.start_server()
    c.tablespaces["tsb"] = new
    run.streams.resume()
    subprocess.run(["rm", "-rf", old], check=True)
    tr.end = time.time()
    tr.finished = True
    return tr


def run_control(run):
    """Nothing moves: the transition is the same phase of the streams,
    untouched, for run.control_s seconds."""
    tr = Transition(start=time.time())
    tr.details["call"] = "nothing: the streams run on for %d s" % run.control_s
    tr.details["moved"] = ""            # checks: every relation stays on HDA
    time.sleep(run.control_s)
    tr.end = time.time()
    tr.finished = True
    return tr


# Long enough for the SELECTs running when the switch asks for its lock to end.
PATIENT_SWITCH = "pg_tsmove.switch_lock_timeout = '30s'"
# The other way out: cancel the SELECTs that keep blocking the switch.
CANCEL_BLOCKERS = "pg_tsmove.switch_cancel_blockers_after = '5s'"

METHODS = [
    Method("relocate", "tsmove.relocate_tablespace(tsb), switch admits readers",
           "the container move the essay set out to build (section 4, "
           "dual-write)", run_relocate, relocate_available, moves_tablespace=True,
           server_conf=("pg_tsmove.relocation_switch_admits_readers = on",)),
    Method("relocate_default", "tsmove.relocate_tablespace(tsb), default settings",
           "the container move with the safe switch: AccessExclusiveLock, which "
           "overlapping readers can starve", run_relocate, relocate_available,
           moves_tablespace=True),
    Method("tsmove_online", "tsmove.move(b), online",
           "per-relation dual-write move", tsmove_move("online")),
    Method("tsmove_online_wait", "tsmove.move(b), online, switch_lock_timeout 30s",
           "per-relation dual-write move, switch waits for readers",
           tsmove_move("online"), server_conf=(PATIENT_SWITCH,)),
    Method("tsmove_online_cancel", "tsmove.move(b), online, switch_cancel_blockers_after 5s",
           "per-relation dual-write move, switch cancels the readers that block it",
           tsmove_move("online"), server_conf=(CANCEL_BLOCKERS,)),
    Method("tsmove_quiesce", "tsmove.move(b), quiesce, switch_lock_timeout 30s",
           "method 1: quiesce and copy", tsmove_move("quiesce"),
           server_conf=(PATIENT_SWITCH,)),
    Method("alter", "ALTER TABLE/INDEX SET TABLESPACE",
           "method 2 analogue: existing DDL", run_alter),
    Method("repack", "pg_repack --tablespace --moveidx",
           "online rewrite by an external tool", run_repack, repack_available),
    Method("autopilot", "the autopilot decides (propose, then on)",
           "the essay's section 5: measure, decide by policy, act, report",
           run_autopilot, server_conf=AUTOPILOT_CONF,
           after_settle=autopilot_after_settle),
    Method("advised", "the DBA moves %s to TSB2 (prediction checked)" % (
               ADVISED_RELATION if ADVISED_RELATION != "auto" else "the first candidate"),
           "the autopilot's model, checked on a move it need not choose",
           run_advised, server_conf=ADVISED_CONF,
           after_settle=advised_after_settle),
    Method("control", "nothing moves (control)",
           "none: what the streams do to themselves meanwhile", run_control,
           is_control=True),
    Method("offline_copy", "stop, copy TSB's directory, relink, start",
           "method 3 analogue: below the database (here offline)",
           run_offline_copy, moves_tablespace=True),
]
