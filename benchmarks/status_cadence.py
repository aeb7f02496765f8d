"""How often a watcher's status line can move: the step beat, the shared read and the looks, simulated.

    python benchmarks/status_cadence.py                     # beats every 1.0, 0.75, 0.5 s; 1, 10, 30, 60 watchers
    python benchmarks/status_cadence.py --beat 1.0 0.5 --seconds 600

No server and no run: the rules alone, in virtual time, to choose the beat (stability/training/sinks.py, Note
[A moving step]) against the page's rhythm (pages/ui/status.py, Note [A status that moves]).  A run steps every
``--step-s`` seconds (the default run's ~36 steps/s on 2 cores) and logs every ``--log-every`` steps (a
20,000-step run's 100); a log step writes the step with its rows, and between them the sink writes it when
``beat`` seconds have passed since the last write.  N watchers each look every ``--every`` seconds (their
phases at random, a few ms of jitter); a look reads the server's shared look at the run, read again only when
it is :data:`stability.live.tail.READ_EVERY_S` old (by whichever watcher comes first).  Reported per beat and N:
the seconds between two changes of a watcher's step (median, max) and the share of those over 1.5 s.  The
real server's figures come from benchmarks/live_watchers.py --clients headless --run long.
"""
from __future__ import annotations

import argparse
import bisect
import random
import statistics


def written_steps(beat: float, step_s: float, log_every: int, seconds: float) -> tuple[list[float], list[int]]:
    """The times at which the run's stored step changed, and the step then (the sink's rules)."""
    times, steps = [], []
    now, step, last_write, beaten = 0.0, 0, 0.0, None
    while now < seconds:
        now, step = now + step_s, step + 1
        if step % log_every == 0:  # a flush: the rows and the step, the heartbeat with them
            times.append(now), steps.append(step)
            last_write = now
        elif step != beaten and now - last_write >= beat:
            times.append(now), steps.append(step)
            last_write, beaten = now, step
    return times, steps


def seen_intervals(watchers: int, beat: float, *, every: float, read_every: float, step_s: float, log_every: int,
                   seconds: float, jitter: float, seed: int) -> list[float]:
    """Seconds between two changes of the step each watcher saw, over every watcher (the first few skipped)."""
    rng = random.Random(seed)
    times, steps = written_steps(beat, step_s, log_every, seconds)
    looks = sorted((phase + k * every + rng.random() * jitter, watcher)
                   for watcher, phase in enumerate(rng.random() * every for _ in range(watchers))
                   for k in range(int(seconds / every)))
    read_at, read, shown, changes = -read_every, 0, {}, {watcher: [] for watcher in range(watchers)}
    for at, watcher in looks:
        if at - read_at >= read_every:  # the shared look is old: this watcher reads it for everyone
            index = bisect.bisect_right(times, at) - 1
            read_at, read = at, steps[index] if index >= 0 else 0
        if shown.get(watcher) != read:
            shown[watcher] = read
            changes[watcher].append(at)
    return [later - earlier for seen in changes.values() for earlier, later in zip(seen[3:], seen[4:])]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beat", type=float, nargs="+", default=[1.0, 0.75, 0.5])
    parser.add_argument("--watchers", type=int, nargs="+", default=[1, 10, 30, 60])
    parser.add_argument("--every", type=float, default=1.0, help="the status fragment's rerun interval, s")
    parser.add_argument("--read-every", type=float, default=0.75, help="stability/live/tail.py's READ_EVERY_S")
    parser.add_argument("--step-s", type=float, default=0.028)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--jitter", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"# looks every {args.every:g} s at a shared read renewed after {args.read_every:g} s; a step every "
          f"{args.step_s:g} s, a log every {args.log_every} steps; {args.seconds:g} s simulated")
    print("| beat every | " + " | ".join(f"{n} watcher{'s' * (n > 1)}" for n in args.watchers) + " |")
    print("|---|" + "---|" * len(args.watchers))
    for beat in args.beat:
        cells = []
        for count in args.watchers:
            seen = seen_intervals(count, beat, every=args.every, read_every=args.read_every, step_s=args.step_s,
                                  log_every=args.log_every, seconds=args.seconds, jitter=args.jitter, seed=args.seed)
            late = sum(interval > 1.5 * args.every for interval in seen) / len(seen)
            cells.append(f"{statistics.median(seen):.2f} s (max {max(seen):.2f}; {100 * late:.0f} % over "
                         f"{1.5 * args.every:g} s)")
        print(f"| {beat:g} s | " + " | ".join(cells) + " |")
    print("\n(seconds between two changes of a watcher's step: median, max, and the share of intervals over 1.5 looks)")


if __name__ == "__main__":
    main()
