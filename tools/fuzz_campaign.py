#!/usr/bin/env python3
"""A long fuzz campaign over the input fuzz targets of tests/test_input_fuzz.py (issue 13).

The targets (programs, sessions files, scenarios, oracle traces, command-line options, expressions,
and constructs: drawn programs of flows, `share`, estimates and K's step stage) run a few
dozen inputs in the default test run; this script runs them for a given number of inputs in total,
split evenly between the targets, and keeps going past a failure so that one defect does not hide
the rest. Every input is a real `serq` command run in this process; per input it records

- a traceback: an exception escaping `serq`'s `main`, or "Traceback" / "internal error" in what
  it printed;
- a hang: a command still computing after --hang-seconds of CPU time (SIGPROF), or still
  running after --hang-wall-seconds by the clock (SIGALRM: blocked); CPU time, so that a
  campaign at low priority, waiting for a core, does not take its waiting for a hang;
- an unlocated error: a target's check of the message failed (exit 2 without FILE:LINE:COL for a
  program, without the file or option for the others, or an exit code the command does not have);
- a process mismatch: every --process-every'th command also runs as a process of its own (what
  a user runs), whose exit code and standard error must be the in-process run's (a traceback there
  counts as a traceback, a process past --hang-seconds plus its start-up as a hang).

    python3 tools/fuzz_campaign.py --inputs 100000 --summary fuzz-summary.json
    python3 tools/fuzz_campaign.py --inputs 500 --targets programs,options --seed 3
    python3 tools/fuzz_campaign.py --inputs 1000000 --cpu-minutes 25   # as many as fit
    python3 tools/fuzz_campaign.py --add chunk-*.json   # the totals of a campaign run in chunks

Every minute the summary so far is written too ("complete": false), so a campaign stopped
midway (a chunk of a long one) still counts the inputs it ran up to then.

The inputs are written under /dev/shm when there is one (--work-dir): on a disk, writing them
and the commands' fsynced outputs cost as much as the commands.

A progress line on stderr every few seconds; at the end a JSON summary (written atomically):
the inputs run per target, the counts, and the first examples of each kind of failure (the
command, the first line of its message, and the input file that caused it, copied into
--keep DIR). Exit 0 when nothing was found, 1 otherwise. Reproducible for a given --seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TARGETS = {
    "programs": "test_programs",
    "sessions": "test_sessions_files",
    "scenarios": "test_scenarios",
    "traces": "test_traces",
    "options": "test_options",
    "expressions": "test_expressions",
    "constructs": "test_constructs",
    "construct_settings": "test_construct_settings",
    "construct_sessions": "test_construct_sessions",
}
KEEP_EXAMPLES = 10  # failures kept in the summary, per kind and target
CHECKPOINT_SECONDS = 60  # the summary so far is written this often ("complete": false)


def cpu_seconds() -> float:
    """CPU time of this process and of the commands it ran as processes of their own."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Hang(BaseException):
    """A timer: the command ran past --hang-seconds (a BaseException so that no `except
    Exception` in the command swallows it)."""


class Recorded(Exception):
    """This input's failure is recorded; go on with the next input."""


class Campaign:
    def __init__(self, module, work: Path, keep: Path, hang_seconds: float, hang_wall_seconds: float):
        self.T = module
        self.work = work
        self.keep = keep
        self.hang_seconds = hang_seconds
        self.hang_wall_seconds = hang_wall_seconds
        self.expired = None  # why the running command's timer stopped it
        self.inputs = {}
        self.cpu_by_target = {}
        self.found = {"tracebacks": {}, "hangs": {}, "unlocated": {}, "mismatches": {}}
        self.commands = 0  # commands run in this process
        self.process_every = 0  # every Nth of them also runs as a process (0: none)
        self.processes = 0
        self.target = None
        self.argv = None
        self.started = time.monotonic()
        self.last_print = 0.0
        self.total_goal = 0
        self.cpu_per_target = float("inf")
        self.dry = False
        self.target_cpu0 = 0.0
        self.seed = None
        self.checkpoint = None  # writes the summary so far (set by main)
        self.last_checkpoint = time.monotonic()

    # -- what the targets call --------------------------------------------------------------------
    def serq(self, argv, cwd):
        """tests/test_input_fuzz.serq, recording a traceback or a hang instead of failing."""
        if self.dry:
            return 0, ""
        self.argv = [str(a) for a in argv]
        self.expired = None
        signal.setitimer(signal.ITIMER_PROF, self.hang_seconds)
        signal.setitimer(signal.ITIMER_REAL, self.hang_wall_seconds)
        failure = None
        try:
            result = self.original_serq(argv, cwd)
        except Hang:
            pass
        except AssertionError as exc:  # "Traceback" or "internal error" in what it printed
            failure = str(exc)
        except Exception:
            failure = traceback.format_exc()
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
        # a timer's Hang may land where it is ignored (a garbage-collector callback prints
        # "Exception ignored … Traceback" and goes on): the timer decides, not what was printed
        if self.expired is not None:
            self.record("hangs", self.expired)
            raise Recorded
        if failure is not None:
            self.record("tracebacks", failure)
            raise Recorded
        self.commands += 1
        if self.process_every and self.commands % self.process_every == 0:
            self.compare_with_process(result, cwd)
        return result

    def expire(self, signum, frame) -> None:
        """SIGPROF or SIGALRM: the command ran past --hang-seconds of CPU or --hang-wall-seconds."""
        if signum == signal.SIGPROF:
            self.expired = f"still running after {self.hang_seconds:g} CPU-s"
        else:
            self.expired = f"still running after {self.hang_wall_seconds:g} s (wall clock; blocked?)"
        raise Hang

    def compare_with_process(self, in_process: tuple[int, str], cwd) -> None:
        """Run the same command as a process of its own, as the `serq` entry point does: a user
        sees its exit code and its standard error, which must be the ones the in-process run
        gave (a traceback at interpreter exit, or an exit code lost on the way out, would show
        only here)."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "python"),
                                                                        os.environ.get("PYTHONPATH")])))
        self.processes += 1
        try:
            p = subprocess.run([sys.executable, "-c", "import sys; from serq.cli import main; sys.exit(main())",
                                *self.argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=self.hang_wall_seconds + 10)  # + the interpreter's start
        except subprocess.TimeoutExpired:
            self.record("hangs", f"as a process: still running after {self.hang_wall_seconds + 10:g} s")
            return
        if "Traceback" in p.stderr:
            self.record("tracebacks", f"as a process:\n{p.stderr}")
        elif (p.returncode, p.stderr) != in_process:
            self.record("mismatches", f"in this process: exit {in_process[0]}, {in_process[1]!r}\n"
                                      f"as a process: exit {p.returncode}, {p.stderr!r}")

    def record(self, kind: str, what: str) -> None:
        examples = self.found[kind].setdefault(self.target, [])
        entry = {"argv": self.argv, "message": what.strip().splitlines()[-1][:500] if what.strip() else "",
                 "detail": what[-3000:]}
        if len(examples) < KEEP_EXAMPLES:
            kept = []
            for a in self.argv or []:
                p = self.work / a if not os.path.isabs(a) else Path(a)
                if p.is_file() and p.parent == self.work and p.stat().st_size < 2**20:
                    # the seed in the name: chunks of one campaign share the folder
                    dest = self.keep / f"{kind}-{self.target}-seed{self.seed}-{len(examples)}-{p.name}"
                    shutil.copyfile(p, dest)
                    kept.append(str(dest))
            entry["kept"] = kept
            examples.append(entry)
        else:
            examples.append(None)  # counted, not kept

    # -- one target ------------------------------------------------------------------------------
    def run_target(self, name: str, seed: int) -> None:
        from hypothesis import seed as hseed

        self.target = name
        self.inputs[name] = 0
        test = getattr(self.T, TARGETS[name])
        inner = test.hypothesis.inner_test
        cpu0 = self.target_cpu0 = cpu_seconds()

        def one(*args, **kwargs):
            # past this target's share of --cpu-minutes the inputs are still drawn (hypothesis
            # refuses a test that draws less for the same choices: FlakyStrategyDefinition) but
            # no command runs and nothing is counted
            self.dry = cpu_seconds() - cpu0 > self.cpu_per_target
            if self.dry:
                try:
                    inner(*args, **kwargs)
                except AssertionError:
                    pass
                return
            self.inputs[name] += 1
            self.argv = None
            try:
                inner(*args, **kwargs)
            except Recorded:
                pass
            except AssertionError as exc:  # a target's check of the exit code or the message
                self.record("unlocated", str(exc) or traceback.format_exc())
            self.progress()

        test.hypothesis.inner_test = one
        try:
            hseed(seed)(test)(work=self.work)  # max_examples: SERQ_FUZZ_EXAMPLES, set before the import
        finally:
            test.hypothesis.inner_test = inner
            self.cpu_by_target[name] = round(cpu_seconds() - cpu0, 1)

    def counts(self) -> dict:
        return {kind: sum(len(v) for v in by.values()) for kind, by in self.found.items()}

    def progress(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last_print < 3:
            return
        self.last_print = now
        done = sum(self.inputs.values())
        c = self.counts()
        rate = done / max(now - self.started, 1e-9)
        line = (f"fuzz: {self.target}: {done}/{self.total_goal} inputs, {rate:.0f}/s, "
                f"{c['tracebacks']} tracebacks, {c['hangs']} hangs, {c['unlocated']} unlocated, "
                f"{c['mismatches']} process mismatches in {self.processes}")
        print(line, file=sys.__stderr__, flush=True)
        if self.checkpoint is not None and now - self.last_checkpoint >= CHECKPOINT_SECONDS:
            self.last_checkpoint = now
            self.checkpoint()

    def summary(self, seed: int, cpu: float, complete: bool = True) -> dict:
        cpu_by_target = dict(self.cpu_by_target)
        if self.target is not None and self.target not in cpu_by_target:  # a checkpoint within a target
            cpu_by_target[self.target] = round(cpu_seconds() - self.target_cpu0, 1)
        return {"inputs": sum(self.inputs.values()), "inputs_per_target": self.inputs, "seed": seed,
                "complete": complete,
                "cpu_seconds_per_target": None if self.cpu_per_target == float("inf") else self.cpu_per_target,
                "hang_seconds": self.hang_seconds, "hang_wall_seconds": self.hang_wall_seconds, "wall_seconds": round(time.monotonic() - self.started, 1),
                "cpu_seconds": round(cpu, 1), "cpu_seconds_by_target": cpu_by_target, "commands": self.commands,
                "commands_as_processes": self.processes, **self.counts(),
                "examples": {kind: {t: [e for e in v if e is not None] for t, v in by.items()}
                             for kind, by in self.found.items()}}


COUNTED = ("inputs", "cpu_seconds", "wall_seconds", "commands", "commands_as_processes", "tracebacks", "hangs",
           "unlocated", "mismatches")


def add_up(paths: list[str]) -> dict:
    """The totals of several campaigns' summaries (a long campaign run in chunks, one seed each,
    so that it can stop and go on): the counts added, per target too, and the seeds."""
    total: dict = {k: 0 for k in COUNTED}
    total.update(seeds=[], inputs_per_target={}, cpu_seconds_by_target={}, summaries=len(paths), incomplete=[])
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            s = json.load(fh)
        for k in COUNTED:
            total[k] = round(total[k] + s.get(k, 0), 1)
        total["seeds"].append(s["seed"])
        if not s.get("complete", True):  # stopped midway: the inputs up to its last checkpoint
            total["incomplete"].append(s["seed"])
        for k in ("inputs_per_target", "cpu_seconds_by_target"):
            for t, v in s.get(k, {}).items():
                total[k][t] = round(total[k].get(t, 0) + v, 1)
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--add", nargs="+", metavar="SUMMARY",
                    help="print the totals of these summaries (of chunks with distinct seeds) and exit")
    ap.add_argument("--inputs", type=int, help="inputs in total, split evenly between the targets")
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of: {', '.join(TARGETS)}")
    ap.add_argument("--seed", type=int, default=0, help="hypothesis seed (the campaign is reproducible)")
    ap.add_argument("--cpu-minutes", type=float, default=None,
                    help="stop each target after its share of this much CPU time (the inputs it ran are counted)")
    ap.add_argument("--hang-seconds", type=float, default=20.0,
                    help="a command computing for longer (CPU time: a campaign at low priority may wait long "
                         "for a core) is a hang")
    ap.add_argument("--hang-wall-seconds", type=float, default=600.0,
                    help="a command still running after this long by the clock (blocked, not computing) is a hang")
    ap.add_argument("--summary", default="fuzz-summary.json", help="where the JSON summary goes")
    ap.add_argument("--keep", default=None, help="folder for the inputs of the failures kept (default: next to --summary)")
    ap.add_argument("--process-every", type=int, default=5000, metavar="N",
                    help="also run every Nth command as a process of its own and compare its exit code and "
                         "standard error with the in-process run (0: never)")
    ap.add_argument("--work-dir", default=None,
                    help="where the inputs are written (default: /dev/shm when there is one, else the temporary folder)")
    args = ap.parse_args(argv)
    if args.add:
        total = add_up(args.add)
        print(json.dumps(total, indent=1, sort_keys=True))
        return 0 if not any(total[k] for k in ("tracebacks", "hangs", "unlocated", "mismatches")) else 1
    if args.inputs is None:
        ap.error("--inputs is required (or --add SUMMARY…)")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets or args.inputs < len(targets):
        ap.error(f"--targets: unknown {unknown}" if unknown else "--inputs must be at least one per target")
    per_target = args.inputs // len(targets)

    sys.path[:0] = [str(REPO / "python"), str(REPO / "tests")]
    # the targets' settings: this many examples each (up to 1000 derandomized, so a small
    # campaign is reproducible without the seed), no deadline (a hang is timed here instead)
    os.environ["SERQ_FUZZ_EXAMPLES"] = str(per_target)
    os.environ.pop("SERQ_FUZZ_DEADLINE_MS", None)
    import test_input_fuzz as T  # after the environment it reads

    from serq.outputfile import write_text

    keep = Path(args.keep or (Path(args.summary).resolve().parent / "fuzz-failures"))
    keep.mkdir(parents=True, exist_ok=True)

    cpu0 = cpu_seconds()
    # the inputs are files written and read once: in memory (/dev/shm) a write costs ~20 us, on
    # this machine's disk ~2 ms (the commands' atomic writes also fsync) -- as much as an input
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="serq-fuzz-", dir=args.work_dir or shm) as d:
        work = Path(d)
        T.prepare(work)
        camp = Campaign(T, work, keep, args.hang_seconds, args.hang_wall_seconds)
        signal.signal(signal.SIGPROF, camp.expire)
        signal.signal(signal.SIGALRM, camp.expire)
        camp.total_goal = per_target * len(targets)
        camp.seed = args.seed
        camp.process_every = args.process_every
        if args.cpu_minutes is not None:
            camp.cpu_per_target = args.cpu_minutes * 60 / len(targets)
        camp.original_serq = T.serq

        def checkpoint() -> None:
            partial = camp.summary(args.seed, cpu_seconds() - cpu0, complete=False)
            write_text(args.summary, json.dumps(partial, indent=1, sort_keys=True) + "\n")

        camp.checkpoint = checkpoint
        T.serq = camp.serq
        try:
            for i, name in enumerate(targets):
                camp.run_target(name, args.seed * 1000 + i)
        finally:
            T.serq = camp.original_serq
            camp.progress(final=True)
            summary = camp.summary(args.seed, cpu_seconds() - cpu0)
            write_text(args.summary, json.dumps(summary, indent=1, sort_keys=True) + "\n")
    c = camp.counts()
    print(f"fuzz: {summary['inputs']} inputs in {summary['cpu_seconds']:.0f} CPU-s: {c['tracebacks']} tracebacks, "
          f"{c['hangs']} hangs, {c['unlocated']} unlocated errors, {c['mismatches']} process mismatches in "
          f"{summary['commands_as_processes']} commands run as processes; summary in {args.summary}", file=sys.__stderr__)
    return 0 if not any(c.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
