"""Two emulated disks for the evaluation: HDA and HDB.

The essay's experiment needs two disks, so that moving tablespace TSB from
HDA to HDB separates the tables a merge join reads together.  This machine
has one disk, so as root we build two:

    inner image --losetup --direct-io--> /dev/loopI --mkfs.ext4--> mount B
    B/disk.img  --losetup --direct-io--> /dev/loopO --mkfs.ext4--> mount HDx

throttle each inner loop device with cgroup v1 blkio (IOPS and bandwidth,
reads and writes), and bound the server's memory with a cgroup v1 memory
limit so that the page cache cannot hide the throttled disks.  The
tablespaces live on the outer device.  Two layers, because blk-throttle
holds requests above the device it throttles: a throttled device looks
idle in /proc/diskstats (measured: 15 % utilisation at its IOPS limit).
The outer device's requests stay in flight while the inner one's wait in
the throttle, so the outer device's utilisation, queue and await are
those of a saturated disk (96 % at the limit), which is what
tsmove.tablespace_io, advise() and the autopilot read.  The loop driver
issues the outer device's I/O in the cgroup of the process that asked for
it, so the server's cgroup limits still apply.

    disks = Disks(workdir, DiskLimits(...), mode="auto")
    disks.setup()                      # mounts disks.hda, disks.hdb
    argv = disks.in_cgroups(argv)      # run a program inside the cgroups
    disks.apply_limits(); ...; disks.clear_limits()
    disks.drop_caches()                # remount: no page of HDA/HDB cached
    disks.teardown()                   # idempotent; also on Ctrl-C

What the emulation limits, and what it cannot (cgroup v1):
  * Reads, and writes a process submits itself (O_DIRECT, the writeback an
    fsync() starts), are throttled in the server's blkio cgroup: they are
    charged to the submitting task.
  * Buffered writes are written back later by kernel flusher threads, which
    live in the root cgroup: v1 has no writeback attribution.  We therefore
    put the same per-device limits on the root cgroup too (v1 limits are
    flat, not hierarchical, so that rule applies to root's tasks only, and
    only our loop devices are named).  Background writeback is then
    throttled as well, but through a second budget: a disk can absorb up to
    twice its write limit when the server's own writes and the flusher's
    overlap.
  * The memory cgroup (a child of the caller's memory cgroup) bounds
    shared_buffers plus the page cache of everything the server reads;
    without swap, the limit must leave room for shared memory.
  * Seek time is not emulated: a throttled loop device on a virtual disk
    serves a random read as fast as a sequential one of the same size; only
    the number of requests (IOPS) and bytes are bounded.  Readahead turns
    sequential 8 kB reads into few large requests, so a scan is bounded by
    bandwidth and an index scan in random order by IOPS, as on a disk.
  * The server's WAL and catalogs stay on the machine's disk (as the
    essay's logs stayed off HDA and HDB).

Without root, loop devices or cgroup v1 (mode "auto"), or with mode
"dirs", HDA and HDB are plain directories on one filesystem and
self.warning says that both "disks" are one.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgcluster import processes_under  # noqa: E402

BLKIO_ROOT = "/sys/fs/cgroup/blkio"
MEMORY_ROOT = "/sys/fs/cgroup/memory"
STATE_FILE = "disks.json"
STALE_PREFIX = "pgtsm_eval_"


@dataclass
class DiskLimits:
    """Per-device limits of one emulated disk, and the memory bound."""
    size_mb: int = 3072          # image size (sparse)
    read_iops: int = 6000
    write_iops: int = 6000
    read_mb_s: int = 100
    write_mb_s: int = 100
    memory_mb: int = 448         # server: shared_buffers + page cache + processes


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _run(argv, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(argv),
                                                        proc.returncode,
                                                        proc.stderr.strip()))
    return proc


def _my_memory_cgroup():
    """The caller's cgroup v1 memory directory (our child goes under it, so
    the server stays inside whatever accounting contains us)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                return os.path.join(MEMORY_ROOT, path.lstrip("/"))
    return None


def emulation_unavailable_reason():
    """None if loop devices and cgroup v1 blkio/memory can be used, else why not."""
    if os.geteuid() != 0:
        return "not running as root"
    for path in (os.path.join(BLKIO_ROOT, "blkio.throttle.read_iops_device"),
                 os.path.join(MEMORY_ROOT, "memory.limit_in_bytes")):
        if not os.path.exists(path):
            return "cgroup v1 file %s missing" % path
    if not os.path.exists("/dev/loop-control"):
        return "no /dev/loop-control"
    for prog in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(prog) is None:
            return "%s not found" % prog
    return None


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class Disks:
    """HDA and HDB, emulated or plain; see the module docstring."""

    def __init__(self, workdir, limits, mode="auto"):
        self.workdir = workdir
        self.limits = limits
        self.mode = mode
        self.emulated = False
        self.warning = None
        self.hda = os.path.join(workdir, "hda")
        self.hdb = os.path.join(workdir, "hdb")
        self.loops = {}          # name -> the outer /dev/loopN (the "disk")
        self.layers = []         # every loop device and mount, set-up order
        self.devnums = {}        # name -> "MAJ:MIN"
        self.blkio_cgroup = None
        self.memory_cgroup = None
        self.root_rules = False
        self.limits_on = False

    # ---- set-up and tear-down --------------------------------------------

    def setup(self):
        reason = None
        if self.mode == "dirs":
            reason = "--disks dirs was given"
        else:
            reason = emulation_unavailable_reason()
            if reason and self.mode == "emulate":
                raise RuntimeError("cannot emulate two disks: %s" % reason)
        for d in (self.hda, self.hdb):
            os.makedirs(d, exist_ok=True)
        self._save_state()      # so that a run killed with SIGKILL is found
        if reason:
            self.warning = ("HDA and HDB are plain directories on one "
                            "filesystem (%s): both \"disks\" are one, nothing "
                            "limits I/O or the page cache, so the figures do "
                            "not show what separating the tables buys" % reason)
            return self
        try:
            self._setup_emulation()
        except Exception:
            self.teardown()
            raise
        self.emulated = True
        return self

    def _setup_emulation(self):
        tag = os.path.basename(self.workdir.rstrip("/"))
        self.blkio_cgroup = os.path.join(BLKIO_ROOT, tag)
        parent = _my_memory_cgroup() or MEMORY_ROOT
        self.memory_cgroup = os.path.join(parent, tag)
        self._save_state()      # before anything exists, so a stale run is found
        for name, mount in (("hda", self.hda), ("hdb", self.hdb)):
            # inner: the throttled device, holding the outer's image file
            backing = os.path.join(self.workdir, name + ".backing")
            os.makedirs(backing, exist_ok=True)
            inner = self._loop_filesystem(
                os.path.join(self.workdir, name + ".img"),
                self.limits.size_mb + 64 + self.limits.size_mb // 16, backing)
            st = os.stat(inner)
            self.devnums[name] = "%d:%d" % (os.major(st.st_rdev),
                                            os.minor(st.st_rdev))
            self._save_state()
            # outer: the device the server's files are on
            self.loops[name] = self._loop_filesystem(
                os.path.join(backing, "disk.img"), self.limits.size_mb, mount,
                label="eval_" + name)
            os.chmod(mount, 0o755)
        os.makedirs(self.blkio_cgroup, exist_ok=True)
        os.makedirs(self.memory_cgroup, exist_ok=True)
        self._save_state()
        self.clear_limits()     # a device number reused from a dead run
        _write(os.path.join(self.memory_cgroup, "memory.limit_in_bytes"),
               str(self.limits.memory_mb * 1024 * 1024))

    def _loop_filesystem(self, image, size_mb, mount, label=None):
        """A sparse image of size_mb on a direct-I/O loop device, formatted
        ext4 and mounted at mount; returns the loop device.  Every layer is
        recorded (in set-up order) as soon as it exists, for teardown."""
        with open(image, "wb") as f:
            f.truncate(size_mb * 1024 * 1024)
        loop = _run(["losetup", "--find", "--show", "--direct-io=on",
                     image]).stdout.strip()
        self.layers.append({"loop": loop, "mount": None, "image": image})
        self._save_state()
        _run(["mkfs.ext4", "-q", "-F"] + (["-L", label] if label else []) + [loop])
        _run(["mount", "-o", "noatime", loop, mount])
        self.layers[-1]["mount"] = mount
        self._save_state()
        return loop

    def _save_state(self):
        state = {"pid": os.getpid(), "loops": self.loops, "layers": self.layers,
                 "devnums": self.devnums, "mounts": [self.hda, self.hdb],
                 "blkio_cgroup": self.blkio_cgroup,
                 "memory_cgroup": self.memory_cgroup}
        with open(os.path.join(self.workdir, STATE_FILE), "w") as f:
            json.dump(state, f)

    def teardown(self):
        """Undo everything, whatever state set-up reached.  Processes still in
        the cgroups (a server the caller could not stop) are killed first, or
        the mounts would stay busy."""
        errors = []
        try:
            self.clear_limits()
        except Exception as e:
            errors.append("clearing limits: %s" % e)
        for cg in (self.blkio_cgroup, self.memory_cgroup):
            if cg and os.path.isdir(cg):
                _kill_cgroup_tasks(cg)
        for layer in reversed(self.layers):     # outer layers first
            mount = layer.get("mount")
            if mount and os.path.ismount(mount):
                proc = _run(["umount", mount], check=False)
                if proc.returncode != 0:
                    proc = _run(["umount", "-l", mount], check=False)
                    if proc.returncode != 0:
                        errors.append("umount %s: %s" % (mount, proc.stderr))
            proc = _run(["losetup", "-d", layer["loop"]], check=False)
            if proc.returncode != 0 and "No such device" not in proc.stderr:
                errors.append("losetup -d %s: %s" % (layer["loop"], proc.stderr))
        self.layers = []
        for cg in (self.blkio_cgroup, self.memory_cgroup):
            if cg and os.path.isdir(cg):
                for _ in range(50):
                    try:
                        os.rmdir(cg)
                        break
                    except OSError:
                        time.sleep(0.1)
                else:
                    errors.append("cgroup %s not removed" % cg)
        self.loops, self.emulated = {}, False
        for name in ("hda.img", "hdb.img", STATE_FILE):
            try:
                os.unlink(os.path.join(self.workdir, name))
            except FileNotFoundError:
                pass
        for name in ("hda.backing", "hdb.backing"):
            path = os.path.join(self.workdir, name)
            if os.path.isdir(path) and not os.path.ismount(path):
                shutil.rmtree(path, ignore_errors=True)
        if errors:
            raise RuntimeError("disk emulation clean-up: " + "; ".join(errors))

    # ---- cgroups -----------------------------------------------------------

    def in_cgroups(self, argv):
        """argv run inside the server's cgroups (a no-op without emulation).
        A shell joins the cgroups, then execs argv: its children (pg_ctl, the
        postmaster, every backend) inherit them."""
        if not self.emulated:
            return list(argv)
        joins = "; ".join('echo $$ > "%s"' % os.path.join(cg, "cgroup.procs")
                          for cg in (self.blkio_cgroup, self.memory_cgroup))
        return ["sh", "-c", joins + '; exec "$@"', "sh"] + list(argv)

    def _rule_files(self):
        lim = self.limits
        return {"blkio.throttle.read_iops_device": lim.read_iops,
                "blkio.throttle.write_iops_device": lim.write_iops,
                "blkio.throttle.read_bps_device": lim.read_mb_s * 1024 * 1024,
                "blkio.throttle.write_bps_device": lim.write_mb_s * 1024 * 1024}

    def apply_limits(self):
        """Throttle both inner loop devices in the server's cgroup and, for the
        kernel's background writeback, in the root cgroup."""
        if not self.emulated:
            return
        for cg in (self.blkio_cgroup, BLKIO_ROOT):
            for fname, value in self._rule_files().items():
                for dev in self.devnums.values():
                    _write(os.path.join(cg, fname), "%s %d" % (dev, value))
        self.root_rules = True
        self.limits_on = True

    def clear_limits(self):
        """Remove our rules (a value of 0 deletes a rule)."""
        for cg in (self.blkio_cgroup, BLKIO_ROOT):
            if not cg or not os.path.isdir(cg):
                continue
            for fname in self._rule_files():
                for dev in self.devnums.values():
                    try:
                        _write(os.path.join(cg, fname), "%s 0" % dev)
                    except OSError:
                        pass
        self.root_rules = False
        self.limits_on = False

    def memory_usage_mb(self):
        if not self.emulated:
            return None
        with open(os.path.join(self.memory_cgroup, "memory.max_usage_in_bytes")) as f:
            return int(f.read()) / 2**20

    def drop_caches(self):
        """Forget every cached page of HDA and HDB: unmount and mount again
        (nothing may have a file open there).  Without emulation, nothing."""
        if not self.emulated:
            return
        for name, mount in (("hda", self.hda), ("hdb", self.hdb)):
            _run(["umount", mount])
            _run(["mount", "-o", "noatime", self.loops[name], mount])

    def device_of(self, path):
        """'hda', 'hdb' or None: which disk holds path."""
        dev = os.stat(path).st_dev
        for name, mount in (("hda", self.hda), ("hdb", self.hdb)):
            if os.stat(mount).st_dev == dev and (self.emulated or
                                                 os.path.realpath(path).startswith(
                                                     os.path.realpath(mount) + os.sep)):
                return name
        return None

    def server_conf(self):
        """postgresql.conf lines that tell pg_tsmove what the emulation stands
        for: HDA and HDB are image files on this machine's one disk, which
        its monitoring rightly finds under both loop devices (and would then
        never advise a move from one to the other); each stands for a disk
        of its own."""
        if not self.emulated:
            return []
        return ["pg_tsmove.device_disks = '%s'" % ", ".join(
            "%s:1" % os.path.basename(self.loops[n]) for n in ("hda", "hdb"))]

    def describe(self):
        """Facts for the report."""
        if not self.emulated:
            return {"emulated": False, "warning": self.warning,
                    "hda": self.hda, "hdb": self.hdb}
        return {"emulated": True, "limits": asdict(self.limits),
                "loops": self.loops, "hda": self.hda, "hdb": self.hdb,
                "memory_cgroup": self.memory_cgroup,
                "blkio_cgroup": self.blkio_cgroup}


def _kill_cgroup_tasks(cg):
    try:
        with open(os.path.join(cg, "cgroup.procs")) as f:
            pids = [int(x) for x in f.read().split()]
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(os.path.join(cg, "cgroup.procs")) as f:
            if not f.read().split():
                return
        time.sleep(0.1)


def clean_stale_runs(parent):
    """Tear down what evaluations killed with SIGKILL left behind under
    parent: work directories whose state file names a dead process."""
    cleaned = []
    if not os.path.isdir(parent):
        return cleaned
    for entry in os.listdir(parent):
        workdir = os.path.join(parent, entry)
        state_path = os.path.join(workdir, STATE_FILE)
        if not entry.startswith(STALE_PREFIX) or not os.path.exists(state_path):
            continue
        try:
            with open(state_path) as f:
                state = json.load(f)
        except (OSError, ValueError):
            continue
        if pid_alive(state.get("pid", -1)):
            continue
        survivors = processes_under(workdir)      # a server of the dead run
        for pid in survivors:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        disks = Disks(workdir, DiskLimits())
        disks.loops = state.get("loops", {})
        disks.layers = state.get("layers") or [
            {"loop": loop, "mount": mount} for loop, mount in
            zip(disks.loops.values(), state.get("mounts", []))]
        disks.devnums = state.get("devnums", {})
        disks.blkio_cgroup = state.get("blkio_cgroup")
        disks.memory_cgroup = state.get("memory_cgroup")
        try:
            disks.teardown()
        except RuntimeError:
            pass
        shutil.rmtree(workdir, ignore_errors=True)
        cleaned.append(workdir)
    return cleaned
