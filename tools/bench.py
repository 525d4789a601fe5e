#!/usr/bin/env python3
"""`make bench`: torchprobe's costs as ratios to baselines measured in the
same run, in fresh processes, modes interleaved, medians reported.

1. (--part ops: only this, with 2, 4 and 6 of the same runs)
   Per-op cost on a PyTorch loop (tools/bench_target.py): untraced,
   torch.profiler, empty BPF programs on the same points as each returns
   mode (entry + `ret` uprobes; entry + uretprobe: the trap floors), and
   torchprobe in both modes (--returns uretprobe, the default here, and
   --returns ret). Ratios to each mode's own floor and to torch.profiler.
2. Attach and detach of all op probes (from torchprobe's own stats).
3. Sustained event rate through userspace with zero drops: build/bench_pipeline
   feeds record's reader, model and writer from a BPF program that emits op
   events through the probes' emit path faster than uprobes can; and, for
   reference, the rate real uprobes reach here (build/fixtures/op_storm).
4. Trace bytes per op slice, plain and --compress.
5. One C++ throw through N traced frames (build/fixtures/nesting/throw_depth)
   untraced and in each returns mode.
6. The probe cost torchprobe calibrates on its own child, beside the per-op
   cost measured in 1 (the calibration is a lower bound).
7. Memory (--part memory, or all): the cost --memory adds per CPU allocation,
   against empty programs on the same allocator points (the trap floor), and
   the loop traced with --memory against profile(profile_memory=True).
8. Each writer (Perfetto, --et, --chrome) on a synthetic model of >= 1 M op
   slices: export ns and bytes per slice, torchprobe's RSS at a tenth of the
   slices and at its peak (build/bench_writers; `--part writers` runs only this).
9. PyTorch 2.6 (in the tools/torch2-root root, launched through chroot): the
   per-op cost of the same loop, its ops called unboxed and through
   torch.ops.aten (the boxed path), against untraced, the uretprobe floor and
   torch.profiler in the same run. `--part torch2` runs this part only.
10. Cost per record_function range (--part annotations: only this): an
   empty one per iteration (on 1.13 its enter also calls two small ops),
   untraced, under torch.profiler, with empty programs on the same probe
   points (the floor; op returns through uretprobes) and traced
   (--returns uretprobe).
11. (--part cuda, also in the full run) Per-call cost of the CUDA probes:
   build/fixtures/cuda/cuda_loop (fake CUDA libraries, 5 probed CUDA/NCCL
   calls and 3 ops per iteration) traced against empty programs on the
   same points.
12. (--part cupti, also in the full run) The CUPTI collector's added cost:
   build/fixtures/cuda/cupti_loop (fake CUPTI) traced with and without
   --cupti; CUPTI's own cost on a GPU is not in it (tools/gpu-e2e).
13. Cost per autograd node (--part autograd, also in the full run): one
   backward of 6 nodes per iteration (tools/bench_target.py --autograd),
   untraced, under torch.profiler, with empty programs on the same probe
   points (the floor: the engine's evaluate_function, each node's apply and
   the backward's ops, returns through uretprobes) and traced. A node's
   cost includes its backward ops' (~2 per node here).
14. (--part agent only: minutes) First, what a window costs its target:
   the agent taking a window every second on the training loop of
   tools/bench_train.py, on PyTorch 1.13 and 2.6 (the tools/torch2-root
   root), 20 windows each at a warm plan cache: attach, detach (until the
   probes are out of the target's code) and their sum, medians. Then the
   loop for --agent-seconds, untraced and with `torchprobe agent` at its
   defaults (--every 60 --window 2 --budget 1) running beside it,
   interleaved, for --agent-rounds rounds: the step time ratio, the duty
   cycle the agent measured, and each window's attach and detach time.
15. (--part shapes, also in the full run) Per-op cost of --shapes on the
   loop of 1 (PyTorch 1.13): untraced, the uretprobe floor, torchprobe
   without and with --shapes, and torch.profiler with record_shapes=True.
17. (--part soak only: --soak-seconds, 30 minutes) The agent at its
   defaults beside a job whose 2 DataLoader workers are forked anew every
   minute (tools/bench_soak.py): the agent's RSS, open fds, live keepers
   and index size sampled every 30 s (first and last 5 minutes' medians,
   the most), the windows taken, and the duty cycle it measured against
   its budget (highest sample).
16. (--part children, also in the full run) What holding a forked child at
   its fork costs: tests/fixtures/forks.py forks children that each run 20
   ops and exit, one after another; the time from the first fork to the
   last exit untraced, traced (each child held until attached) and traced
   with --no-hold-children (not held: their ops missed), and the hold per
   child from the trace's stats.
18. (--part flight, also in the full run) The flight recorder's cost on the
   training loop (tools/bench_train.py, launched, --flight-seconds each):
   step time untraced, under --flight-tier light and full, and under
   torch.profiler, the same run; the ring's memory per second at each tier.
   glibc's trimming is off in every mode (MALLOC_TRIM/MMAP_THRESHOLD_): its
   page faults otherwise double the step time here and hide the probes.
19. (--part stacks, also in the full run) Per-op cost of --python-stacks on
   the loop of 1 (PyTorch 1.13, Python 3.11): untraced, torch.profiler with
   and without with_stack=True, torchprobe without and with --python-stacks.
20. (--part sched, also in the full run) What --sched costs: per context
   switch of a traced thread (tools/bench_pingpong.py, two threads handing a
   byte through pipes: untraced, record, record --sched), and as step time
   on the training loop (record vs record --sched), the same run.
21. (--part categories, also in the full run) What the memory categories
   cost (--memory --shapes): per op on the loop of 1 against --shapes and
   --memory apart and record_shapes + profile_memory, the same run; and
   record's peak RSS over --categories-seconds (60; 600 for the issue's ten
   minutes) of the training loop with --memory and with --memory --shapes.
"""
import argparse
import os
import signal
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"
TARGET = os.path.join(HERE, "bench_target.py")
SUMMARY = re.compile(
    r"(\d+) op events, (\d+) dropped.*?; (\S+) attach ([\d.]+) ms, detach ([\d.]+) ms")
PROBE_COST = re.compile(r"probe cost ([\d.]+) us per op")


def run(argv, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def loop_ns(stdout):
    return int(re.search(r"loop_ns (\d+)", stdout).group(1))


def traced(torchprobe, extra, target, out):
    p = run([torchprobe, "record", "-o", out] + extra + ["--"] + target)
    m = SUMMARY.search(p.stderr)
    if not m:
        sys.exit(f"bench: no summary from torchprobe: {p.stderr.strip()}")
    events, dropped = int(m.group(1)), int(m.group(2))
    return p, events, dropped, float(m.group(4)), float(m.group(5))


def traced_pid(torchprobe, pid, out):
    p = run([torchprobe, "record", "--pid", str(pid), "--duration", "1", "-o", out])
    m = SUMMARY.search(p.stderr)
    if not m:
        sys.exit(f"bench: no summary from torchprobe: {p.stderr.strip()}")
    return p, int(m.group(1)), int(m.group(2)), float(m.group(4)), float(m.group(5))


def bench_ops(tp, args, out):
    """Part 1 (and 2, 4, 6 from the same runs): per-op cost against its floors."""
    ops_per_iter = float(run([PYTHON, TARGET, "--count"]).stdout.split()[1])
    calls = ops_per_iter * args.iters
    target = [PYTHON, TARGET, "--iters", str(args.iters)]
    modes = ("torch.profiler", "ret floor", "uretprobe floor", "torchprobe ret", "torchprobe")
    times = {m: [] for m in ("untraced",) + modes}
    attach, detach, sizes, drops, calibrated = [], [], [], 0, []
    for _ in range(args.rounds):  # interleaved: drift hits every mode alike
        times["untraced"].append(loop_ns(run(target).stdout))
        times["torch.profiler"].append(loop_ns(run(target + ["--profile"]).stdout))
        p, _, _, _, _ = traced(tp, ["--empty-probes"], target, out)
        times["ret floor"].append(loop_ns(p.stdout))
        p, _, _, _, _ = traced(tp, ["--empty-probes=uretprobe"], target, out)
        times["uretprobe floor"].append(loop_ns(p.stdout))
        p, _, _, _, _ = traced(tp, ["--returns", "ret"], target, out)
        times["torchprobe ret"].append(loop_ns(p.stdout))
        p, events, dropped, a, d = traced(tp, ["--returns", "uretprobe"], target, out)
        times["torchprobe"].append(loop_ns(p.stdout))
        m = PROBE_COST.search(p.stderr)
        if m:
            calibrated.append(float(m.group(1)))
        attach.append(a)
        detach.append(d)
        drops += dropped
        sizes.append(os.path.getsize(out) / (events / 2))
    med = {m: statistics.median(v) for m, v in times.items()}
    cost = {m: (med[m] - med["untraced"]) / calls for m in med}
    print(f"per-op cost, {ops_per_iter:.0f} aten ops/iteration x {args.iters} iterations, "
          f"median of {args.rounds} fresh processes per mode:")
    for m in modes:
        print(f"  {m:15s} {cost[m] * 1e-3:7.3f} us/op  (loop {med[m] / 1e6:.1f} ms)")
    print(f"  untraced        loop {med['untraced'] / 1e6:.1f} ms")
    print(f"RATIO torchprobe / uretprobe floor:   {cost['torchprobe'] / cost['uretprobe floor']:.3f}"
          "   (target <= 1.2; --returns uretprobe)")
    print(f"RATIO torchprobe / torch.profiler:    {cost['torchprobe'] / cost['torch.profiler']:.3f}")
    print(f"RATIO torchprobe ret / ret floor:     {cost['torchprobe ret'] / cost['ret floor']:.3f}"
          "   (--returns ret against empty programs on the same points)")
    print(f"RATIO torchprobe ret / torchprobe:    {cost['torchprobe ret'] / cost['torchprobe']:.3f}"
          "   (what single-stepping every `ret` costs against uretprobes)")
    print(f"attach all op probes at launch: median {statistics.median(attach):.1f} ms; "
          f"detach: median {statistics.median(detach):.1f} ms")
    print(f"trace size: {statistics.median(sizes):.1f} bytes per op slice; drops in PyTorch runs: {drops}")
    p, events, _, _, _ = traced(tp, ["--returns", "uretprobe", "--compress"], target, out)
    print(f"trace size with --compress: {os.path.getsize(out) / (events / 2):.1f} bytes per op slice"
          "   (target <= 8; plain target <= 20, see perfetto_writer.h for why it is not reached)")
    if calibrated:
        print(f"probe cost calibrated at start (uretprobe returns): median "
              f"{statistics.median(calibrated):.3f} us per op, against {cost['torchprobe'] * 1e-3:.3f} "
              "us/op measured above: the calibration is a lower bound")


def bench_memory(tp, args, out):
    allocs = float(run([PYTHON, TARGET, "--count-allocations"]).stdout.split()[1]) * args.iters
    target = [PYTHON, TARGET, "--iters", str(args.iters)]
    modes = ("untraced", "profiler", "profile_memory", "floor", "floor + memory", "torchprobe",
             "torchprobe --memory")
    times = {m: [] for m in modes}
    for _ in range(args.rounds):  # interleaved, fresh processes
        times["untraced"].append(loop_ns(run(target).stdout))
        times["profiler"].append(loop_ns(run(target + ["--profile"]).stdout))
        times["profile_memory"].append(loop_ns(run(target + ["--profile-memory"]).stdout))
        for mode, extra in (("floor", ["--empty-probes"]), ("floor + memory", ["--empty-probes", "--memory"]),
                            ("torchprobe", ["--returns", "ret"]),
                            ("torchprobe --memory", ["--returns", "ret", "--memory"])):
            p, _, _, _, _ = traced(tp, extra, target, out)
            times[mode].append(loop_ns(p.stdout))
    med = {m: statistics.median(v) for m, v in times.items()}
    per_alloc = lambda a, b: (med[a] - med[b]) / allocs
    print(f"memory: {allocs / args.iters:.0f} CPU allocations/iteration x {args.iters} iterations, "
          f"median of {args.rounds} fresh processes per mode:")
    for m in modes:
        print(f"  {m:20s} loop {med[m] / 1e6:.1f} ms")
    added, floor = per_alloc("torchprobe --memory", "torchprobe"), per_alloc("floor + memory", "floor")
    print(f"  --memory adds {added * 1e-3:.3f} us per allocation; empty programs on the same points "
          f"{floor * 1e-3:.3f} us (ops probed with `ret` probes in both)")
    print(f"RATIO --memory per allocation / empty-probe floor:     {added / floor:.3f}")
    print(f"RATIO torchprobe --memory / profile(profile_memory):  "
          f"{(med['torchprobe --memory'] - med['untraced']) / (med['profile_memory'] - med['untraced']):.3f}"
          "   (added time of the whole loop)")


def bench_writers(binary, tmp, slices=1_050_000):
    """Part 5: one line per writer, from its own process."""
    print(f"writers, {slices} synthetic op slices each (export incl. fsync; RSS of the writing process):")
    for line in run([binary, str(slices), tmp]).stdout.splitlines():
        f = line.split()
        print(f"  {f[1]:9s} {float(f[5]):8.1f} ns/slice {float(f[7]):7.1f} B/slice  "
              f"RSS {float(f[9]):.1f} MiB at 10%, peak {float(f[11]):.1f} MiB")


def per_op_costs(tp, python, iters, rounds, out, modes):
    """Median loop times of `python` bench_target.py in each mode, as
    per-op costs over untraced; also the ops per iteration."""
    ops_per_iter = float(run(python + ["--count"]).stdout.split()[1])
    target = python + ["--iters", str(iters)]
    times = {m: [] for m in ("untraced",) + tuple(modes)}
    for _ in range(rounds):  # interleaved: drift hits every mode alike
        times["untraced"].append(loop_ns(run(target).stdout))
        for mode, how in modes.items():
            if how is None:
                times[mode].append(loop_ns(run(target + ["--profile"]).stdout))
            else:
                times[mode].append(loop_ns(traced(tp, how, target, out)[0].stdout))
    med = {m: statistics.median(v) for m, v in times.items()}
    calls = ops_per_iter * iters
    return ops_per_iter, med, {m: (med[m] - med["untraced"]) / calls for m in med}


def bench_torch2(tp, rounds, iters, out):
    root = run([os.path.join(HERE, "torch2-root"), "--print-path"]).stdout.strip()
    if subprocess.run([os.path.join(HERE, "torch2-root"), "--check"]).returncode != 0:
        print(f"PyTorch 2.x: skipped, no root at {root} (tools/torch2-root builds it)")
        return
    script = f"/tmp/torchprobe-bench-target-{os.getpid()}.py"
    with open(TARGET) as src, open(root + script, "w") as dst:
        dst.write(src.read())
    python = ["unshare", "-m", "sh", "-c", 'mount -t proc proc "$0/proc" && exec chroot "$0" python3 "$@"',
              root, script]
    version = run(python[:-1] + ["-c", "import torch; print(torch.__version__)"]).stdout.strip()
    modes = {"torch.profiler": None, "uretprobe floor": ["--empty-probes=uretprobe"],
             "torchprobe": ["--returns", "uretprobe"]}
    try:
        for label, flags in (("unboxed (at::_ops::*::call)", []),
                             ("through torch.ops.aten (boxed)", ["--torchops"])):
            n, med, cost = per_op_costs(tp, python + flags, iters, rounds, out, modes)
            print(f"PyTorch {version}, ops {label}: {n:.1f} aten ops/iteration x {iters}, "
                  f"median of {rounds}:")
            for m in modes:
                print(f"  {m:15s} {cost[m] * 1e-3:7.3f} us/op  (loop {med[m] / 1e6:.1f} ms)")
            print(f"  untraced        loop {med['untraced'] / 1e6:.1f} ms")
            print(f"RATIO 2.x {flags and 'boxed' or 'unboxed'} torchprobe / uretprobe floor: "
                  f"{cost['torchprobe'] / cost['uretprobe floor']:.3f}; / torch.profiler: "
                  f"{cost['torchprobe'] / cost['torch.profiler']:.3f}")
    finally:
        os.remove(root + script)
def unit_costs(tp, target, units, rounds, out):
    """Median loop times of `target` untraced, under torch.profiler, with
    empty programs on torchprobe's points (the floor; returns through
    uretprobes in both: `ret` probes would add their own single-steps, which
    the main part measures) and traced; and the cost of each per unit."""
    modes = ("torch.profiler", "floor", "torchprobe")
    times = {m: [] for m in ("untraced",) + modes}
    for _ in range(rounds):  # interleaved: drift hits every mode alike
        times["untraced"].append(loop_ns(run(target).stdout))
        times["torch.profiler"].append(loop_ns(run(target + ["--profile"]).stdout))
        times["floor"].append(loop_ns(traced(tp, ["--empty-probes=uretprobe"], target, out)[0].stdout))
        times["torchprobe"].append(loop_ns(traced(tp, ["--returns", "uretprobe"], target, out)[0].stdout))
    med = {m: statistics.median(v) for m, v in times.items()}
    return modes, med, {m: (med[m] - med["untraced"]) / units for m in med}


def print_unit_costs(what, unit, units, modes, med, cost):
    for m in modes:
        print(f"  {m:15s} {cost[m] * 1e-3:7.3f} us/{unit}  (loop {med[m] / 1e6:.1f} ms)")
    print(f"  untraced        loop {med['untraced'] / 1e6:.1f} ms ({med['untraced'] / units / 1e3:.2f} us/{unit})")
    print(f"RATIO {what} torchprobe / empty-probe floor: {cost['torchprobe'] / cost['floor']:.3f}")
    print(f"RATIO {what} torchprobe / torch.profiler:    {cost['torchprobe'] / cost['torch.profiler']:.3f}")


def annotations(tp, rounds, iters, out):
    modes, med, cost = unit_costs(tp, [PYTHON, TARGET, "--annotations", "--iters", str(iters)], iters, rounds, out)
    print(f"per-annotation cost, {iters} empty record_function ranges, median of {rounds} "
          "fresh processes per mode:")
    print_unit_costs("annotations", "range", iters, modes, med, cost)


def bench_autograd(tp, rounds, iters, out):
    target = [PYTHON, TARGET, "--autograd", "--iters", str(iters)]
    nodes = float(run(target[:3] + ["--count"]).stdout.split()[1]) * iters
    modes, med, cost = unit_costs(tp, target, nodes, rounds, out)
    print(f"per-autograd-node cost, {nodes / iters:.0f} nodes per backward x {iters}, median of {rounds} "
          "fresh processes per mode (a node's backward ops included):")
    print_unit_costs("autograd nodes", "node", nodes, modes, med, cost)


def bench_cuda(tp, rounds, iters, out):
    loop = os.path.join(os.path.dirname(tp), "fixtures", "cuda", "cuda_loop")
    target = [loop, str(iters)]
    times = {m: [] for m in ("untraced", "floor", "torchprobe")}
    for _ in range(rounds):  # interleaved, fresh processes
        times["untraced"].append(float(run(target).stdout.split()[2]))
        # cuda_loop maps libgcc_s: returns through uretprobes, so that floor
        p, _, _, _, _ = traced(tp, ["--empty-probes=uretprobe"], target, out)
        times["floor"].append(float(p.stdout.split()[2]))
        p, _, dropped, _, _ = traced(tp, [], target, out)
        times["torchprobe"].append(float(p.stdout.split()[2]))
    med = {m: statistics.median(v) for m, v in times.items()}
    calls = 8  # per iteration: 3 ops + 5 CUDA/NCCL calls, each an entry and a return
    print(f"CUDA probes (cuda_loop, {calls} probed calls/iteration x {iters}, median of {rounds}): "
          f"untraced {med['untraced']:.0f} ns/iteration, floor "
          f"{(med['floor'] - med['untraced']) / calls / 1e3:.3f} us/call, torchprobe "
          f"{(med['torchprobe'] - med['untraced']) / calls / 1e3:.3f} us/call, drops {dropped}")
    print(f"RATIO cuda calls / empty-probe floor: "
          f"{(med['torchprobe'] - med['untraced']) / (med['floor'] - med['untraced']):.3f}"
          "   (arguments read at each CUDA call's entry)")


def bench_cupti(tp, rounds, iters, out):
    """The collector's cost per CUDA runtime call (record --cupti vs record),
    with the fake CUPTI: CUPTI's own cost on a GPU is not in it (tools/gpu-e2e
    times a real loop)."""
    loop = os.path.join(os.path.dirname(tp), "fixtures", "cuda", "cupti_loop")
    if not os.path.exists(loop):
        print("CUPTI collector: skipped (no CUPTI headers: the collector and its fixture are not built)")
        return
    target = [loop, str(iters)]
    times = {m: [] for m in ("untraced", "torchprobe", "torchprobe --cupti")}
    for _ in range(rounds):  # interleaved, fresh processes
        times["untraced"].append(float(run(target).stdout.split()[2]))
        p, _, _, _, _ = traced(tp, [], target, out)
        times["torchprobe"].append(float(p.stdout.split()[2]))
        p, _, _, _, _ = traced(tp, ["--cupti"], target, out)
        times["torchprobe --cupti"].append(float(p.stdout.split()[2]))
    med = {m: statistics.median(v) for m, v in times.items()}
    calls = 3  # runtime calls per iteration: a launch, a copy, a sync (2 reach CUPTI's records)
    print(f"CUPTI collector (cupti_loop, fake CUPTI, {calls} runtime calls/iteration x {iters}, median of {rounds}): "
          f"untraced {med['untraced']:.0f} ns/iteration, torchprobe {med['torchprobe']:.0f}, "
          f"--cupti {med['torchprobe --cupti']:.0f}")
    print(f"RATIO --cupti / probes alone (added cost per iteration): "
          f"{(med['torchprobe --cupti'] - med['untraced']) / max(med['torchprobe'] - med['untraced'], 1):.3f}"
          "   (the collector's callback and forwarding; not CUPTI's own cost)")


TRAIN = os.path.join(HERE, "bench_train.py")
WINDOW = re.compile(r"window \S+: (\d+) events, \d+ dropped, attach ([\d.]+) ms, detach ([\d.]+) ms, cost ([\d.]+) ms")
DUTY = re.compile(r"stopped: windows (\d+) taken, (\d+) skipped.*duty cycle ([\d.]+)%")


def window_costs(tp, python, label, tmp, windows=20):
    """A window's attach and detach at a warm plan cache: the agent taking a
    0.5 s window every second (no budget) on a training loop run by
    `python`, until `windows` windows are written."""
    tag = f"torchprobe-bench-wcost-{os.getpid()}-{label.replace(' ', '')}"
    out_dir = os.path.join(tmp, f"wcost-{label.replace(' ', '')}")
    log = open(out_dir + ".log", "w+")
    train = subprocess.Popen(python + ["--seconds", "600", "--tag", tag], stdout=subprocess.DEVNULL)
    agent = subprocess.Popen([tp, "agent", "-o", out_dir, "--match-cmdline", tag, "--every", "1", "--window", "0.5",
                              "--budget", "none", "--socket", out_dir + ".sock",
                              "--plan-cache", os.path.join(tmp, "plans")], stderr=log)
    found = []
    deadline = time.monotonic() + 300
    while len(found) <= windows and time.monotonic() < deadline:  # the first plans the cache: left out
        time.sleep(1)
        log.seek(0)
        found = [tuple(float(g) for g in m.groups()) for m in WINDOW.finditer(log.read())]
    agent.send_signal(signal.SIGTERM)
    agent.wait(timeout=120)
    train.kill()
    train.wait()
    warm = found[1:windows + 1]
    if not warm:
        print(f"  {label}: no window written (see {out_dir}.log)")
        return
    both = [w[1] + w[2] for w in warm]
    print(f"  {label}: {len(warm)} windows at a warm plan cache: attach median "
          f"{statistics.median(w[1] for w in warm):.1f} ms, detach median {statistics.median(w[2] for w in warm):.1f} ms, "
          f"attach + detach median {statistics.median(both):.1f} ms (most {max(both):.1f})")
    print(f"RATIO window attach + detach / 100 ms, {label}: {statistics.median(both) / 100:.3f}   (target <= 1)")


RING = re.compile(r"the ring held (\d+) events in ([\d.]+) MB")


def bench_flight(tp, rounds, seconds, tmp):
    """Part 18: the flight recorder's step-time cost on the training loop
    (tools/bench_train.py, launched), light and full tier, against no tracing
    and torch.profiler in the same run; and the ring's memory per second."""
    out = os.path.join(tmp, "flight.pftrace")
    modes = ("untraced", "light", "full", "torch.profiler")
    step_ns = {m: [] for m in modes}
    ring_bps = {"light": [], "full": []}
    train = [PYTHON, TRAIN, "--seconds", str(seconds)]
    # glibc returns the loop's large blocks to the kernel after each step and
    # faults them in again in the next: in this VM that doubles the step
    # time and varies with whatever else keeps memory (torch.profiler's
    # events made the loop 2x faster). Every mode runs without it, so the
    # ratios are the probes' cost.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 32), MALLOC_TRIM_THRESHOLD_=str(1 << 32))
    for _ in range(rounds):
        for mode in modes:
            if mode == "untraced":
                p = run(train, env)
            elif mode == "torch.profiler":
                p = run(train + ["--profile"], env)
            else:
                p = run([tp, "record", "--flight-recorder", "600", "--flight-tier", mode, "-o", out, "--"] + train, env)
                m = RING.search(p.stderr)
                if m:  # nothing dumped: what the ring holds is all it kept, over the whole run
                    ring_bps[mode].append(float(m.group(2)) * 1e6 / seconds)
            step_ns[mode].append(int(re.search(r"step_ns (\d+)", p.stdout).group(1)))
    med = {m: statistics.median(v) for m, v in step_ns.items()}
    print(f"flight recorder on the training loop ({seconds:g} s per run, median of {rounds}; step time):")
    for mode in modes:
        extra = f", ring {statistics.median(ring_bps[mode]) / 1e3:.1f} KB per second" if ring_bps.get(mode) else ""
        print(f"  {mode:15s} {med[mode] / 1e3:9.1f} us per step, {med[mode] / med['untraced'] - 1:+.2%}{extra}")
    print(f"RATIO flight light tier / untraced step time: {med['light'] / med['untraced']:.4f}   (target <= 1.005)")
    print(f"RATIO flight full tier / untraced step time: {med['full'] / med['untraced']:.4f}")
    print(f"RATIO flight full tier / torch.profiler step time: {med['full'] / med['torch.profiler']:.4f}")


def bench_sched(tp, rounds, seconds, tmp):
    """Part 20: --sched's cost per context switch of a traced thread, and on
    the training loop's step time, against record without it."""
    out = os.path.join(tmp, "sched.pftrace")
    pingpong = [PYTHON, os.path.join(HERE, "bench_pingpong.py"), "--seconds", str(seconds)]
    train = [PYTHON, TRAIN, "--seconds", str(seconds)]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 32), MALLOC_TRIM_THRESHOLD_=str(1 << 32))
    modes = {"untraced": None, "record": [], "record --sched": ["--sched"]}
    trip = {m: [] for m in modes}
    switches = []
    step = {m: [] for m in ("record", "record --sched")}
    for _ in range(rounds):  # interleaved: drift hits every mode alike
        for mode, flags in modes.items():
            argv = pingpong if flags is None else [tp, "record", *flags, "-o", out, "--"] + pingpong
            p = run(argv, env)
            trip[mode].append(int(re.search(r"roundtrip_ns (\d+)", p.stdout).group(1)))
            switches.append(float(re.search(r"switches_per_roundtrip ([0-9.]+)", p.stdout).group(1)))
            if flags is not None:
                p = run([tp, "record", *flags, "-o", out, "--"] + train, env)
                step[mode].append(int(re.search(r"step_ns (\d+)", p.stdout).group(1)))
    med = {m: statistics.median(v) for m, v in trip.items()}
    per_trip = statistics.median(switches)
    print(f"--sched on two threads handing a byte through pipes ({seconds:g} s per run, median of {rounds}; "
          f"{per_trip:.2f} switches per round trip):")
    for mode in modes:
        print(f"  {mode:15s} {med[mode] / 1e3:9.2f} us per round trip")
    per_switch = (med["record --sched"] - med["record"]) / per_trip
    print(f"  --sched adds {per_switch / 1e3:.2f} us per context switch of a traced thread")
    steps = {m: statistics.median(v) for m, v in step.items()}
    print(f"  training loop: {steps['record'] / 1e3:.1f} us per step under record, "
          f"{steps['record --sched'] / 1e3:.1f} with --sched ({steps['record --sched'] / steps['record'] - 1:+.2%})")
    print(f"RATIO sched round trip / record round trip: {med['record --sched'] / med['record']:.4f}")
    print(f"RATIO sched step time / record step time: {steps['record --sched'] / steps['record']:.4f}")


def bench_agent(tp, rounds, seconds, tmp):
    """Part 14: step time beside the agent at its defaults, against none."""
    print("agent windows' cost to their target (attach until capture, detach until the probes are out of its code):")
    window_costs(tp, [PYTHON, TRAIN], "PyTorch 1.13", tmp)
    root = run([os.path.join(HERE, "torch2-root"), "--print-path"]).stdout.strip()
    if subprocess.run([os.path.join(HERE, "torch2-root"), "--check"]).returncode == 0:
        script = f"/tmp/torchprobe-bench-train-{os.getpid()}.py"
        with open(TRAIN) as src, open(root + script, "w") as dst:
            dst.write(src.read())
        try:
            window_costs(tp, ["unshare", "-m", "sh", "-c",
                              'mount -t proc proc "$0/proc" && exec chroot "$0" python3 "$@"', root, script],
                         "PyTorch 2.6", tmp)
        finally:
            os.remove(root + script)
    else:
        print(f"  PyTorch 2.6: skipped, no root at {root} (tools/torch2-root builds it)")
    tag = f"torchprobe-bench-agent-{os.getpid()}"
    train = [PYTHON, TRAIN, "--seconds", str(seconds), "--tag", tag]
    step = lambda out: int(re.search(r"step_ns (\d+)", out).group(1))
    plain, traced_steps, windows, duties = [], [], [], []
    for r in range(rounds):  # interleaved: drift hits both alike
        plain.append(step(run(train).stdout))
        out_dir = os.path.join(tmp, f"agent{r}")
        log = open(os.path.join(tmp, f"agent{r}.log"), "w+")
        agent = subprocess.Popen([tp, "agent", "-o", out_dir, "--match-cmdline", tag,
                                  "--socket", os.path.join(tmp, "agent.sock"),
                                  "--plan-cache", os.path.join(tmp, "plans")], stderr=log)
        traced_steps.append(step(run(train).stdout))
        agent.send_signal(signal.SIGTERM)
        if agent.wait(timeout=120) != 0:
            sys.exit(f"bench: the agent exited with {agent.returncode}")
        log.seek(0)
        text = log.read()
        windows += [tuple(float(g) for g in m.groups()) for m in WINDOW.finditer(text)]
        m = DUTY.search(text)
        if m:
            duties.append((int(m.group(1)), int(m.group(2)), float(m.group(3))))
    ratio = statistics.median(traced_steps) / statistics.median(plain)
    print(f"agent at its defaults beside a training loop, {seconds:.0f} s x {rounds} rounds each, interleaved:")
    print(f"  step time untraced {statistics.median(plain) / 1e3:.1f} us, with the agent "
          f"{statistics.median(traced_steps) / 1e3:.1f} us (medians of the rounds' means)")
    for r, (a, b) in enumerate(zip(plain, traced_steps)):
        print(f"  round {r}: untraced {a / 1e3:.1f} us/step, with the agent {b / 1e3:.1f} us/step")
    print(f"RATIO step time with agent / without: {ratio:.4f}   (target <= 1.01; the rounds show the noise)")
    for taken, skipped, duty in duties:
        print(f"  agent: {taken} windows taken, {skipped} skipped by the budget; measured duty cycle {duty:.3f}%")
    if windows:
        print(f"  per window: attach median {statistics.median(w[1] for w in windows):.1f} ms, detach median "
              f"{statistics.median(w[2] for w in windows):.1f} ms, cost to the target median "
              f"{statistics.median(w[3] for w in windows):.1f} ms ({len(windows)} windows, "
              f"{statistics.median(w[0] for w in windows):.0f} op events each)")
SOAK = os.path.join(HERE, "bench_soak.py")


def agent_resources(agent_pid, out_dir):
    """RSS kB, open fds, live keepers under the agent, index bytes."""
    rss = 0
    with open(f"/proc/{agent_pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{agent_pid}/fd"))
    keepers = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        keepers += comm == "torchprobe-keep" and ppid == agent_pid
    index = os.path.join(out_dir, "index.jsonl")
    return rss, fds, keepers, os.path.getsize(index) if os.path.exists(index) else 0


def metrics_now(address):
    import urllib.request
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line and not line.startswith("#") and "{" not in line}


def bench_soak(tp, seconds, tmp):
    """Part 17: the agent's resources and duty cycle over a long run."""
    tag = f"torchprobe-bench-soak-{os.getpid()}"
    out_dir = os.path.join(tmp, "soak")
    log = open(os.path.join(tmp, "soak-agent.log"), "w+")
    agent = subprocess.Popen([tp, "agent", "-o", out_dir, "--match-cmdline", tag, "--socket",
                              os.path.join(tmp, "soak.sock"), "--plan-cache", os.path.join(tmp, "plans"),
                              "--metrics", "127.0.0.1:0"], stderr=log)
    job = subprocess.Popen([PYTHON, SOAK, "--seconds", str(seconds), "--tag", tag], stdout=subprocess.PIPE, text=True)
    address = None
    samples, duties = [], []
    start = time.monotonic()
    while job.poll() is None:
        time.sleep(30 if address else 2)
        log.seek(0)
        if not address:
            m = re.search(r"metrics on ([0-9.]+:[0-9]+)", log.read())
            address = m.group(1) if m else None
            continue
        samples.append((time.monotonic() - start,) + agent_resources(agent.pid, out_dir))
        metrics = metrics_now(address)
        duties.append(metrics.get("torchprobe_agent_duty_cycle", 0))
    job_out = job.stdout.read().strip()
    metrics = metrics_now(address) if address else {}
    agent.send_signal(signal.SIGTERM)
    if agent.wait(timeout=300) != 0:
        sys.exit(f"bench: the agent exited with {agent.returncode}")
    log.seek(0)
    text = log.read()
    windows = [tuple(float(g) for g in m.groups()) for m in WINDOW.finditer(text)]
    head = [s for s in samples if s[0] <= 300] or samples[:1]
    tail = [s for s in samples if s[0] >= samples[-1][0] - 300] or samples[-1:]
    print(f"agent soak: {seconds / 60:.0f} min beside a job forking 2 DataLoader workers every minute ({job_out}):")
    for i, name in ((1, "RSS kB"), (2, "open fds"), (3, "live keepers"), (4, "index bytes")):
        print(f"  {name:13s} first 5 min median {statistics.median(s[i] for s in head):9.0f}, last 5 min median "
              f"{statistics.median(s[i] for s in tail):9.0f}, most {max(s[i] for s in samples):9.0f}")
    budget = 0.01
    print(f"  windows: {int(metrics.get('torchprobe_agent_windows_taken_total', 0))} taken, "
          f"{int(metrics.get('torchprobe_agent_windows_skipped_total', 0))} skipped, "
          f"{int(metrics.get('torchprobe_agent_windows_failed_total', 0))} failed; "
          f"{int(metrics.get('torchprobe_agent_targets_found_total', 0))} targets found")
    if windows:
        costs = sorted(w[1] + w[2] for w in windows)
        print(f"  window attach + detach median {statistics.median(costs):.1f} ms over {len(costs)} windows")
    print(f"RATIO duty cycle / budget: highest sample {max(duties, default=0) / budget:.3f}, "
          f"at the end {metrics.get('torchprobe_agent_duty_cycle', 0) / budget:.3f}   (target <= 1)")
    print(f"RATIO RSS last 5 min / first 5 min: "
          f"{statistics.median(s[1] for s in tail) / max(statistics.median(s[1] for s in head), 1):.3f}   (flat: ~1)")


def per_op_modes(tp, rounds, iters, out, modes):
    """The loop of part 1 untraced and in each of `modes` (None: under
    torch.profiler; ["--profile-X"]: the target's own profiler flag; else
    torchprobe's options), interleaved in fresh processes: the aten ops per
    iteration, the median loop time per mode and the cost per op over untraced."""
    target = [PYTHON, TARGET, "--iters", str(iters)]
    n = float(run([PYTHON, TARGET, "--count"]).stdout.split()[1])
    times = {m: [] for m in ("untraced",) + tuple(modes)}
    for _ in range(rounds):
        times["untraced"].append(loop_ns(run(target).stdout))
        for mode, how in modes.items():
            if how is None or how[0].startswith("--profile"):
                times[mode].append(loop_ns(run(target + (how or ["--profile"])).stdout))
            else:
                times[mode].append(loop_ns(traced(tp, how, target, out)[0].stdout))
    med = {m: statistics.median(v) for m, v in times.items()}
    cost = {m: (med[m] - med["untraced"]) / (n * iters) for m in med}
    return n, med, cost


def print_per_op(title, n, iters, rounds, modes, med, cost):
    print(f"{title}: {n:.0f} aten ops/iteration x {iters}, median of {rounds} fresh processes per mode:")
    width = max(len(m) for m in modes) + 2
    for m in modes:
        print(f"  {m:{width}s} {cost[m] * 1e-3:7.3f} us/op  (loop {med[m] / 1e6:.1f} ms)")
    print(f"  {'untraced':{width}s} loop {med['untraced'] / 1e6:.1f} ms")


def bench_shapes(tp, rounds, iters, out):
    modes = {"torch.profiler": None, "profiler record_shapes": ["--profile-shapes"],
             "uretprobe floor": ["--empty-probes=uretprobe"], "torchprobe": ["--returns", "uretprobe"],
             "torchprobe --shapes": ["--returns", "uretprobe", "--shapes"]}
    n, med, cost = per_op_modes(tp, rounds, iters, out, modes)
    print_per_op("--shapes", n, iters, rounds, modes, med, cost)
    print(f"RATIO torchprobe --shapes / torchprobe:        {cost['torchprobe --shapes'] / cost['torchprobe']:.3f}")
    print(f"RATIO torchprobe --shapes / uretprobe floor:   "
          f"{cost['torchprobe --shapes'] / cost['uretprobe floor']:.3f}")
    print(f"RATIO torchprobe --shapes / profiler record_shapes: "
          f"{cost['torchprobe --shapes'] / cost['profiler record_shapes']:.3f}")


def bench_categories(tp, rounds, iters, out, seconds):
    """Part 21: what the memory categories cost. Per op on the loop of part 1:
    --memory --shapes (each Tensor argument's storage and version read, and
    the categorizer) against --shapes and --memory alone and against
    record_shapes + profile_memory, same run. Then record's peak memory (max
    RSS) over `seconds` of the training loop (tools/bench_train.py) with
    --memory --shapes, which keeps the run's data flow until the end."""
    base = ["--returns", "uretprobe"]
    modes = {"profiler shapes + memory": ["--profile-shapes", "--profile-memory"], "torchprobe": base,
             "torchprobe --shapes": base + ["--shapes"], "torchprobe --memory": base + ["--memory"],
             "torchprobe --memory --shapes": base + ["--memory", "--shapes"]}
    n, med, cost = per_op_modes(tp, rounds, iters, out, modes)
    print_per_op("memory categories", n, iters, rounds, modes, med, cost)
    both = cost["torchprobe --memory --shapes"]
    apart = cost["torchprobe --shapes"] + cost["torchprobe --memory"] - cost["torchprobe"]
    print(f"  categories add {(both - apart) * 1e-3:.3f} us/op over --shapes and --memory apart")
    print(f"RATIO --memory --shapes / (--shapes + --memory apart):     {both / apart:.3f}")
    print(f"RATIO --memory --shapes / profiler shapes + memory:        {both / cost['profiler shapes + memory']:.3f}")
    for flags in (["--memory"], ["--memory", "--shapes"]):
        child = subprocess.Popen([tp, "record", "-q", "-o", out] + flags + ["--", PYTHON, TRAIN, "--seconds", str(seconds)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout = child.stdout.read()
        steps = re.search(r"steps (\d+)", stdout)
        print(f"record {' '.join(flags)} over {seconds:.0f} s of the training loop: peak RSS "
              f"{usage.ru_maxrss / 1024:.1f} MiB, {steps.group(1) if steps else '?'} steps, "
              f"trace {os.path.getsize(out) / 2**20:.1f} MiB")


def bench_stacks(tp, rounds, iters, out):
    """Part 19: what --python-stacks adds per op on the loop of part 1, against
    torchprobe without it and torch.profiler(with_stack=True), same run."""
    modes = {"torch.profiler": None, "profiler with_stack": ["--profile-stack"],
             "torchprobe": ["--returns", "uretprobe"],
             "torchprobe --python-stacks": ["--returns", "uretprobe", "--python-stacks"]}
    n, med, cost = per_op_modes(tp, rounds, iters, out, modes)
    print_per_op("--python-stacks", n, iters, rounds, modes, med, cost)
    print(f"RATIO torchprobe --python-stacks / torchprobe:          "
          f"{cost['torchprobe --python-stacks'] / cost['torchprobe']:.3f}")
    print(f"RATIO torchprobe --python-stacks / profiler with_stack: "
          f"{cost['torchprobe --python-stacks'] / cost['profiler with_stack']:.3f}")


def bench_children(tp, rounds, out, children=10):
    script = [PYTHON, os.path.join(HERE, "..", "tests", "fixtures", "forks.py"), "--children", str(children)]
    modes = {"traced (held)": [], "traced --no-hold-children": ["--no-hold-children"]}
    times = {m: [] for m in ("untraced",) + tuple(modes)}
    held = []
    children_ns = lambda p: int(re.search(r"children_ns (\d+)", p.stdout).group(1))
    for _ in range(rounds):  # interleaved, fresh processes
        times["untraced"].append(children_ns(run(script)))
        for mode, how in modes.items():
            p = traced(tp, how, script, out)[0]
            times[mode].append(children_ns(p))
            m = re.search(r"(\d+) forked child(?:ren)? held at their fork until attached, ([\d.]+) (ms|s) each", p.stderr)
            if m and not how:
                held.append(float(m.group(2)) * (1000 if m.group(3) == "s" else 1))
    med = {m: statistics.median(v) for m, v in times.items()}
    print(f"forked children: {children} in turn, each 20 ops then exit; median of {rounds} fresh processes:")
    for m in times:
        print(f"  {m:27s} {med[m] / children / 1e6:7.1f} ms per child (fork to exit)")
    if held:
        print(f"  held at its fork until attached: {statistics.median(held):.0f} ms per child (torchprobe's summary)")
    print(f"RATIO held / untraced per child:      {med['traced (held)'] / med['untraced']:.3f}")
    print(f"RATIO held / not held per child:      {med['traced (held)'] / med['traced --no-hold-children']:.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--torchprobe", default="build/torchprobe")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=5000)
    parser.add_argument("--storm", type=int, default=100_000)
    parser.add_argument("--throw-depth", type=int, default=16)
    parser.add_argument("--throws", type=int, default=2000)
    parser.add_argument("--part", choices=("all", "ops", "memory", "writers", "torch2", "annotations", "cuda", "cupti", "autograd", "agent", "shapes", "children", "soak", "flight", "stacks", "sched", "categories"), default="all")
    parser.add_argument("--flight-seconds", type=float, default=15)
    parser.add_argument("--categories-seconds", type=float, default=60)
    parser.add_argument("--cuda-iters", type=int, default=10_000)
    parser.add_argument("--agent-seconds", type=float, default=150)
    parser.add_argument("--agent-rounds", type=int, default=2)
    parser.add_argument("--soak-seconds", type=float, default=1800)
    args = parser.parse_args()
    tp = os.path.abspath(args.torchprobe)
    tmp = tempfile.mkdtemp(prefix="torchprobe-bench-")
    out = os.path.join(tmp, "bench.pftrace")
    if args.part != "all":  # one part alone
        if args.part == "writers":
            bench_writers(os.path.join(os.path.dirname(tp), "bench_writers"), tmp)
        elif args.part == "ops":
            bench_ops(tp, args, out)
        elif args.part == "memory":
            bench_memory(tp, args, out)
        elif args.part == "cuda":
            bench_cuda(tp, args.rounds, args.cuda_iters, out)
        elif args.part == "cupti":
            bench_cupti(tp, args.rounds, args.cuda_iters, out)
        elif args.part == "annotations":
            annotations(tp, args.rounds, args.iters, out)
        elif args.part == "autograd":
            bench_autograd(tp, args.rounds, args.iters, out)
        elif args.part == "agent":
            bench_agent(tp, args.agent_rounds, args.agent_seconds, tmp)
        elif args.part == "shapes":
            bench_shapes(tp, args.rounds, args.iters, out)
        elif args.part == "children":
            bench_children(tp, args.rounds, out)
        elif args.part == "soak":
            bench_soak(tp, args.soak_seconds, tmp)
        elif args.part == "flight":
            bench_flight(tp, args.rounds, args.flight_seconds, tmp)
        elif args.part == "stacks":
            bench_stacks(tp, args.rounds, args.iters, out)
        elif args.part == "sched":
            bench_sched(tp, args.rounds, args.flight_seconds, tmp)
        elif args.part == "categories":
            bench_categories(tp, args.rounds, args.iters, out, args.categories_seconds)
        else:
            bench_torch2(tp, args.rounds, args.iters, out)
        shutil.rmtree(tmp)
        return
    bench_writers(os.path.join(os.path.dirname(tp), "bench_writers"), tmp)

    bench_ops(tp, args, out)

    # Attach and detach by --pid on a live, busy process (pages already in use).
    live_attach, live_detach = [], []
    for _ in range(args.rounds):
        target_p = subprocess.Popen([PYTHON, TARGET, "--iters", "10000000"],
                                    stdout=subprocess.DEVNULL)
        time.sleep(2.0)  # imported and looping
        _, _, _, a, d = traced_pid(tp, target_p.pid, out)
        target_p.kill()
        target_p.wait()
        live_attach.append(a)
        live_detach.append(d)
    print(f"attach --pid to a running loop: median {statistics.median(live_attach):.1f} ms; "
          f"detach: median {statistics.median(live_detach):.1f} ms   (target: detach <= 200 ms)")

    # One throw through N traced frames, per returns mode.
    depth = os.path.join(os.path.dirname(tp), "fixtures", "nesting", "throw_depth")
    throw_argv = [depth, str(args.throw_depth), str(args.throws)]
    throw_modes = ("untraced", "uretprobe", "ret")
    throw_ns = {m: [] for m in throw_modes}
    for _ in range(args.rounds):
        throw_ns["untraced"].append(float(run(throw_argv).stdout.split()[3]))
        for m in throw_modes[1:]:
            p, _, _, _, _ = traced(tp, ["--returns", m], throw_argv, out)
            throw_ns[m].append(float(p.stdout.split()[3]))
    base = statistics.median(throw_ns["untraced"])
    print(f"one C++ throw through {args.throw_depth} traced frames (their calls included), "
          f"median of {args.rounds}: untraced {base / 1e3:.1f} us")
    for m in throw_modes[1:]:
        med_m = statistics.median(throw_ns[m])
        print(f"  --returns {m:9s} {med_m / 1e3:8.1f} us per throw, +{(med_m - base) / 1e3:.1f} us traced")

    pipeline = os.path.join(os.path.dirname(tp), "bench_pipeline")
    best, flood = 0.0, None
    for rate in (2e6, 4e6, 8e6, 0):  # 0: as fast as the BPF generator goes
        p = run([pipeline, "--rate", str(int(rate)), "--seconds", "3", "-o", out])
        f = dict(zip(p.stdout.split()[0::2], p.stdout.split()[1::2]))
        consumed, dropped, secs = int(f["consumed"]), int(f["dropped"]), float(f["seconds"])
        achieved = consumed / secs
        print(f"event rate through userspace: target {rate / 1e6 if rate else 'max'} M/s -> "
              f"{achieved / 1e6:.2f} M events/s consumed, {dropped} dropped")
        if dropped == 0:
            best = max(best, achieved)
    print(f"RATE sustained with zero drops: {best / 1e6:.2f} M events/s   (target >= 2 M/s)")

    storm = os.path.join(os.path.dirname(tp), "fixtures", "op_storm")
    n = str(args.storm)
    p, events, dropped, _, _ = traced(tp, [], [storm, n], out)
    ns_per_iter = float(p.stdout.split()[2])
    print(f"real uprobes on this machine (op_storm, 2 op calls per iteration): "
          f"{events / (ns_per_iter * args.storm / 1e9) / 1e6:.3f} M events/s, "
          f"{ns_per_iter / 1e3:.1f} us per iteration, drops {dropped}: the trap, not userspace, "
          "bounds the real rate")
    bench_memory(tp, args, out)
    bench_cuda(tp, args.rounds, args.cuda_iters, out)
    bench_cupti(tp, args.rounds, args.cuda_iters, out)
    annotations(tp, args.rounds, args.iters, out)
    bench_autograd(tp, args.rounds, args.iters, out)
    bench_shapes(tp, args.rounds, args.iters, out)
    bench_stacks(tp, args.rounds, args.iters, out)
    bench_children(tp, args.rounds, out)
    bench_flight(tp, args.rounds, args.flight_seconds, tmp)
    bench_sched(tp, args.rounds, args.flight_seconds, tmp)
    bench_categories(tp, args.rounds, args.iters, out, args.categories_seconds)
    bench_torch2(tp, args.rounds, args.iters, out)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
