#!/usr/bin/env python3
"""sizes.py - check that no hand-written source file is over 800 lines.

A file of one job fits in 800 lines; a longer one holds several jobs and is
split at its seams. The check reads every .c .h .py .js .ts .lua .sh file
under daemon/, client/, tests/, scripts/ and proto/ and fails, with one
`file: N lines, over 800` line each, on those longer than that. Files that
are not written by hand are left out: anything git ignores (build outputs,
node_modules, daemon/store/scripts_gen.c, which daemon/store/gen_scripts.sh
writes from scripts/) and the files of GENERATED below. When the root is no
git work tree, every file under the folders is read (the generated ones are
still left out by name).

Lines are counted as wc -l does, plus a last line without its newline.

Usage: sizes.py [--root DIR] [--max N]   (DIR: the project root; default:
this repository; N: 800). Exit 0 when every file fits, 1 when one does not.
Python stdlib only; `make layers` runs it.
"""

import argparse
import os
import subprocess
import sys

MAX_LINES = 800
FOLDERS = ("daemon", "client", "tests", "scripts", "proto")
EXTENSIONS = (".c", ".h", ".py", ".js", ".ts", ".lua", ".sh")
# Written by a program, even where git does not ignore them.
GENERATED = ("daemon/store/scripts_gen.c",)


def candidates(root):
    """Relative paths of the files the check reads, sorted."""
    try:
        p = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard", "--"] + list(FOLDERS),
                           capture_output=True, timeout=60, check=False)
        in_git = p.returncode == 0 and subprocess.run(
            ["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True,
            text=True, timeout=60, check=False).stdout.strip() == os.path.realpath(root)
    except OSError:
        in_git = False
    if in_git:
        paths = [n for n in p.stdout.decode("utf-8", "replace").split("\0") if n]
        # ls-files --cached lists a file deleted from the work tree, too
        paths = [n for n in paths if os.path.isfile(os.path.join(root, n))]
    else:
        paths = []
        for top in FOLDERS:
            for d, dirs, names in os.walk(os.path.join(root, top)):
                dirs[:] = sorted(n for n in dirs if n not in ("node_modules", "__pycache__"))
                paths += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(n for n in set(paths)
                  if n.endswith(EXTENSIONS) and n not in GENERATED)


def count_lines(path):
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def check(root, max_lines=MAX_LINES):
    """Return (problems, summary): one line per file over max_lines."""
    files = candidates(root)
    problems = []
    for rel in files:
        n = count_lines(os.path.join(root, rel))
        if n > max_lines:
            problems.append("%s: %d lines, over %d" % (rel, n, max_lines))
    summary = "sizes: %d hand-written files, none over %d lines" % (len(files), max_lines)
    return problems, summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", ".."))
    ap.add_argument("--max", type=int, default=MAX_LINES)
    args = ap.parse_args(argv)
    root = os.path.normpath(args.root)
    problems, summary = check(root, args.max)
    for p in problems:
        print(p, file=sys.stderr)
    print(summary if not problems else "sizes: %d files over %d lines" % (len(problems),
                                                                         args.max))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
