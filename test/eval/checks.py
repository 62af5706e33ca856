"""Data checks that end every method's run: nothing lost, nothing left over.

Run after the streams have stopped, with the disk limits off (they measure
nothing).  Each check returns problem strings; an empty list is a pass.

    counts and content   a and b still hold `rows` rows each, and md5 over
                         (key, value) in key order equals the hash taken
                         right after loading (moves may not change a row;
                         the update streams change only prices)
    prices               every price is an integer 0-9, none NULL
    amcheck              verify_heapam (with TOAST) of a and b, bt_index_check
                         with heapallindexed of a_pkey and b_pkey
    orphans              no file of the database without a relation, no
                         relation without its file, in any tablespace
                         (pgcluster.orphan_files, after two checkpoints)
    placement            a and a_pkey on HDA; b and b_pkey on HDB if the move
                         finished (if it did not, each relation is wholly in
                         one place, which the orphan check sees: a job that
                         moved the table but failed on the index is
                         consistent); after the autopilot's move, the one
                         relation it moved on HDB and the others on HDA;
                         after the control, every relation on HDA
    old location         after a tablespace relocation, no relation file is
                         left in TSB's old directory
"""

import os
import re

from workload import content_hash

_RELATION_FILE = re.compile(r"^\d+(?:_(?:fsm|vm|init))?(?:\.\d+)?$")


def relation_disk(cluster, disks, rel):
    """'hda', 'hdb' or a description of where rel's main file is."""
    path = cluster.sql_scalar("SELECT pg_relation_filepath(%s)", (rel,))
    full = os.path.join(cluster.data_dir, path)
    return disks.device_of(os.path.realpath(full)) or "elsewhere (%s)" % full


def relation_files_under(directory):
    found = []
    for root, _, files in os.walk(directory):
        found += [os.path.join(root, f) for f in files if _RELATION_FILE.match(f)]
    return found


def run_checks(cluster, disks, expected, finished, old_tsb_dir=None, moved=None):
    """Returns {"ok": bool, "problems": [...], "placement": {...}}.  When
    `moved` names one relation (the autopilot's choice), a finished
    transition must have put that one on HDB and left the others on HDA;
    "" (the control): every relation stays on HDA."""
    problems = []
    for t in ("a", "b"):
        n = cluster.sql_scalar("SELECT count(*) FROM %s" % t)
        if n != expected[t]["rows"]:
            problems.append("%s has %d rows, expected %d" % (t, n, expected[t]["rows"]))
        h = content_hash(cluster, t)
        if h != expected[t]["hash"]:
            problems.append("%s: (key, value) hash %s differs from the loaded %s"
                            % (t, h, expected[t]["hash"]))
        bad = cluster.sql_scalar(
            "SELECT count(*) FROM {t} WHERE {t}_price IS NULL OR {t}_price "
            "NOT IN (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)".format(t=t))
        if bad:
            problems.append("%s: %d prices outside 0-9" % (t, bad))
    problems += cluster.amcheck(relations=["a", "b"])
    problems += cluster.orphan_files()
    placement = {rel: relation_disk(cluster, disks, rel)
                 for rel in ("a", "a_pkey", "b", "b_pkey")}
    wanted = {"a": "hda", "a_pkey": "hda"}
    if moved is not None:               # "" (the control): nothing moved
        wanted.update({"b": "hda", "b_pkey": "hda"})
        if finished and moved:
            wanted[moved] = "hdb"
    elif finished:
        wanted.update({"b": "hdb", "b_pkey": "hdb"})
    for rel in wanted:                  # the autopilot may move a third table
        if rel not in placement:
            placement[rel] = relation_disk(cluster, disks, rel)
    for rel, want in wanted.items():
        if placement[rel] != want:
            problems.append("%s is on %s, expected %s" % (rel, placement[rel], want))
    if old_tsb_dir and finished and os.path.isdir(old_tsb_dir):
        left = relation_files_under(old_tsb_dir)
        if left:
            problems.append("%d relation files left in TSB's old directory %s"
                            % (len(left), old_tsb_dir))
    return {"ok": not problems, "problems": problems, "placement": placement}
