#!/usr/bin/env python3
"""Write a directory tree as a newc cpio archive (the initramfs format), owned by root.

    mkcpio.py DIR OUT.cpio

No cpio binary is needed on the host. Entries are sorted (the same tree gives the
same archive), owned 0:0, hard links stored as separate files, and the archive is
padded to 512 bytes so that archives can be concatenated (the kernel unpacks each
in turn: the base image first, then the small per-run overlay).
"""
import os
import stat
import sys


def _header(ino, mode, nlink, mtime, size, name):
    fields = [ino, mode, 0, 0, nlink, mtime, size, 0, 0, 0, 0, len(name) + 1, 0]
    return ("070701" + "".join(f"{v:08x}" for v in fields)).encode()


def _pad(out, n):
    if n % 4:
        out.write(b"\0" * (4 - n % 4))


def _entry(out, ino, name, st, data):
    head = _header(ino, st.st_mode, 2 if stat.S_ISDIR(st.st_mode) else 1,
                   int(st.st_mtime), len(data), name)
    out.write(head + name.encode() + b"\0")
    _pad(out, len(head) + len(name) + 1)
    out.write(data)
    _pad(out, len(data))


def write(root, path):
    ino = 1
    with open(path, "wb") as out:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            names = [] if rel_dir == "." else [rel_dir]
            names += [os.path.normpath(os.path.join(rel_dir, f)) for f in sorted(filenames)]
            # symlinks to directories show up in dirnames but are not walked into
            names += [os.path.normpath(os.path.join(rel_dir, d)) for d in dirnames
                      if os.path.islink(os.path.join(dirpath, d))]
            for name in names:
                full = os.path.join(root, name)
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    data = os.readlink(full).encode()
                elif stat.S_ISREG(st.st_mode):
                    with open(full, "rb") as f:
                        data = f.read()
                elif stat.S_ISDIR(st.st_mode):
                    data = b""
                else:
                    continue        # device nodes etc.: the guest mounts devtmpfs
                _entry(out, ino, name, st, data)
                ino += 1
        trailer = os.stat_result((0,) * 10)
        _entry(out, 0, "TRAILER!!!", trailer, b"")
        size = out.tell()
        if size % 512:
            out.write(b"\0" * (512 - size % 512))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write(sys.argv[1], sys.argv[2])
