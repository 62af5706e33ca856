"""Shared parts of pg_tsmove's benchmarks (bench_move.py, bench_relocate.py).

    bench = Pgbench(cluster, seconds, workdir)     # pgbench TPC-B, 4 clients, -P 1, --log
    ...
    bench.wait().window(start, end)                 # TPS, max latency, failures of a window
    sampler = Sampler(cluster, bench.t0); sampler.start()   # CPU %, disk MB/s, job progress
    floor = PacedCopier(files, scratch_dir, rate_mb_s); floor.start(); floor.join()

PacedCopier is the floor each figure is read against: the same bytes copied
by a plain process, no PostgreSQL involved, at a given rate, with the
kernel's writeback started every 64 blocks and an fsync at the end, as
pg_tsmove's sink does.  What it costs pgbench is what writing those bytes
on this disk costs, whoever writes them.
"""

import ctypes
import datetime
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

from pgcluster import PG_BIN

BLOCK = 8192


_libc = ctypes.CDLL(None, use_errno=True)
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd, offset, nbytes):
    """sync_file_range(SYNC_FILE_RANGE_WRITE): start the kernel's writeback
    of a range, as pg_tsmove's sink and checkpoint_flush_after do (Python's
    os module has no sync_file_range)."""
    _libc.sync_file_range(ctypes.c_int(fd), ctypes.c_longlong(offset),
                          ctypes.c_longlong(nbytes),
                          ctypes.c_uint(_SYNC_FILE_RANGE_WRITE))


def log(msg):
    print("[%s] %s" % (datetime.datetime.now().strftime("%H:%M:%S"), msg),
          flush=True)


def wal_lsn(c):
    return c.sql_scalar("SELECT pg_current_wal_insert_lsn()::text")


def wal_diff(c, a, b):
    return int(c.sql_scalar("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)",
                            (b, a)))


class Pgbench:
    def __init__(self, c, seconds, workdir):
        self.log_dir = tempfile.mkdtemp(prefix="pgbench_log_", dir=workdir)
        self.argv = [os.path.join(PG_BIN, "pgbench"), "-n", "-b", "tpcb-like",
                     "-c", "4", "-j", "2", "-T", str(seconds), "-P", "1",
                     "--log", "--log-prefix", os.path.join(self.log_dir, "tx"),
                     c.conninfo()]
        self.seconds = seconds
        self.t0 = time.time()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def wait(self):
        out, err = self.proc.communicate(timeout=self.seconds + 120)
        self.t_end = time.time()
        self.stdout, self.stderr = out, err
        self.rc = self.proc.returncode
        # (end_epoch_s, latency_s or None if failed)
        self.tx = []
        for fname in os.listdir(self.log_dir):
            with open(os.path.join(self.log_dir, fname)) as f:
                for line in f:
                    p = line.split()
                    if len(p) < 6:
                        continue
                    end = int(p[4]) + int(p[5]) / 1e6
                    lat = int(p[2]) / 1e6 if p[2].isdigit() else None
                    self.tx.append((end, lat))
        self.tx.sort()
        # the end of the load: a move that outlasts pgbench is measured
        # up to here, not to when wait() was called
        self.t_last_tx = self.tx[-1][0] if self.tx else self.t_end
        shutil.rmtree(self.log_dir, ignore_errors=True)
        return self

    def summary_number(self, pattern, cast=float):
        m = re.search(pattern, self.stdout, re.MULTILINE)
        return cast(m.group(1)) if m else None

    def window(self, start, end):
        """TPS of transactions completed in [start, end]; max latency and
        failures of transactions that overlapped it."""
        done = 0
        failed = 0
        worst = 0.0
        for t_end, lat in self.tx:
            if start <= t_end <= end:
                if lat is None:
                    failed += 1
                else:
                    done += 1
            if lat is not None and t_end >= start and t_end - lat <= end:
                worst = max(worst, lat)
        length = end - start
        return {"seconds": length, "transactions": done, "failed": failed,
                "tps": done / length if length > 0 else None,
                "max_latency_ms": worst * 1000.0}

    def bracketed_baseline(self, start, end, seconds, gap, min_after):
        """The baseline of a disturbance in [start, end]: the seconds before
        it and the seconds from gap after it, pooled, so that a drift of the
        load over the run does not read as the disturbance's cost.  The
        after-window is left out when less than min_after of load remains.
        Returns (baseline, before, after or None)."""
        before = self.window(start - seconds, start)
        after_start = end + gap
        after_end = min(after_start + seconds, self.t_last_tx)
        if after_end - after_start < min_after:
            return before, before, None
        after = self.window(after_start, after_end)
        pooled = {"seconds": before["seconds"] + after["seconds"],
                  "transactions": before["transactions"] + after["transactions"],
                  "max_latency_ms": max(before["max_latency_ms"], after["max_latency_ms"])}
        pooled["tps"] = pooled["transactions"] / pooled["seconds"]
        return pooled, before, after

    def top_latencies(self, start, end, n=8):
        """The n largest latencies of transactions overlapping [start, end]:
        (latency ms, completion time in s relative to end)."""
        lat = sorted(((l, e) for e, l in self.tx if l is not None
                      and e >= start and e - l <= end), reverse=True)[:n]
        return [(round(l * 1000, 1), round(e - end, 3)) for l, e in lat]

    def progress(self):
        return [(float(m.group(1)), float(m.group(2)))
                for m in re.finditer(r"^progress: ([\d.]+) s, ([\d.]+) tps",
                                     self.stderr, re.MULTILINE)]


class Sampler(threading.Thread):
    """Once a second during a loaded run: CPU busy % of the machine (from
    /proc/stat), disk writes (from /proc/diskstats, whole disk) and the live
    counters of a running tsmove job (tsmove.job_progress())."""

    def __init__(self, c, t0):
        super().__init__(daemon=True)
        self.c, self.t0 = c, t0
        self.samples = []
        self.stop = threading.Event()
        self.disk = None
        try:
            src = subprocess.run(["df", "--output=source", c.data_dir],
                                 capture_output=True, text=True).stdout.split()[-1]
            self.disk = os.path.basename(src)
        except Exception:
            pass

    @staticmethod
    def cpu():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v) - idle, sum(v)

    def sectors_written(self):
        with open("/proc/diskstats") as f:
            for line in f:
                p = line.split()
                if p[2] == self.disk:
                    return int(p[9])
        return 0

    def run(self):
        busy0, tot0 = self.cpu()
        sec0 = self.sectors_written()
        last = time.time()
        try:
            conn = self.c.conn()
        except Exception:
            conn = None
        while not self.stop.wait(1.0):
            now = time.time()
            busy, tot = self.cpu()
            sec = self.sectors_written()
            s = {"t": round(now - self.t0, 2),
                 "cpu_busy_pct": round(100.0 * (busy - busy0) / max(1, tot - tot0), 1),
                 "disk_write_mb_s": round((sec - sec0) * 512 / 1e6 / (now - last), 1)}
            busy0, tot0, sec0, last = busy, tot, sec, now
            if conn is not None:
                try:
                    row = conn.execute(
                        "SELECT state, blocks_copied, blocks_recopied, "
                        "dirty_backlog, rate_mb_s, pace_mb_s FROM tsmove.job_progress()"
                    ).fetchone()
                    if row:
                        s["job"] = list(row)
                except Exception as e:
                    s["job_error"] = str(e)
            self.samples.append(s)
        if conn is not None:
            conn.close()

    def mean(self, key, start, end):
        # a sample at t covers the second (t - 1, t]
        v = [s[key] for s in self.samples if s["t"] > start and s["t"] - 1 < end]
        return sum(v) / len(v) if v else None


class PacedCopier(threading.Thread):
    """Copy files into directory dest at rate_mb_s (0: as fast as it can),
    in 64-block chunks, starting writeback of each chunk and fsyncing each
    file at its end, and every fsync_every bytes if given; stop after
    max_seconds if given (the next file is not started, the current one is
    cut short).  After join(): bytes, seconds, rate_mb_s."""

    CHUNK = 64 * BLOCK

    def __init__(self, files, dest, rate_mb_s, max_seconds=None, fsync_every=None):
        super().__init__(daemon=True)
        self.files, self.dest, self.rate = files, dest, rate_mb_s
        self.max_seconds, self.fsync_every = max_seconds, fsync_every
        self.bytes = 0
        self.seconds = None
        self.start_time = self.end_time = None

    def _out_of_time(self):
        return self.max_seconds is not None and time.time() - self.start_time >= self.max_seconds

    def run(self):
        os.makedirs(self.dest, exist_ok=True)
        self.start_time = time.time()
        since_sync = 0
        for i, path in enumerate(self.files):
            out = os.open(os.path.join(self.dest, "%06d" % i),
                          os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(path, "rb") as src:
                offset = 0
                while not self._out_of_time():
                    chunk = src.read(self.CHUNK)
                    if not chunk:
                        break
                    os.pwrite(out, chunk, offset)
                    start_writeback(out, offset, len(chunk))
                    offset += len(chunk)
                    self.bytes += len(chunk)
                    since_sync += len(chunk)
                    if self.fsync_every and since_sync >= self.fsync_every:
                        os.fsync(out)
                        since_sync = 0
                    if self.rate > 0:
                        due = self.start_time + self.bytes / (self.rate * 2**20)
                        time.sleep(max(0.0, due - time.time()))
            os.fsync(out)
            os.close(out)
            if self._out_of_time():
                break
        self.end_time = time.time()
        self.seconds = self.end_time - self.start_time
        shutil.rmtree(self.dest, ignore_errors=True)

    @property
    def rate_mb_s(self):
        return self.bytes / 2**20 / self.seconds if self.seconds else None


def fmt(v, spec="%.2f"):
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, (int,)) and spec == "%.2f":
        return str(v)
    return spec % v


def verdict(ok):
    if ok is None:
        return "n/a"
    return "PASS" if ok else "MISS"


def so_mtime():
    try:
        libdir = subprocess.run([os.path.join(PG_BIN, "pg_config"), "--pkglibdir"],
                                capture_output=True, text=True).stdout.strip()
        path = os.path.join(libdir or "/usr/lib/postgresql/15/lib", "pg_tsmove.so")
        return datetime.datetime.fromtimestamp(os.path.getmtime(path)).isoformat(
            timespec="seconds")
    except Exception:
        return None


def git_head():
    """The commit of this tree, "-dirty" if its code (src/, control/, the
    Makefile, untracked files too) differs from it: the reports the
    harnesses write into the tree do not count, and the installed build is
    the caller's (make install from this tree first).  None without git or
    a repository.  As root (under sudo) git refuses a tree another user
    owns unless told it is safe."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args):
        try:
            return subprocess.run(["git", "-c", "safe.directory=*", "-C", root] + list(args),
                                  capture_output=True, text=True)
        except OSError:
            return None
    head = git("rev-parse", "--short", "HEAD")
    if head is None or head.returncode != 0 or not head.stdout.strip():
        return None
    code = git("status", "--porcelain", "--", "src", "control", "Makefile")
    dirty = code is not None and code.returncode == 0 and code.stdout.strip() != ""
    return head.stdout.strip() + ("-dirty" if dirty else "")


def server_log_problems(c):
    pat = re.compile(r"\b(WARNING|ERROR|FATAL|PANIC):")
    return [l for l in c.log_contents().splitlines() if pat.search(l)]
