#!/usr/bin/env python3
"""Lists the imports of a core WebAssembly module; exits 1 if there is any.

The core must build for wasm32-unknown-unknown with zero imports (no clock, no
randomness, no WASI). This reads the module's import section (id 2) directly, so CI
needs no wasm-tools install.
"""
import sys


def leb(data, i):
    result = shift = 0
    while True:
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return result, i


def imports(data):
    if data[:4] != b"\0asm":
        raise SystemExit("not a wasm module")
    i, found = 8, []
    while i < len(data):
        section, i = data[i], i + 1
        size, i = leb(data, i)
        if section == 2:
            j = i
            count, j = leb(data, j)
            for _ in range(count):
                n, j = leb(data, j)
                module = data[j:j + n].decode(); j += n
                n, j = leb(data, j)
                name = data[j:j + n].decode(); j += n
                kind = data[j]; j += 1
                found.append(f"{module}::{name} (kind {kind})")
                # skip the import description
                if kind == 0:
                    _, j = leb(data, j)
                elif kind == 1:
                    j += 1; flags, j = leb(data, j); _, j = leb(data, j)
                    if flags & 1: _, j = leb(data, j)
                elif kind == 2:
                    flags, j = leb(data, j); _, j = leb(data, j)
                    if flags & 1: _, j = leb(data, j)
                elif kind == 3:
                    j += 2
        i += size
    return found


if __name__ == "__main__":
    path = sys.argv[1]
    found = imports(open(path, "rb").read())
    for f in found:
        print("import:", f)
    print(f"{path}: {len(found)} imports")
    sys.exit(1 if found else 0)
