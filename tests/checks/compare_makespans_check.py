#!/usr/bin/env python3
"""compare_makespans_check.py - bench/planners/compare_makespans.py on hand-made --makespans files: a cell
that rose, a cell where balanced is above dynamic_cp, and a clean comparison are each told apart.
usage: compare_makespans_check.py <source-dir>"""
import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
script = os.path.join(src, "bench", "planners", "compare_makespans.py")
failures = 0


def run(old, new):
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for name, text in (("old.txt", old), ("new.txt", new)):
            p = os.path.join(d, name)
            with open(p, "w") as f:
                f.write(text)
            paths.append(p)
        r = subprocess.run([sys.executable, script] + paths, capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr


def expect(what, got_status, want_status, out, must, must_not=()):
    global failures
    ok = got_status == want_status and all(m in out for m in must) and not any(m in out for m in must_not)
    if not ok:
        failures += 1
        print(f"FAIL {what}: exit {got_status} (want {want_status})\n{out}")
    else:
        print(f"ok {what}")


old = ("t1|r8 m2048|dynamic_cp|aa|100\nt1|r8 m2048|balanced|bb|90\n"
       "t2|r8 m2048|dynamic_cp|cc|200\nt2|r8 m2048|balanced|dd|180\nt3|r8 m2048|balanced|skipped\n")
same = old
lower = old.replace("|bb|90", "|bx|85")
rose = old.replace("|dd|180", "|dx|181")
above = old.replace("|dd|180", "|dx|201")

st, out = run(old, same)
expect("identical builds", st, 0, out, ["balanced     cells    2  lower    0  equal    2  higher    0"], ["rose:"])
st, out = run(old, lower)
expect("one cell lower", st, 0, out, ["lower    1  equal    1  higher    0", "best 0.9444"], ["rose:"])
st, out = run(old, rose)
expect("one cell rose", st, 1, out, ["higher    1", "rose: t2 r8 m2048: 180 -> 181"])
st, out = run(old, above)
expect("balanced above dynamic_cp", st, 1, out, ["balanced above dynamic_cp: t2 r8 m2048: 201 > 200"])
st, out = run("header line\n", old)
expect("no makespan lines", st, 2, out, ["no `trace|configuration|scheduler|hash|makespan` lines"])

st, out = run(old, old.replace("t2|r8 m2048|balanced|dd|180", "t2|r8 m2048|balanced|skipped"))
expect("a planned cell skipped", st, 1, out, ["no longer planned: t2 r8 m2048 balanced: 180 -> skipped"])
st, out = run(old, old.replace("t2|r8 m2048|balanced|dd|180\n", ""))
expect("a planned cell missing", st, 1, out, ["no longer planned: t2 r8 m2048 balanced: 180 -> absent"])
st, out = run(old.replace("|bb|90", "|bb|0"), old.replace("|bb|90", "|bb|0"))
expect("a zero makespan", st, 0, out, ["balanced     cells    2  lower    0  equal    2"])
st, out = run(old.replace("|bb|90", "|bb|0"), old.replace("|bb|90", "|bb|5"))
expect("a zero makespan that rose", st, 1, out, ["rose: t1 r8 m2048: 0 -> 5"])
st, out = run(old, "t1|r8 m2048|balanced|bb|ninety\n")
expect("a makespan that is not a number", st, 2, out, ["new.txt:1: makespan 'ninety' is not an integer"])

sys.exit(1 if failures else 0)
