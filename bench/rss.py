"""Runs a command and prints, as one JSON line on stdout, the peak over time of the summed RSS
and of the summed PSS of it and all its descendants (encode workers included), sampled from
/proc every 50 ms, its largest process, and the CPU seconds of them all (a pool's workers
are not waited for by the command, so its own rusage would miss them). (ru_maxrss would be wrong here: Linux carries it
over fork+exec from a large parent.) The command's own stdout goes to stderr: stdout is this
line's.

The summed RSS counts a page once per process mapping it: the pool's workers, forked from one
fork server, share its imported libraries, so the sum overstates what the tree holds. PSS
(proportional set size) charges a shared page to its processes in shares, so its sum is the
memory the tree uses.

    python bench/rss.py COMMAND [ARG ...]

The bench runs it by path, so it works whatever the command's cwd and PYTHONPATH (the graph
of `--before` runs on another checkout's code); it imports nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants (every thread's children)."""
    pids = [pid]
    for p in pids:
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    pids += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return pids


def rss(pid: int) -> tuple[int, int]:
    """(resident kB, of which private: RssAnon). Shared memory a process maps (Ray's object
    store) counts in its VmRSS, but not in its RssAnon."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "RssAnon:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return out.get("VmRSS", 0), out.get("RssAnon", 0)


def pss(pid: int) -> int | None:
    """Proportional resident kB: each shared page divided among the processes mapping it;
    None when the kernel does not say (no `smaps_rollup` before Linux 4.14, an exited process)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def name(pid: int) -> str:
    """The command line: every pool worker's comm is just "python3"."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
    except OSError:
        return "?"


def main(argv: list[str]) -> int:
    proc = subprocess.Popen(argv, stdout=sys.stderr)
    peak = 0
    peak_pss: int | None = None  # None until a process's PSS was read
    each: dict[int, int] = {}  # peak kB of each process
    anon: dict[int, int] = {}  # peak RssAnon kB of each process
    names: dict[int, str] = {}
    used: dict[int, float] = {}  # CPU seconds of each process, as last read
    while proc.poll() is None:
        sizes = {p: rss(p) for p in tree(proc.pid)}
        for p in sizes:
            used[p] = max(used.get(p, 0.0), cpu(p))
        total = sum(kb for kb, _ in sizes.values())
        peak = max(peak, total)
        # PSS never exceeds RSS: a tick whose RSS is below the PSS peak cannot raise it, and
        # reading smaps_rollup walks the process's pages (ms per 100s of MB), so skip it.
        if peak_pss is None or total > peak_pss:
            read = [kb for kb in map(pss, sizes) if kb is not None]
            if read:
                peak_pss = max(peak_pss or 0, sum(read))
        for p, (kb, private) in sizes.items():
            if kb > each.get(p, 0):
                each[p], names[p] = kb, name(p)
            anon[p] = max(anon.get(p, 0), private)
        time.sleep(0.05)
    top = max(each, key=lambda p: each[p]) if each else None
    figures = {
        "maxrss_kb": peak,
        "maxpss_kb": peak_pss,
        "process_maxrss_kb": each.get(top, 0) if top is not None else 0,
        "process": names.get(top, "") if top is not None else "",
        "process_max_anon_kb": anon.get(top, 0) if top is not None else 0,
        "command_maxrss_kb": each.get(proc.pid, 0),  # the command's own process (a run's)
        "others_maxrss_kb": max((kb for p, kb in each.items() if p != proc.pid), default=0),
        # Each process's CPU seconds as last sampled (a process's last 50 ms may be missed).
        "cpu_s": round(sum(used.values()), 2),
        "command_cpu_s": round(used.get(proc.pid, 0.0), 2),  # the run's own process's
    }
    print(json.dumps(figures))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
