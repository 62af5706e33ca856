"""From the streams' logs to the essay's Table 5, a JSON file and plots.

Windows of one method's run (wall clock):

    streams start ... warm-up ... | transition | ... settle ...
                      [baseline ]  [transition]            [final  ]

    baseline    the last half of the warm-up: "TPM after warm-up"
    transition  from the start of the move to its end
    final       the last half of the settle phase: "TPM at final state"

TPM counts each transaction in proportion to the part of its run inside
the window (workload.tpm_window), so a stream of long queries gets a
smooth rate.  The SELECT row is per stream: the mean of the two streams,
as the essay reports it.

Stable state.  Three groups are watched: the two SELECT streams together,
updates of A, updates of B.  A group has reached its stable state at the
first moment after the transition's end from which its TPM over the next
STABLE_WINDOW_S seconds is at least STABLE_FRACTION of its final mean (the
mean of the final window); the scenario's time to reach a stable state is
the latest of the three (windows slide by 1 s).  The rule looks at the
recovery of throughput (the essay's cold bufferpools after a container
move), not at its noise: TPM above the final mean is stable too.  If a
group does not get there before the final window starts, the time is
reported as "> (settle/2) s".
"""

import json
import math

import numpy as np

from workload import tpm_window

STABLE_WINDOW_S = 10.0
STABLE_FRACTION = 0.85
GROUPS = (("select", ("select1", "select2")), ("update_a", ("update_a",)),
          ("update_b", ("update_b",)))
GROUP_LABELS = {"select": "SELECT on A,B (per stream)",
                "update_a": "Update Table A", "update_b": "Update Table B"}


def group_tpm(series, group, t1, t2, per_stream=True):
    names = dict(GROUPS)[group]
    total = sum(tpm_window(series[n][0], series[n][1], t1, t2) for n in names)
    return total / len(names) if per_stream else total


def lowest_window(series, group, t1, t2, width=5.0):
    """(lowest TPM, its window's start) over windows of `width` s (1 s
    steps) inside [t1, t2]; a shorter transition is one window."""
    width = min(width, max(t2 - t1, 1e-3))
    return min((group_tpm(series, group, a, a + width), a)
               for a in window_starts(t1, t2 - width, 1.0))


def lowest_tpm(series, group, t1, t2, width=5.0):
    """Lowest TPM over windows of `width` s inside [t1, t2] (lowest_window)."""
    return lowest_window(series, group, t1, t2, width)[0]


def job_in_window(timeline, t1, t2):
    """What the jobs did between t1 and t2 (epoch s), from the samples of
    run_eval.JobTimeline nearest before t1 and at or before t2: per job,
    its states, blocks copied and re-copied, switch attempts and lock
    wait in that span, and its pace at the end; [] without samples."""
    if not timeline or not timeline.get("rows"):
        return []
    cols = timeline["columns"]
    rows = [dict(zip(cols, r)) for r in timeline["rows"]]
    out = []
    for job in sorted({r["job_id"] for r in rows}):
        mine = [r for r in rows if r["job_id"] == job]
        before = [r for r in mine if r["t"] <= t1] or mine[:1]
        inside = [r for r in mine if t1 < r["t"] <= t2]
        if not inside:
            continue
        a, b = before[-1], inside[-1]

        def delta(k):
            return (b[k] or 0) - (a[k] or 0)
        out.append({"job_id": job,
                    "states": sorted({r["state"] for r in [a] + inside}),
                    "copied": delta("blocks_copied"), "recopied": delta("blocks_recopied"),
                    "mb_written": round(delta("bytes_written") / 1e6, 1),
                    "switch_attempts": delta("switch_attempts"),
                    "lock_wait_ms": round(delta("lock_wait_ms"), 1),
                    "pace_mb_s": b["pace_mb_s"]})
    return out


def window_starts(first, last, step):
    """first, first + step, ... up to last (at least first).  Offsets are
    computed from first: epoch seconds are too large for 1e-9 slack."""
    n = int(np.floor(max(0.0, last - first) / step + 1e-6)) + 1
    return [first + i * step for i in range(n)]


def time_to_stable(series, t_end, settle_s, final_mean):
    """Seconds from t_end until every group is stable (module docstring),
    or None if one is not before the final window starts."""
    last_start = t_end + settle_s / 2.0 - STABLE_WINDOW_S
    if last_start < t_end:
        return 0.0
    worst = 0.0
    for g, _ in GROUPS:
        target = STABLE_FRACTION * final_mean[g]
        for a in window_starts(t_end, last_start, 1.0):
            if group_tpm(series, g, a, a + STABLE_WINDOW_S) >= target:
                worst = max(worst, a - t_end)
                break
        else:
            return None
    return float(worst)


def method_metrics(run_result, settings):
    """Adds the table's figures to one method's result (in place)."""
    series = {n: (np.asarray(s["starts"]), np.asarray(s["ends"]))
              for n, s in run_result["streams"].items()}
    t0 = run_result["t_streams_start"]
    ts, te = run_result["transition"]["start"], run_result["transition"]["end"]
    warm = settings["warmup_s"]
    settle = settings["settle_s"]
    base = (ts - warm / 2.0, ts)
    final = (te + settle / 2.0, te + settle)
    m = {"baseline_window": [base[0] - t0, base[1] - t0],
         "transition_window": [ts - t0, te - t0],
         "final_window": [final[0] - t0, final[1] - t0],
         "transition_s": te - ts, "groups": {}}
    final_mean = {}
    for g, _ in GROUPS:
        lowest, lowest_at = lowest_window(series, g, ts, te)
        gm = {"after_warmup": group_tpm(series, g, *base),
              "during": group_tpm(series, g, ts, te),
              "lowest_5s_during": lowest,
              "lowest_5s_start_s": lowest_at - ts,
              "lowest_5s_jobs": job_in_window(run_result.get("job_timeline"),
                                              lowest_at, lowest_at + 5.0),
              "final": group_tpm(series, g, *final)}
        final_mean[g] = gm["final"]
        m["groups"][g] = gm
    m["time_to_stable_s"] = time_to_stable(series, te, settle, final_mean)
    run_result["metrics"] = m
    return m


def binned(run_result, width=5.0):
    """{stream: [(t relative to transition start, TPM)]} for the plots."""
    ts = run_result["transition"]["start"]
    t0 = run_result["t_streams_start"]
    # Up to the end of the final window: after it the streams are stopped,
    # and a query cut short there would show as a dip.
    t_stop = min(run_result["t_streams_stop"],
                 run_result.get("t_final_end", run_result["t_streams_stop"]))
    out = {}
    for n, s in run_result["streams"].items():
        st, en = np.asarray(s["starts"]), np.asarray(s["ends"])
        if t_stop - t0 < width:
            out[n] = []
            continue
        out[n] = [(float(a + width / 2 - ts), tpm_window(st, en, a, a + width))
                  for a in window_starts(t0, t_stop - width, width)]
    return out


# ---------------------------------------------------------------------------
# Markdown

def fmt_tpm(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v


def fmt_s(v):
    if v is None:
        return "-"
    return "%.0f s" % v if v >= 10 else "%.1f s" % v


def markdown(res):
    s = res["settings"]
    lines = []
    lines.append("Run %s, %.0f s in all, `%s`." % (res["started"], res["elapsed_s"],
                                                   res["command"]))
    lines.append("")
    if res.get("exception"):
        lines.append("**The run stopped early: %s.  Methods not listed were not "
                     "run.**" % res["exception"])
        lines.append("")
    lines.append("Machine: %s." % res["machine"]["summary"])
    lines.append("")
    d = res["disks"]
    if d["emulated"]:
        lim = d["limits"]
        lines.append("Disks: HDA and HDB are two loop-mounted ext4 filesystems, each "
                     "throttled with cgroup v1 blkio to %d read / %d write IOPS and "
                     "%d / %d MB/s; the server's memory cgroup is limited to %d MB "
                     "(shared_buffers %s, so the page cache cannot hide the disks). "
                     "WAL and catalogs are on the machine's disk."
                     % (lim["read_iops"], lim["write_iops"], lim["read_mb_s"],
                        lim["write_mb_s"], lim["memory_mb"], s["shared_buffers"]))
    else:
        lines.append("**WARNING: %s.**" % d["warning"])
    lines.append("")
    facts = res["data"]
    lines.append("Data: %d rows per table; a: %.0f MiB heap + %.1f MiB index, "
                 "b: %.0f MiB heap + %.1f MiB index (shared_buffers %s). "
                 "Streams: 2 x SELECT (range %d keys), 1 x UPDATE a, 1 x UPDATE b, "
                 "each a pgbench process with one connection. Phases: warm-up %d s, "
                 "transition (timeout %d s), settle %d s."
                 % (s["rows"], facts["a"]["heap_bytes"] / 2**20,
                    facts["a"]["index_bytes"] / 2**20, facts["b"]["heap_bytes"] / 2**20,
                    facts["b"]["index_bytes"] / 2**20, s["shared_buffers"],
                    s["query_range"], s["warmup_s"], s["transition_timeout_s"],
                    s["settle_s"]))
    if s.get("update_rate"):
        lines[-1] += " Each update stream is held to %d transactions/s (pgbench -R)." % s["update_rate"]
    if s.get("tsmove_rate_mb") is not None:
        lines[-1] += " pg_tsmove calls pass max_rate_mb => %s." % s["tsmove_rate_mb"]
    lines.append("")
    if res.get("copy_floor"):
        fl = res["copy_floor"]
        lines.append("Floor: copying B's files (%.0f MiB) from HDA to HDB with `cp` + "
                     "`sync` in the server's cgroups, idle: %.1f s (%.0f MB/s)."
                     % (fl["bytes"] / 2**20, fl["seconds"],
                        fl["bytes"] / 1e6 / fl["seconds"]))
        lines.append("")
    lines.append("| scenario / query | TPM after warm-up | transition | TPM during "
                 "transition | lowest 5 s TPM during transition | time to stable "
                 "state | TPM at final state | data checks |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(res["methods"], 1):
        head = "**%d. %s**" % (i, r["label"])
        if not r["available"]:
            lines.append("| %s | | %s | | | | | |" % (head, r["reason"]))
            continue
        if "metrics" not in r:
            lines.append("| %s | | run failed: %s | | | | | |"
                         % (head, r.get("exception", r.get("error"))))
            continue
        m = r["metrics"]
        trans = fmt_s(m["transition_s"])
        if r.get("copy_floor_ratio"):
            trans += " (%.1fx floor)" % r["copy_floor_ratio"]
        if not r["transition"]["finished"]:
            trans += ", **not finished**"
        stable = m["time_to_stable_s"]
        stable_txt = fmt_s(stable) if stable is not None else \
            "> %d s" % (s["settle_s"] / 2)
        checks = "OK" if r["checks"]["ok"] else "**FAIL**"
        lines.append("| %s | | %s | | | %s | | %s |" % (head, trans, stable_txt, checks))
        for g, _ in (("select", 0), ("update_a", 0), ("update_b", 0)):
            gm = m["groups"][g]
            lines.append("| %s | %s | ** | %s | %s | ** | %s | |"
                         % (GROUP_LABELS[g], fmt_tpm(gm["after_warmup"]),
                            fmt_tpm(gm["during"]), fmt_tpm(gm["lowest_5s_during"]),
                            fmt_tpm(gm["final"])))
    lines.append("")
    lines.append("\\*\\* = the same for every query of the scenario. "
                 "Transition: from the start of the move to its end (for the "
                 "offline copy, from the stop of the server until it is up and the "
                 "streams are connected again; for the control, the time it let them "
                 "run with nothing moving); \"x floor\" = transition / the idle "
                 "copy floor above. Time to stable: from the end of the transition until the first "
                 "%.0f s window of each stream group (both SELECT streams, updates "
                 "of A, updates of B) has reached %.0f %% of that group's TPM at the "
                 "final state (the last half of the settle phase); the latest group "
                 "counts." % (STABLE_WINDOW_S, STABLE_FRACTION * 100))
    notes = []
    for i, r in enumerate(res["methods"], 1):
        if not r["available"]:
            continue
        if r.get("transition", {}).get("error"):
            notes.append("%d. %s: %s" % (i, r["label"], r["transition"]["error"]))
        for n, st in sorted(r.get("streams", {}).items()):
            if st["events"]:
                notes.append("%d. %s: stream %s restarted %d times (first: %s)"
                             % (i, r["label"], n, len(st["events"]),
                                st["events"][0][1][:300]))
            if st["failed"]:
                notes.append("%d. %s: stream %s: %d failed transactions"
                             % (i, r["label"], n, st["failed"]))
        if r.get("checks") and not r["checks"]["ok"]:
            notes.append("%d. %s: data checks FAILED: %s"
                         % (i, r["label"], "; ".join(r["checks"]["problems"])[:1500]))
        for j in r.get("transition", {}).get("details", {}).get("jobs", []):
            notes.append("%d. %s: job %s (%s) %s: %s blocks, %s re-copied, %s switch "
                         "attempts, lock wait %s ms, lock held %s ms"
                         % (i, r["label"], j["job_id"], j["relname"], j["state"],
                            j["blocks_total"], j["blocks_recopied"],
                            j["switch_attempts"],
                            "%.1f" % j["lock_wait_ms"] if j["lock_wait_ms"] is not None else "-",
                            "%.1f" % j["switch_ms"] if j["switch_ms"] is not None else "-"))
        for t in r.get("switch_timings", []):
            notes.append("%d. %s: %s" % (i, r["label"], t))
        for g, _ in GROUPS:
            gm = r.get("metrics", {}).get("groups", {}).get(g, {})
            for j in gm.get("lowest_5s_jobs", []):
                notes.append("%d. %s: the lowest 5 s of %s (%s s into the transition): job %s "
                             "%s, %s blocks copied, %s re-copied, %s MB written, %s switch "
                             "attempts, lock wait %s ms, pace %s MB/s at its end"
                             % (i, r["label"], GROUP_LABELS[g], "%.0f" % gm["lowest_5s_start_s"],
                                j["job_id"], "/".join(j["states"]), j["copied"], j["recopied"],
                                j["mb_written"], j["switch_attempts"], j["lock_wait_ms"],
                                j["pace_mb_s"]))
    if notes:
        lines.append("")
        lines += ["- " + n for n in notes]
    lines += autopilot_section(res)
    lines += advised_section(res)
    lines.append("")
    lines.append("Plan of the SELECT streams (EXPLAIN, one parameter set):")
    lines.append("")
    lines.append("```")
    lines.append(res["plan"])
    lines.append("```")
    return "\n".join(lines) + "\n"


def _pct(v):
    return "-" if v is None else "%.1f" % float(v)


def _device_work(measured, period):
    """What the two devices read and wrote in a window (kB/s), as
    tsmove.autopilot_measure() counts the work."""
    kb = [measured.get("%s_%s_kb_s" % (period, side)) for side in ("source", "target")]
    return None if None in kb else sum(float(k) for k in kb)


def autopilot_section(res):
    """The autopilot's decisions: when, what, predicted against measured."""
    runs = [r for r in res["methods"] if r["key"] == "autopilot" and r.get("available")
            and "transition" in r]
    if not runs:
        return []
    r = runs[0]
    det = r["transition"]["details"]
    log = (r.get("after_settle") or {}).get("decisions") or det.get("decisions") or []
    lines = ["", "**The autopilot's decisions** (`tsmove.decisions`; it watched in "
             "`propose` mode from the start of the streams and was set `on` when the "
             "transition started):", ""]
    lines.append("- first proposal %s after the streams started; the move started %s after "
                 "them, %s after `on`" % (fmt_s(det.get("first_proposal_s")),
                                          fmt_s(det.get("decision_s")),
                                          fmt_s(det.get("decision_after_on_s"))))
    lines.append("")
    lines.append("| # | action | relation → target | times | predicted benefit (points) | "
                 "source util now → predicted | target util now → predicted | predicted capacity gain | "
                 "measured benefit | measured util before → after (source; target) | "
                 "devices' kB/s before → after | verdict / reason |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in log:
        ev = d.get("evidence") or {}
        me = d.get("measured") or {}
        lines.append("| %s | %s | %s → %s | %s | %s | %s → %s | %s → %s | %s | %s | %s → %s; %s → %s | %s → %s | %s |" % (
            d["decision_id"], d["action"], d["relation"] or "", d["target_tablespace"] or "",
            d["times"], _pct(d["predicted_benefit_pct"]),
            _pct(ev.get("source_util_pct")), _pct(ev.get("source_util_after_pct")),
            _pct(ev.get("target_util_pct")), _pct(ev.get("target_util_after_pct")),
            ("%s %%" % _pct(ev.get("capacity_gain_pct"))) if ev else "-",
            _pct(d["measured_benefit_pct"]),
            _pct(me.get("before_source_util_pct")), _pct(me.get("after_source_util_pct")),
            _pct(me.get("before_target_util_pct")), _pct(me.get("after_target_util_pct")),
            _pct(_device_work(me, "before")), _pct(_device_work(me, "after")),
            (d["verdict"] or d["reason_code"] or "") + (": " + d["reason"][:160] if d["reason"] and d["action"] == "skipped" else "")))
    m = r.get("metrics", {}).get("groups", {})
    if m:
        def gain(g):
            a, f = m[g]["after_warmup"], m[g]["final"]
            return "-" if not a else "%+.0f %%" % ((f / a - 1) * 100)
        lines.append("")
        lines.append("Measured by the streams, final state against after warm-up: SELECT %s, "
                     "update A %s, update B %s." % (gain("select"), gain("update_a"), gain("update_b")))
    return lines


def advised_section(res):
    """The DBA's move: the prediction read before it, the outcome measured
    by the autopilot's own measure."""
    runs = [r for r in res["methods"] if r["key"] == "advised" and r.get("available")
            and "transition" in r]
    if not runs:
        return []
    r = runs[0]
    pred = r["transition"]["details"].get("prediction")
    after = r.get("after_settle") or {}
    me = after.get("measured") or {}
    lines = ["", "**The advised move, predicted against measured** (%s):" %
             r["transition"]["details"].get("call", ""), ""]
    lines.append("| predicted benefit | source util → predicted | target util → predicted | "
                 "read share | verdict | measured benefit | measured util before → after "
                 "(source; target) | devices' kB/s before → after |")
    lines.append("|---|---|---|---|---|---|---|---|")
    p = pred or [None] * 7
    lines.append("| %s | %s → %s | %s → %s | %s %% | %s | %s | %s → %s; %s → %s | %s → %s |" % (
        _pct(p[0]), _pct(p[1]), _pct(p[2]), _pct(p[3]), _pct(p[4]), _pct(p[5]), p[6] or "-",
        _pct(after.get("measured_benefit_pct")),
        _pct(me.get("before_source_util_pct")), _pct(me.get("after_source_util_pct")),
        _pct(me.get("before_target_util_pct")), _pct(me.get("after_target_util_pct")),
        _pct(_device_work(me, "before")), _pct(_device_work(me, "after"))))
    return lines


# ---------------------------------------------------------------------------
# plots

COLORS = {"select1": "tab:blue", "select2": "tab:cyan", "update_a": "tab:green",
          "update_b": "tab:red"}


def plot(res, path, width=5.0):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [r for r in res["methods"] if r["available"] and "metrics" in r]
    if not methods:
        return False
    fig, axes = plt.subplots(len(methods), 1, figsize=(11, 2.6 * len(methods) + 0.6),
                             squeeze=False)
    twins = []
    for ax, r in zip(axes[:, 0], methods):
        b = binned(r, width)
        m = r["metrics"]
        ax2 = ax.twinx()
        twins.append(ax2)
        for n in ("update_a", "update_b"):
            xs, ys = zip(*b[n]) if b[n] else ((), ())
            ax.plot(xs, ys, color=COLORS[n], lw=1.2, label="UPDATE %s" % n[-1].upper())
        for n in ("select1", "select2"):
            xs, ys = zip(*b[n]) if b[n] else ((), ())
            ax2.plot(xs, ys, color=COLORS[n], lw=1.0, ls="--",
                     label="SELECT stream %s" % n[-1])
        ax.axvspan(0, m["transition_s"], color="orange", alpha=0.25, lw=0,
                   label="transition")
        if m["time_to_stable_s"]:
            ax.axvline(m["transition_s"] + m["time_to_stable_s"], color="grey",
                       ls=":", lw=1)
        title = "%s: transition %s" % (r["label"], fmt_s(m["transition_s"]))
        if not r["transition"]["finished"]:
            title += " (not finished)"
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_ylabel("UPDATE TPM")
        ax2.set_ylabel("SELECT TPM")
        ax.set_ylim(bottom=0)
        ax2.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds from the start of the transition "
                           "(%.0f s bins; each transaction counted pro rata)" % width)
    h1, l1 = axes[0, 0].get_legend_handles_labels()
    h2, l2 = twins[0].get_legend_handles_labels()
    fig.legend(h1 + h2, l1 + l2, loc="upper center", ncol=5, fontsize=9,
               frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (2.6 * len(methods) + 0.6)))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def write_json(res, path):
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=str)
