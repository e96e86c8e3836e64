#!/usr/bin/env python3
"""Self cost (instructions) per function of one callgrind dump, per poll.

`bench/instructions.rs` (GATEWAY_BENCH=instructions) leaves its dumps in
GATEWAY_CALLGRIND_DIR; callgrind_annotate 3.19 attributed every instruction of
them to `clone`, so this sums a dump's cost lines per function itself (a line
after `calls=` is a call's inclusive cost and is not counted as self).

Usage: callgrind_self.py DUMP [POLLS [TOP]]
       callgrind_self.py DUMP POLLS --callers NAME   (who calls NAME, inclusive)
"""
import collections
import re
import sys

NAME = re.compile(r'^(fn|cfn|fi|fe|fl|ob|cob|cfi|cfl)=\((\d+)\)(?: (.*))?$')


def parse(path):
    names = {}
    self_cost = collections.Counter()
    calls = collections.Counter()
    fn = cfn = None
    after_calls = False
    for line in open(path, errors='replace'):
        line = line.rstrip('\n')
        m = NAME.match(line)
        if m:
            kind, ident, name = m.groups()
            space = 'fn' if kind in ('fn', 'cfn') else kind
            if name is not None:
                names[(space, ident)] = name
            if kind == 'fn':
                fn = names.get(('fn', ident), ident)
            elif kind == 'cfn':
                cfn = names.get(('fn', ident), ident)
            continue
        if line.startswith('calls='):
            after_calls = True
            continue
        if line and (line[0].isdigit() or line[0] in '+-*'):
            parts = line.split()
            if len(parts) >= 2:
                cost = int(parts[1])
                if after_calls:
                    calls[(fn, cfn)] += cost
                    after_calls = False
                else:
                    self_cost[fn] += cost
    return self_cost, calls


def main():
    path = sys.argv[1]
    polls = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    self_cost, calls = parse(path)
    if len(sys.argv) > 4 and sys.argv[3] == '--callers':
        target = sys.argv[4]
        found = sorted(((c, f) for (f, cf), c in calls.items() if cf and target in cf), reverse=True)
        for cost, caller in found[:20]:
            print(f"{cost / polls:9.0f}  {caller}")
        return
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    total = sum(self_cost.values())
    print(f"total {total / polls:.0f} per poll")
    for name, cost in self_cost.most_common(top):
        print(f"{cost / polls:9.0f} {100 * cost / total:5.1f}%  {name}")


if __name__ == '__main__':
    main()
