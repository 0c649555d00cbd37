#!/usr/bin/env python3
"""Sum callgrind self-cost (Ir) of nvmeof functions (incl. code inlined into them) from
`callgrind_annotate --inclusive=no --auto=no` on stdin; print Ir per I/O for argv[1] I/Os."""
import re
import sys

ios = int(sys.argv[1])
lines = sys.stdin.read().split("\n")
start = [i for i, l in enumerate(lines) if "file:function" in l][0] + 2
total = own = 0
for l in lines[start:]:
    if l.startswith("---") or l.startswith("-- "):
        break
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*?):(.*?)( \[.*\])?$", l)
    if not m:
        continue
    n = int(m.group(1).replace(",", ""))
    total += n
    fn = m.group(3)
    if fn.startswith("<nvmeof::") or fn.startswith("nvmeof::"):
        own += n
print(f"target poll loop: {total} Ir collected, nvmeof code {own} Ir over {ios} I/Os")
print(f"NVMEOF-TARGET-IR-PER-IO {own // ios}")
print(f"(the rest, {(total - own) // ios} Ir/I/O, is the soft verbs double and the RAM test device)")
