#!/usr/bin/env python3
"""Test 'kernel-files': meson.build's kernel_files list and the kernels/ folder name the same files.

usage: check_kernel_files.py KERNELS_DIR LISTED_FILE...
Meson does not glob, so a kernel added to kernels/ but not to kernel_files would silently not be embedded
(the README promises that every kernels/*.cu is a module). Fails naming each file that is not listed: every
*.cu directly in KERNELS_DIR and every header below KERNELS_DIR/include. (Subfolders such as kernels/nn/ belong
to other libraries, with lists of their own.)
"""
import os
import sys


def main() -> int:
    root = os.path.realpath(sys.argv[1])
    listed = {os.path.relpath(os.path.realpath(f), root) for f in sys.argv[2:]}
    on_disk = {name for name in os.listdir(root) if name.endswith(".cu")}
    for dirpath, _, names in os.walk(os.path.join(root, "include")):
        on_disk.update(os.path.relpath(os.path.join(dirpath, name), root) for name in names
                       if name.endswith((".cuh", ".h", ".hpp")))
    missing = sorted(on_disk - listed)
    for f in missing:
        print(f"kernels/{f} is not in kernel_files in meson.build, so it is not built into the library;"
              f" add '{os.path.join('kernels', f)}' to that list")
    if missing:
        return 1
    print(f"kernel_files lists all {len(on_disk)} files below kernels/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
