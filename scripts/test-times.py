#!/usr/bin/env python3
"""Sums the running times of a ctest run per group of tests, to compare two runs the same way.

    scripts/test-times.py LOG [LOG2] [--top N]

LOG is ctest's own log of a run (<build>/Testing/Temporary/LastTest.log, or a copy of it
kept elsewhere: the next run overwrites it). A test's group is its
name up to the first '.': the ctest label (unit, integration, fault, packaging), except
that the fault suites run at pipeline_depth 2 count as fault_depth2 and the fixtures
(the shared dev broker's start and stop) as dev_broker. For each group it prints the
number of tests, the sum of their times (what the group costs at -j1) and the longest
test; with LOG2 it prints both runs side by side. --top N lists the N slowest tests
(of LOG2 when given, else of LOG).

The wall-clock time of a run at -jN is not the sum (tests run side by side, and each
is slower when many share the CPU): scripts/test.sh prints that per step.
"""
import argparse
import re
import sys
from collections import defaultdict

START = re.compile(r'^\d+/\d+ Test: (.+)$')
TIME = re.compile(r'^Test time =\s+([0-9.]+) sec$')


def read_times(path):
    """{test name: seconds} from a LastTest.log."""
    times = {}
    name = None
    with open(path, encoding='utf-8', errors='replace') as log:
        for line in log:
            line = line.rstrip('\n')
            m = START.match(line)
            if m:
                name = m.group(1)
                continue
            m = TIME.match(line)
            if m and name is not None:
                times[name] = float(m.group(1))
                name = None
    return times


def by_group(times):
    groups = defaultdict(list)
    for name, seconds in times.items():
        groups[name.split('.', 1)[0]].append((seconds, name))
    return groups


def summary(tests):
    total = sum(s for s, _ in tests)
    longest = max(tests) if tests else (0.0, '-')
    return len(tests), total, longest


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('log')
    parser.add_argument('log2', nargs='?')
    parser.add_argument('--top', type=int, default=0)
    args = parser.parse_args()

    runs = [read_times(args.log)] + ([read_times(args.log2)] if args.log2 else [])
    if not runs[0]:
        sys.exit(f'{args.log}: no test times found (not a ctest LastTest.log?)')
    grouped = [by_group(t) for t in runs]
    names = sorted(set().union(*grouped), key=lambda g: -sum(s for s, _ in grouped[-1].get(g, [])))
    if len(runs) == 1:
        print(f'{"group":<14} {"tests":>6} {"sum s":>9}  longest')
        for g in names:
            n, total, (ls, ln) = summary(grouped[0][g])
            print(f'{g:<14} {n:>6} {total:>9.1f}  {ls:.1f} s {ln}')
        n, total, _ = summary([x for v in grouped[0].values() for x in v])
        print(f'{"all":<14} {n:>6} {total:>9.1f}')
    else:
        print(f'{"group":<14} {"tests":>6} {"sum s":>9} | {"tests":>6} {"sum s":>9} {"saved":>7}')
        for g in names + ['all']:
            cols = []
            for grp in grouped:
                tests = [x for v in grp.values() for x in v] if g == 'all' else grp.get(g, [])
                n, total, _ = summary(tests)
                cols.append((n, total))
            (n1, t1), (n2, t2) = cols
            saved = f'{100 * (t1 - t2) / t1:6.0f}%' if t1 else '      -'
            print(f'{g:<14} {n1:>6} {t1:>9.1f} | {n2:>6} {t2:>9.1f} {saved}')
    if args.top:
        print()
        for seconds, name in sorted(((s, n) for n, s in runs[-1].items()), reverse=True)[:args.top]:
            print(f'{seconds:8.1f} s  {name}')


if __name__ == '__main__':
    main()
