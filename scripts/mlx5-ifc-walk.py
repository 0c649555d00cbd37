#!/usr/bin/env python3
# Usage: mlx5-ifc-walk.py path/to/mlx5_ifc.h struct... -> "struct.field bit_offset bit_width" lines.
# How the numbers in drivers/mlx5-ifc/tests/layout_offsets/ were taken from the public headers.
# Flatten mlx5_ifc `_bits` pseudo-structs (1 array element = 1 bit) into bit offsets.
import re, sys
src = open(sys.argv[1]).read()
src = re.sub(r'/\*.*?\*/', '', src, flags=re.S)
defs = {}
for m in re.finditer(r'(struct|union)\s+mlx5_ifc_(\w+)_bits\s*\{(.*?)\n\};', src, re.S):
    kind, name, body = m.groups()
    members = []
    for line in body.split(';'):
        line = line.strip()
        if not line: continue
        mm = re.match(r'u8\s+(\w+)\[(0x[0-9a-fA-F]+|\d+)\]$', line)
        if mm:
            members.append(('u8', mm.group(1), int(mm.group(2), 0), None)); continue
        mm = re.match(r'u8\s+(\w+)\[(0x[0-9a-fA-F]+|\d+)?\]\[(0x[0-9a-fA-F]+|\d+)\]$', line)
        if mm:
            n = int(mm.group(2),0) if mm.group(2) else 0
            w = int(mm.group(3),0)
            members.append(('arr', mm.group(1), n, w)); continue
        mm = re.match(r'(?:struct|union)\s+mlx5_ifc_(\w+)_bits\s+(\w+)(?:\[(0x[0-9a-fA-F]+|\d+)?\])?$', line)
        if mm:
            cnt = mm.group(3)
            members.append(('sub', mm.group(2), int(cnt,0) if cnt else None, mm.group(1))); continue
        mm = re.match(r'(?:struct|union)\s+mlx5_ifc_(\w+)_bits\s+(\w+)\[\]$', line)
        if mm:
            members.append(('sub', mm.group(2), 0, mm.group(1))); continue
        # anonymous/inline union etc: ignore silently but mark
        members.append(('?', line[:40], 0, None))
    defs[name] = (kind, members)
sizes = {}
def size(name):
    if name in sizes: return sizes[name]
    if name not in defs:
        sys.stderr.write('unknown '+name+'\n'); return 0
    kind, mem = defs[name]
    tot = 0
    for k, n, w, t in mem:
        if k == 'u8': s = w
        elif k == 'arr': s = w * t
        elif k == 'sub': s = size(t) * (w if w is not None else 1)
        else: s = 0
        tot = max(tot, s) if kind == 'union' else tot + s
    sizes[name] = tot
    return tot
def flat(name, prefix, base, out, depth=0):
    kind, mem = defs[name]
    off = 0
    for k, n, w, t in mem:
        if k == 'u8':
            if not n.startswith('reserved'):
                out.append((prefix + n, base + off, w))
            s = w
        elif k == 'arr':
            s = w * t
            if not n.startswith('reserved'):
                out.append((prefix + n, base + off, s if w else t))
        elif k == 'sub':
            s = size(t) * (w if w is not None else 1)
            if defs[t][0] == 'union' or depth > 4:
                out.append((prefix + n, base + off, size(t)))
            else:
                flat(t, prefix + n + '.', base + off, out, depth+1)
        else:
            s = 0
        if kind != 'union': off += s
    return out
if __name__ == '__main__':
    for top in sys.argv[2:]:
        if top not in defs: print('#missing', top); continue
        for n, o, w in flat(top, top + '.', 0, []):
            print(n, o, w)
        print('#size', top, size(top))
