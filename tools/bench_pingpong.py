"""`make bench`'s context-switch loop for --sched's cost (tools/bench.py
part 20): two threads hand a byte back and forth through two pipes for
--seconds (each blocks in read until the other writes: a switch each way),
with torch imported so that torchprobe attaches. Prints `roundtrip_ns N`
and `switches_per_roundtrip X` (from both threads' schedstat run counts)."""
import argparse
import os
import threading
import time

import torch  # noqa: F401  (a target torchprobe attaches to)


def schedstat_runs(tid):
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[2])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    stop = threading.Event()
    tids = []

    def echo():
        tids.append(threading.get_native_id())
        while True:
            byte = os.read(a_r, 1)
            if byte == b"q":
                return
            os.write(b_w, byte)

    echoer = threading.Thread(target=echo)
    echoer.start()
    time.sleep(0.5)  # the probes attach meanwhile
    me = threading.get_native_id()
    runs0 = schedstat_runs(me) + schedstat_runs(tids[0])
    rounds = 0
    start = time.monotonic_ns()
    deadline = start + int(args.seconds * 1e9)
    while time.monotonic_ns() < deadline:
        for _ in range(100):
            os.write(a_w, b"x")
            os.read(b_r, 1)
        rounds += 100
    elapsed = time.monotonic_ns() - start
    runs = schedstat_runs(me) + schedstat_runs(tids[0]) - runs0
    os.write(a_w, b"q")
    echoer.join()
    print(f"roundtrip_ns {elapsed // rounds}")
    print(f"switches_per_roundtrip {runs / rounds:.3f}")


if __name__ == "__main__":
    main()
