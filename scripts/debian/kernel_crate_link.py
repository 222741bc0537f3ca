#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Makes our kernel crate's object fit to link into a module for Debian's kernel.

Usage: kernel_crate_link.py IN.o OUT.o MODULE.SYMVERS [DEFINED.o ...]

scripts/debian-module.sh links our kernel crate (upstream's, with our
abstractions) into erdma_rs. Most of its functions only call what a module
may call. A few call C functions that the kernel does not export to modules
(devres_node_add(), ...): upstream's Rust wrappers around them are exported
from Debian's vmlinux instead, under the same names as in our copy (the
kernel crate's symbol names are fixed by its name and the compiler's
version). For each such function of our copy this makes its symbol
undefined, so that the module's calls (relocations against it, from the
driver's instances of generic code) go to vmlinux's copy, and points the
unreachable calls of its now dead body at that same copy, so that nothing
of the module names a symbol a module may not use. (The kernel's Rust
objects have one .text section, not a section per function: the dead body
stays.) A function that needs such a call and is not exported by vmlinux
cannot be linked: the script fails and names it.

Symbols defined by the DEFINED objects (the module's other parts) count as
available. Writes OUT.o and prints each function left to vmlinux, a line
each.
"""

import struct
import sys

SHT_SYMTAB, SHT_RELA = 2, 4
SHN_UNDEF = 0
STB_GLOBAL, STB_WEAK = 1, 2


class Elf:
    def __init__(self, data):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise SystemExit("not a 64-bit little-endian ELF object")
        self.data = bytearray(data)
        (self.shoff,) = struct.unpack_from("<Q", data, 0x28)
        self.shentsize, self.shnum, self.shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        self.sections = []
        for i in range(self.shnum):
            off = self.shoff + i * self.shentsize
            name, typ, _flags, _addr, offset, size, link, info, _align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, off)
            self.sections.append(dict(name=name, type=typ, offset=offset, size=size, link=link,
                                      info=info, entsize=entsize))
        strs = self.sections[self.shstrndx]
        for s in self.sections:
            s["name"] = self.cstr(strs["offset"] + s["name"])
        self.symtab = next(s for s in self.sections if s["type"] == SHT_SYMTAB)
        self.strtab = self.sections[self.symtab["link"]]

    def cstr(self, off):
        end = self.data.index(b"\0", off)
        return self.data[off:end].decode()

    def symbols(self):
        """(index, name, bind, shndx, entry offset) of every symbol."""
        st = self.symtab
        for i in range(st["size"] // st["entsize"]):
            off = st["offset"] + i * st["entsize"]
            name, info, _other, shndx = struct.unpack_from("<IBBH", self.data, off)
            yield i, self.cstr(self.strtab["offset"] + name), info >> 4, shndx, off

    def relocations(self):
        """(target section index, symbol index) of every RELA entry."""
        for s in self.sections:
            if s["type"] != SHT_RELA or s["link"] != self.sections.index(self.symtab):
                continue
            for k in range(s["size"] // s["entsize"]):
                _off, info, _addend = struct.unpack_from("<QQq", self.data, s["offset"] + k * s["entsize"])
                yield s["info"], info >> 32


def exports(symvers):
    """{symbol: module} of Module.symvers."""
    out = {}
    with open(symvers) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3:
                out[parts[1]] = parts[2]
    return out


def main():
    src, dst, symvers, *others = sys.argv[1:]
    elf = Elf(open(src, "rb").read())
    exported = exports(symvers)
    syms = list(elf.symbols())
    defined_elsewhere = set()
    for o in others:
        for _, n, b, sh, _ in Elf(open(o, "rb").read()).symbols():
            if sh != SHN_UNDEF and b in (STB_GLOBAL, STB_WEAK):
                defined_elsewhere.add(n)
    # C symbols a module cannot reach: undefined here, exported by nobody, defined by no other part.
    unreachable = {i for i, n, b, sh, _ in syms
                   if sh == SHN_UNDEF and n and n not in exported and n not in defined_elsewhere}
    # The global functions of each section: (start, end, symbol index, name).
    funcs = {}
    for i, n, b, sh, off in syms:
        if sh == SHN_UNDEF or b not in (STB_GLOBAL, STB_WEAK):
            continue
        value, size = struct.unpack_from("<QQ", elf.data, off + 8)
        if size:
            funcs.setdefault(sh, []).append((value, value + size, i, n))
    symtab_index = elf.sections.index(elf.symtab)
    undefine = {}
    failures = []
    for rs in elf.sections:
        if rs["type"] != SHT_RELA or rs["link"] != symtab_index:
            continue
        for k in range(rs["size"] // rs["entsize"]):
            off = rs["offset"] + k * rs["entsize"]
            where, info, _addend = struct.unpack_from("<QQq", elf.data, off)
            sym = info >> 32
            if sym not in unreachable:
                continue
            owner = [f for f in funcs.get(rs["info"], []) if f[0] <= where < f[1]]
            if not owner or exported.get(owner[0][3]) != "vmlinux":
                what = owner[0][3] if owner else f"{rs['name']}+{where:#x}"
                failures.append(f"{what} calls {syms[sym][1]} (not exported to modules), and Debian's "
                                "vmlinux does not export it")
                continue
            _s, _e, fi, fname = owner[0]
            # The dead body's call goes to vmlinux's copy of the same function instead.
            struct.pack_into("<Q", elf.data, off + 8, (fi << 32) | (info & 0xFFFFFFFF))
            undefine[fi] = (fname, syms[sym][1])
    if failures:
        for f in sorted(set(failures)):
            print(f"kernel_crate_link: {f}", file=sys.stderr)
        return 1
    for fi, (fname, callee) in sorted(undefine.items()):
        # Undefined: st_shndx, st_value, st_size to 0 (type and binding stay).
        struct.pack_into("<HQQ", elf.data, syms[fi][4] + 6, SHN_UNDEF, 0, 0)
        print(f"{fname} (calls {callee})")
    with open(dst, "wb") as f:
        f.write(elf.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
