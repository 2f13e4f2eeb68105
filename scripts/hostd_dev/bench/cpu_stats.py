"""CPU and memory accounting from /proc, for the benchmarks: a process's RSS and CPU time
(tick-rounded and exact per-thread), its run-queue wait and counters, and the machine's busy
time split by /proc/stat field, with what other processes used.
"""

from __future__ import annotations

import os


def rss_mib(pid: int) -> float:
    """Resident set size of a process in MiB (Linux /proc; 0.0 elsewhere or when gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc; 0.0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the ")": state is field 3 of stat(5), so utime (14) and stime (15) are at 11, 12.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def exact_cpu_seconds(pid: int) -> float:
    """CPU time of every thread of a process so far, in ns precision (Linux
    /proc/<pid>/task/*/schedstat run time; `cpu_seconds` where that is unreadable). A
    process that uses 30 us per wake-up 250 times a round is 7.5 ms: less than one of
    `cpu_seconds`' 10 ms ticks, so per-chunk figures of a cheap driver need this one."""
    total = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return cpu_seconds(pid)
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0]) / 1e9
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return total


def runqueue_seconds(pid: int) -> float:
    """Seconds the process's main thread has spent runnable but waiting for a CPU (Linux
    /proc/<pid>/schedstat, field 2; 0.0 elsewhere). Over a round, divided by its wall time,
    it says how much of the round that thread waited for the machine, not for work."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


#: What `proc_counters` reads, with its unit (each a total since the process started).
COUNTERS: dict[str, str] = {
    "write calls": "",  # /proc/<pid>/io syscw: every write(2), a short or refused one too
    "bytes written": "",  # /proc/<pid>/io wchar
    "voluntary switches": "",  # /proc/<pid>/status: it blocked (a full pipe, poll...)
    "involuntary switches": "",  # /proc/<pid>/status: preempted while runnable
    "minor faults": "",  # /proc/<pid>/stat minflt
    "migrations": "",  # /proc/<pid>/sched se.nr_migrations: moved to another CPU
    "user CPU": "s",  # /proc/<pid>/stat utime (clock ticks)
    "system CPU": "s",  # /proc/<pid>/stat stime: the kernel's share (faults, writes)
    "CPU, exact": "s",  # /proc/<pid>/schedstat run time (ns), main thread
}


def proc_counters(pid: int) -> dict[str, float]:
    """The kernel's counters of one process (`COUNTERS`; Linux /proc, a counter it cannot
    read is 0.0), so a round can say what a process did besides burning CPU."""
    out = dict.fromkeys(COUNTERS, 0.0)
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            out["CPU, exact"] = int(fh.read().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/io") as fh:
            io = dict(line.split(":", 1) for line in fh if ":" in line)
        out["write calls"] = float(io.get("syscw", 0))
        out["bytes written"] = float(io.get("wchar", 0))
    except (OSError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("voluntary_ctxt_switches:"):
                    out["voluntary switches"] = float(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    out["involuntary switches"] = float(line.split()[1])
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read().rsplit(")", 1)[1].split()
        out["minor faults"] = float(stat[7])
        out["user CPU"] = int(stat[11]) / os.sysconf("SC_CLK_TCK")
        out["system CPU"] = int(stat[12]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/sched") as fh:  # needs CONFIG_SCHED_DEBUG
            for line in fh:
                if line.startswith("se.nr_migrations"):
                    out["migrations"] = float(line.split()[-1])
    except (OSError, IndexError, ValueError):
        pass
    return out


def counters_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def last_cpu(pid: int) -> int:
    """The CPU the process last ran on (/proc/<pid>/stat field 39; -1 when unknown)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return -1


def steal_seconds() -> float:
    """CPU time the hypervisor gave to others while this VM wanted it (/proc/stat "steal",
    all CPUs; 0.0 where not reported)."""
    try:
        with open("/proc/stat") as fh:
            return int(fh.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def busy_cpu_seconds() -> float:
    """CPU seconds every process on the machine has used so far (Linux /proc/stat), so a
    round can tell how much of the machine others (other jobs, not the bench) took."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


#: The fields of /proc/stat's "cpu" line, in order (proc(5)).
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def machine_cpu_fields() -> dict[str, float]:
    """The whole machine's CPU seconds so far, by /proc/stat field (`STAT_FIELDS`; all 0.0
    where unreadable). Over a round, irq/softirq/steal say how much of the busy time no
    process is charged with (interrupts, the hypervisor), apart from other processes."""
    try:
        with open("/proc/stat") as fh:
            values = [int(x) for x in fh.readline().split()[1 : 1 + len(STAT_FIELDS)]]
    except (OSError, ValueError):
        values = []
    tick = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys(STAT_FIELDS, 0.0)
    for name, value in zip(STAT_FIELDS, values, strict=False):
        out[name] = value / tick
    return out


def others_cpu_seconds(exclude: set[int]) -> float:
    """CPU seconds used so far by every process not in `exclude`, the ones that already
    ended included: each live process's user + system ticks plus its reaped children's
    (cutime + cstime, /proc/<pid>/stat), summed. The difference over a round is what
    *other* processes used, counted one by one, beside "busy minus ours" (which also holds
    CPU nobody is charged with). Short-lived processes (a test suite's) count once their
    parent reaped them; one still unreaped at the end of a round counts in the next."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in exclude:
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        except (OSError, IndexError, ValueError):
            pass  # it ended meanwhile
    return total / os.sysconf("SC_CLK_TCK")
