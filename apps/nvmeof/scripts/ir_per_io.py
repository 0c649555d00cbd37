#!/usr/bin/env python3
"""Sum callgrind self-cost (Ir) of nvmeof functions (incl. code inlined into them) from
`callgrind_annotate --inclusive=no --auto=no` on stdin; print Ir per I/O for argv[1] I/Os,
and the whole collected cost per I/O split by the crate each function belongs to."""
import re
import sys

ios = int(sys.argv[1])
lines = sys.stdin.read().split("\n")
start = [i for i, l in enumerate(lines) if "file:function" in l][0] + 2
total = own = 0
by_crate = {}
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
    c = re.match(r"<*([A-Za-z_][A-Za-z0-9_]*)::", fn)
    crate = c.group(1) if c else "libc/other"
    if crate in ("core", "alloc", "std"):
        crate = "std"
    by_crate[crate] = by_crate.get(crate, 0) + n
print(f"target poll loop: {total} Ir collected, nvmeof code {own} Ir over {ios} I/Os")
print(f"NVMEOF-TARGET-IR-PER-IO {own // ios}")
print(f"(the rest, {(total - own) // ios} Ir/I/O, is the verbs implementation and the namespace device)")
parts = sorted(by_crate.items(), key=lambda kv: -kv[1])
print("IR-PER-IO-BY-CRATE total=%d %s" % (total // ios, " ".join(f"{k}={v // ios}" for k, v in parts if v // ios > 0)))
