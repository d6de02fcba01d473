#!/usr/bin/env python3
"""Print the Debian mirror this machine's apt already uses (its first URI serving a
release suite's main component), so the test bed fetches from nowhere else.

Reads deb822 *.sources and one-line *.list files under /etc/apt; stdlib only.
"""
import glob
import re
import sys

RELEASE = re.compile(r"^[a-z]+$")          # bookworm, trixie: not -updates/-security


def candidates(root="/etc/apt"):
    files = sorted(glob.glob(f"{root}/sources.list.d/*.sources"))
    for path in files:
        with open(path) as f:
            text = f.read()
        for para in re.split(r"\n\s*\n", text):
            fields = {}
            for line in para.splitlines():
                if line.startswith("#") or ":" not in line:
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.split()
            if fields.get("enabled", ["yes"])[0].lower() == "no":
                continue
            if "deb" in fields.get("types", []) and "main" in fields.get("components", []) \
                    and any(RELEASE.match(s) for s in fields.get("suites", [])):
                yield from fields.get("uris", [])
    for path in [f"{root}/sources.list"] + sorted(glob.glob(f"{root}/sources.list.d/*.list")):
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            words = re.sub(r"\[[^]]*\]", " ", line.split("#")[0]).split()
            if len(words) >= 4 and words[0] == "deb" and RELEASE.match(words[2]) and "main" in words[3:]:
                yield words[1]


def main():
    for uri in candidates(*sys.argv[1:]):
        if uri.startswith(("http://", "https://")) and "security" not in uri:
            print(uri.rstrip("/"))
            return 0
    print("no Debian mirror found in /etc/apt (set DEBIAN_MIRROR)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
