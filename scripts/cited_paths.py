#!/usr/bin/env python3
"""Every validation/ and examples/ path that the code, scripts and docs cite must exist.

Runs (moved to validation/archive/) and sweeps (moved to validation/sets/) are
cited by path in comments, docs and sweep descriptions; this check keeps those
paths true after a move (ctest cited_paths_exist).

  scripts/cited_paths.py --check    exit 1 listing each FILE:LINE: PATH that does not exist

Scanned: the tracked C++, Python, shell, CMake and Markdown files and the
sweeps and suites under validation/ (not the archived runs' own files, which
keep the paths of their day: validation/archive/README.md says how to read
them). Not checked: paths with a placeholder in capitals (SUITE, NAME), glob
patterns that match nothing are reported, `-o DIR` outputs, and examples/
paths outside examples/{models,plans,clusters,prices,sweep*} (other projects'
paths, e.g. Megatron-LM's examples/gpt3/...), and the paths a suite lists under
"pending" (an earlier device call commits them before the suite runs) and its
"results" folder (the run writes it).
"""
import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = re.compile(r"(?<![A-Za-z0-9_/.$-])((?:validation|examples)/[A-Za-z0-9._*/-]+)")
# examples/ paths checked (spelled so that this file does not cite them itself).
CHECKED_EXAMPLES = tuple("examples" + "/" + d for d in ("models", "plans", "clusters", "prices", "sweep"))
EXTS = (".cpp", ".hpp", ".h", ".py", ".sh", ".md", ".txt", ".in")


def scanned(f):
    if f.startswith("validation/"):
        return f.startswith(("validation/sets/", "validation/suites/")) or f in (
            "validation/README.md", "validation/archive/README.md")
    if f.startswith("tests/cli/") or f.startswith("tests/data/"):
        return False  # tests name missing files on purpose
    return f.endswith(EXTS) or f.endswith("CMakeLists.txt")


def pending():
    """Paths a device suite lists under "pending": committed by an earlier device call before it runs
    (validation/suites/README.md); until then they are cited ahead of time."""
    out = set()
    for f in glob.glob(os.path.join(ROOT, "validation", "suites", "*.json")):
        try:
            s = json.load(open(f))
            out.update(p for p in s.get("pending", []) if isinstance(p, str))
            if isinstance(s.get("results"), str):
                out.add(s["results"])  # the folder the suite's run writes
        except (OSError, ValueError, AttributeError):
            pass
    return out


def missing():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split("\n")
    ahead = pending()
    out = []
    for f in filter(None, files):
        if not scanned(f) or not os.path.isfile(os.path.join(ROOT, f)):
            continue
        try:
            lines = open(os.path.join(ROOT, f), encoding="utf-8").read().split("\n")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(lines, 1):
            for m in PATH.finditer(line):
                p = m.group(1).rstrip(".,:;)/`'\"")
                if re.search(r"/[A-Z][A-Z_]*(?:[./]|$)", p) or line[:m.start()].rstrip().endswith("-o"):
                    continue
                if p.startswith("examples/") and not p.startswith(CHECKED_EXAMPLES):
                    continue
                if p in ahead:
                    continue
                here = os.path.join(ROOT, p)
                if not (glob.glob(here, recursive=True) if "*" in p else os.path.exists(here)):
                    out.append(f"{f}:{n}: {p}")
    return out


def main():
    bad = missing()
    for b in bad:
        print(b, file=sys.stderr)
    if bad:
        print(f"cited_paths.py: {len(bad)} cited path(s) do not exist (moved? validation/archive/README.md)",
              file=sys.stderr)
    return 1 if bad and "--check" in sys.argv else 0


if __name__ == "__main__":
    sys.exit(main())
