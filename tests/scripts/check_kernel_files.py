#!/usr/bin/env python3
"""Tests 'kernel-files' and 'nn-kernel-files': a Meson list of kernel files and its folder name the same files.

usage: check_kernel_files.py KERNELS_DIR LIST LISTED_FILE...
LIST says where the list is, e.g. "kernel_files in meson.build".
Meson does not glob, so a kernel added to kernels/ but not to kernel_files would silently not be embedded
(the README promises that every kernels/*.cu is a module). Fails naming each file that is not listed: every
*.cu directly in KERNELS_DIR and every header below KERNELS_DIR/include. (Subfolders such as kernels/nn/ belong
to other libraries, with lists of their own.)
"""
import os
import sys


def main() -> int:
    root = os.path.realpath(sys.argv[1])
    where = sys.argv[2]
    shown = os.path.join(os.path.basename(os.path.dirname(root)), os.path.basename(root)) \
        if os.path.basename(os.path.dirname(root)) == "kernels" else os.path.basename(root)
    listed = {os.path.relpath(os.path.realpath(f), root) for f in sys.argv[3:]}
    on_disk = {name for name in os.listdir(root) if name.endswith(".cu")}
    for dirpath, _, names in os.walk(os.path.join(root, "include")):
        on_disk.update(os.path.relpath(os.path.join(dirpath, name), root) for name in names
                       if name.endswith((".cuh", ".h", ".hpp")))
    missing = sorted(on_disk - listed)
    for f in missing:
        print(f"{shown}/{f} is not in {where}, so it is not built into the library;"
              f" add '{shown}/{f}' to that list")
    if missing:
        return 1
    print(f"{where} lists all {len(on_disk)} files below {shown}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
