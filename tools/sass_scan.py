#!/usr/bin/env python3
"""Where a kernel's spills, barriers and tensor-core ops sit, without cuobjdump.

The development machine has nvcc and ptxas but no cuobjdump or nvdisasm, and ptxas
reports only how many bytes a kernel spills.  This scans a cubin's instruction words
(128 bits each on sm_80 / sm_90) by opcode, the low 12 bits of the first word, and prints
a timeline of a few kinds of instruction in program order, runs collapsed (`H12@2157`:
twelve HMMA from instruction 2157).  The opcodes (sm_80 / sm_90a, checked against ptxas's
spill counts and the kernels' mma counts): L local load (LDL), S local store (STL), H HMMA,
B barrier (BAR), M ldmatrix (LDSM), G cp.async (LDGSTS), D cp.async wait (DEPBAR),
u MUFU.  Usage:

    nvcc ... -gencode=arch=compute_90a,code=sm_90a -cubin src/kernels/cuda/attention.cu -o a.cubin
    tools/sass_scan.py a.cubin attn_kernelILb0ELb1E     # a substring of the kernel's name
"""
import struct
import subprocess
import sys

KINDS = {0x983: 'L', 0x387: 'S', 0x23c: 'H', 0xb1d: 'B', 0x83b: 'M', 0xfae: 'G', 0x91a: 'D', 0x308: 'u'}


def text_section(cubin, name_part):
    """(offset, size) of the .text section of the one kernel whose name holds name_part."""
    out = subprocess.run(['readelf', '-S', '-W', cubin], capture_output=True, text=True).stdout
    hits = []
    for line in out.splitlines():
        f = line.split()
        if 'PROGBITS' in f and any(x.startswith('.text.') and name_part in x for x in f):
            i = f.index('PROGBITS')
            hits.append((int(f[i + 2], 16), int(f[i + 3], 16)))
    if len(hits) != 1:
        sys.exit(f'sass_scan: {len(hits)} kernels match {name_part!r}')
    return hits[0]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data = open(sys.argv[1], 'rb').read()
    off, size = text_section(sys.argv[1], sys.argv[2])
    ops = [struct.unpack_from('<Q', data, i)[0] & 0xfff for i in range(off, off + size, 16)]
    counts = {k: sum(1 for o in ops if o == op) for op, k in KINDS.items()}
    print(f'{len(ops)} instructions; ' + ', '.join(f'{k} {n}' for k, n in counts.items()))
    runs, prev, n, start = [], None, 0, 0
    for i, o in enumerate(ops):
        k = KINDS.get(o)
        if k is None:
            continue
        if k == prev:
            n += 1
            continue
        if prev:
            runs.append(f'{prev}{n}@{start}')
        prev, n, start = k, 1, i
    if prev:
        runs.append(f'{prev}{n}@{start}')
    print(' '.join(runs))


if __name__ == '__main__':
    main()
