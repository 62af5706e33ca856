"""The evaluation harness (test/eval/) kept from rotting.

test_eval_smoke runs the whole harness the way a user does, with tiny
tables and a few seconds per phase (about a minute and a half): real
servers, real pgbench streams, every method, the emulated disks when the
machine allows them (as root with loop devices and cgroup v1), and checks
that it produced a report, a JSON series and a plot with a row for every
method, that every available method moved B (or, for the control, moved
nothing) and passed its data checks, and that it left no loop device,
mount or cgroup behind.  The autopilot's row is the exception: with tables
that small nothing is read from disk, so it must not move, and its
decision log must say why.

The other tests check the figures' arithmetic on synthetic streams: the
pro-rata TPM and the stable-state rule.
"""

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EVAL_DIR = os.path.join(HERE, "eval")
sys.path.insert(0, EVAL_DIR)

import disks  # noqa: E402
import methods  # noqa: E402
import report  # noqa: E402
from workload import tpm_window  # noqa: E402

SMOKE_ARGS = ["--rows", "3000", "--query-range", "500", "--warmup-s", "4",
              "--settle-s", "4", "--transition-timeout-s", "40",
              "--disk-size-mb", "256", "--progress-s", "30", "--control-s", "5"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def leftovers(tag):
    """Loop devices, mounts and cgroups whose name contains tag."""
    found = []
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True)
    found += [l for l in losetup.stdout.splitlines() if tag in l]
    with open("/proc/mounts") as f:
        found += [l for l in f if tag in l]
    for root in (disks.BLKIO_ROOT, disks.MEMORY_ROOT):
        for dirpath, dirnames, _ in os.walk(root):
            found += [os.path.join(dirpath, d) for d in dirnames if tag in d]
    return found


def test_eval_smoke(tmp_path):
    out_dir = str(tmp_path)
    proc = subprocess.run([sys.executable, os.path.join(EVAL_DIR, "run_eval.py")]
                          + SMOKE_ARGS + ["--out-dir", out_dir],
                          capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]

    with open(os.path.join(out_dir, "series.json")) as f:
        res = json.load(f)
    with open(os.path.join(out_dir, "report.md")) as f:
        md = f.read()
    with open(os.path.join(out_dir, "tpm.png"), "rb") as f:
        png = f.read()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 10000

    expect_emulated = disks.emulation_unavailable_reason() is None
    assert res["disks"]["emulated"] == expect_emulated, res["disks"]
    assert "Merge Join" in res["plan"] and "Index Scan using b_pkey" in res["plan"]

    by_key = {m["key"]: m for m in res["methods"]}
    assert list(by_key) == [m.key for m in methods.METHODS]
    for i, m in enumerate(methods.METHODS, 1):
        r = by_key[m.key]
        row = [l for l in md.splitlines() if l.startswith("| **%d. %s**" % (i, m.label))]
        assert len(row) == 1, (m.label, md)
        if not r["available"]:
            # Only relocate_tablespace (a build without it) and pg_repack (a
            # major it is not installed for) may be missing, and the row
            # must say so rather than show a figure.
            assert m.key in ("relocate", "relocate_default", "repack"), r
            assert "not available in this build" in row[0]
            continue
        assert r["checks"]["ok"], (m.key, r["checks"])
        assert row[0].rstrip().endswith("| OK |"), row[0]
        # A method either moves B or says why, in the JSON and in the notes
        # under the table (a failed job is a result, and its data checks
        # above still had to pass).  The existing ways always move B here;
        # the control moves nothing.
        tr = r["transition"]
        if m.key in ("alter", "repack", "offline_copy"):
            assert tr["finished"], (m.key, tr)
        if m.key == "autopilot":
            # Tiny tables live in the cache: the autopilot must not move, and
            # its log must say why (the evidence is below its least).
            log = r["after_settle"]["decisions"]
            assert not tr["finished"] and "started no move" in tr["error"], tr
            assert [d for d in log if d["action"] == "skipped"], log
            assert not [d for d in log if d["action"] == "started"], log
            assert r["checks"]["placement"] == {"a": "hda", "a_pkey": "hda",
                                                "b": "hda", "b_pkey": "hda"}, r["checks"]
        elif m.key == "advised":
            # the DBA's move of A alone (the default), its prediction read first
            assert tr["finished"], tr
            assert r["checks"]["placement"] == {"a": "hdb", "a_pkey": "hda",
                                                "b": "hda", "b_pkey": "hda"}, r["checks"]
            assert "prediction" in tr["details"] and "measured_benefit_pct" in r["after_settle"]
        elif m.key == "control":
            # nothing moves, and the checks hold it to that
            assert tr["finished"] and tr["details"]["moved"] == "", tr
            assert r["checks"]["placement"] == {"a": "hda", "a_pkey": "hda",
                                                "b": "hda", "b_pkey": "hda"}, r["checks"]
            assert "x floor" not in row[0], row[0]
        elif tr["finished"]:
            assert r["checks"]["placement"] == {"a": "hda", "a_pkey": "hda",
                                                "b": "hdb", "b_pkey": "hdb"}, r["checks"]
        else:
            assert tr["error"] and tr["error"][:60] in md, (m.key, tr)
        # the jobs were sampled once a second (with tables this small a
        # move may end before the first sample)
        assert r["job_timeline"]["columns"][:3] == ["t", "job_id", "state"], r["job_timeline"]
        groups = r["metrics"]["groups"]
        for g in ("select", "update_a", "update_b"):
            assert groups[g]["after_warmup"] > 0, (m.key, g, groups[g])
            assert groups[g]["final"] > 0, (m.key, g, groups[g])
        assert all(len(r["tpm_1s"][s]) >= 8 for s in
                   ("select1", "select2", "update_a", "update_b")), r["tpm_1s"]
        for s in r["streams"].values():
            assert s["failed"] == 0, (m.key, r["streams"])
    # The offline copy stops the server: the streams must have been
    # restarted after it, and TPM during the stop is zero for updates of B.
    off = by_key["offline_copy"]
    assert all(s["segments"] >= 2 for s in off["streams"].values()), off["streams"]
    assert off["metrics"]["groups"]["update_b"]["lowest_5s_during"] < \
        off["metrics"]["groups"]["update_b"]["after_warmup"]

    tag = os.path.basename(res["disks"]["hda"].rstrip("/").rsplit("/", 1)[0])
    assert tag.startswith(disks.STALE_PREFIX)
    assert leftovers(tag) == []
    assert not os.path.exists(os.path.dirname(res["disks"]["hda"]))


def test_tpm_window_counts_transactions_pro_rata():
    # Two 10-second queries, [0, 10] and [10, 20]; a 10-second window over
    # [5, 15] holds half of each: one transaction in 10 s = 6 TPM.
    starts, ends = np.array([0.0, 10.0]), np.array([10.0, 20.0])
    assert tpm_window(starts, ends, 5.0, 15.0) == 6.0
    assert tpm_window(starts, ends, 0.0, 20.0) == 6.0
    assert tpm_window(starts, ends, 20.0, 30.0) == 0.0
    # Instantaneous transactions count where they end.
    inst = np.array([1.0, 2.0, 3.0])
    assert tpm_window(inst, inst, 0.0, 2.5) == 2 * 60 / 2.5


def synthetic_run(update_b_rates, settle_s=40):
    """A run whose streams do one transaction per second per unit of rate,
    with the rate of update_b changing each second after the transition
    (t_end = 100)."""
    series = {}
    for name in ("select1", "select2", "update_a"):
        ends = np.arange(0.5, 100 + settle_s, 1.0)
        series[name] = (ends - 0.2, ends)
    ends = []
    for second in range(100 + settle_s):
        rate = 1 if second < 100 else update_b_rates[min(second - 100,
                                                           len(update_b_rates) - 1)]
        ends += [second + (k + 0.5) / rate for k in range(rate)] if rate else []
    ends = np.array(ends)
    series["update_b"] = (ends - 0.001, ends)
    return series


def test_time_to_stable_is_when_throughput_recovers():
    settle = 40
    # update_b is at 0 for 6 s after the transition, then back to 1/s.
    series = synthetic_run([0] * 6 + [1], settle)
    final = {g: report.group_tpm(series, g, 100 + settle / 2, 100 + settle)
             for g, _ in report.GROUPS}
    assert final["update_b"] == 60.0
    stable = report.time_to_stable(series, 100.0, settle, final)
    # The first 10 s window with >= 85 % of 60 TPM starts once at most one
    # of its seconds is empty: window [105, 115] has 9 of 10 seconds.
    assert stable == 5.0
    # Already stable at the end of the transition.
    series = synthetic_run([1], settle)
    assert report.time_to_stable(series, 100.0, settle, final) == 0.0
    # Never recovers before the final window: reported as None.
    series = synthetic_run([0] * 30 + [1], settle)
    assert report.time_to_stable(series, 100.0, settle, final) is None


def test_the_lowest_window_is_matched_with_what_the_job_did():
    # update_b at 1/s, except no transaction in [103, 108): the lowest 5 s
    # start at 103
    series = synthetic_run([1, 1, 1, 0, 0, 0, 0, 0, 1])
    tpm, start = report.lowest_window(series, "update_b", 100.0, 115.0)
    assert (tpm, start) == (0.0, 103.0)
    cols = ["t", "job_id", "state", "blocks_copied", "blocks_recopied", "dirty_backlog",
            "bytes_written", "switch_attempts", "lock_wait_ms", "pace_mb_s"]
    rows = [[100.0 + k, 7, "copying" if k < 4 else "catching_up", 100 * k, 10 * k, 0,
             8192 * 110 * k, max(0, k - 4), 20.0 * max(0, k - 4), 4.0] for k in range(12)]
    rows.append([105.0, 8, "copying", 0, 0, 0, 0, 0, None, None])
    got = report.job_in_window({"columns": cols, "rows": rows}, 103.0, 108.0)
    # from the sample at 103 to the one at 108: 5 s of job 7; job 8 only
    # started inside, so its deltas count from its first sample
    assert got[0] == {"job_id": 7, "states": ["catching_up", "copying"], "copied": 500,
                      "recopied": 50, "mb_written": round(8192 * 110 * 5 / 1e6, 1),
                      "switch_attempts": 4, "lock_wait_ms": 80.0, "pace_mb_s": 4.0}, got
    assert got[1]["job_id"] == 8 and got[1]["copied"] == 0 and got[1]["lock_wait_ms"] == 0
    assert report.job_in_window({"columns": cols, "rows": []}, 103.0, 108.0) == []
    assert report.job_in_window(None, 103.0, 108.0) == []
