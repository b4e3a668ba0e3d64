#!/usr/bin/env python3
"""Two of issue 27's "done when" checks, on the sources.

1. One action type: StepAction (strategies/step_program.hpp) is the only
   struct or class named ...Action and StepOp the only enum named ...Op in
   the project's folders (the schedule's former Op/Action pair stays gone).
2. No code parses a trace name back: the display names the simulator gives
   its trace events (trace_name() in costmodel/simulator.cpp: "gather",
   "all-reduce", "send activation", ...) appear in no comparison or search
   (==, !=, find, starts_with, ends_with, compare) of any source outside the
   function that writes them (a one-word name such as "optimizer", also an
   option's value, only on a line that reads a name, event or trace). Readers of a trace go by the event's op and
   action index (docs/SIMULATOR.md).

The third, that the runtime compiles without cost model headers, is the
`floors` test (scripts/check_floors.cmake).

  scripts/check_one_ir.py [--root DIR] [--names-from FILE]

--names-from: the file holding trace_name() (default: costmodel/simulator.cpp
of this script's repository, so a fixture root can be checked with the real
names). Exit status 0 when both hold, 1 naming each offence.
"""
import argparse
import os
import re
import sys

FOLDERS = ["strategies", "specs", "costmodel", "runtime", "calibration", "planner"]
EXTS = (".cpp", ".hpp", ".h", ".cc")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def trace_names(path):
    """The multi-letter strings trace_name() returns (single letters such as
    "F" are too common to search for; the op, not the name, says F or B)."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"const char\* trace_name\(.*?\n}\n", text, re.S)
    if not m:
        sys.exit(f"check_one_ir: no trace_name() in {path}")
    return sorted({s for s in re.findall(r'"([^"\\]*)"', m.group(0)) if len(s) > 1}), m.group(0)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=repo)
    ap.add_argument("--names-from", default=os.path.join(repo, "costmodel", "simulator.cpp"))
    a = ap.parse_args()
    names, writer = trace_names(a.names_from)
    lit = "|".join(re.escape(n) for n in names)
    compare = re.compile(r'(?:[=!]=\s*"(?:%s)")|(?:"(?:%s)"\s*[=!]=)|'
                         r'(?:\b(?:find|rfind|starts_with|ends_with|compare|strcmp|strncmp)\s*\([^;]*?"(?:%s)")'
                         % (lit, lit, lit))
    action_type = re.compile(r"\b(?:struct|class)\s+(\w*Action)\s*(?:final\s*)?[{:]")
    op_enum = re.compile(r"\benum\s+(?:class|struct)?\s*(\w*Op)\s*[{:]")
    bad = []
    for folder in FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(a.root, folder)):
            dirnames.sort()
            for f in sorted(filenames):
                if not f.endswith(EXTS):
                    continue
                p = os.path.join(dirpath, f)
                rel = os.path.relpath(p, a.root).replace(os.sep, "/")
                text = strip_comments(open(p, encoding="utf-8", errors="replace").read())
                if writer in text:
                    text = text.replace(writer, "")  # the function that writes the names
                for m in action_type.finditer(text):
                    if m.group(1) != "StepAction":
                        bad.append(f"  {rel}:{text.count(chr(10), 0, m.start()) + 1}: a second action type "
                                   f"'{m.group(1)}' (StepAction is the one action type)")
                for m in op_enum.finditer(text):
                    if m.group(1) != "StepOp":
                        bad.append(f"  {rel}:{text.count(chr(10), 0, m.start()) + 1}: a second op enum "
                                   f"'{m.group(1)}' (StepOp is the one op type)")
                for m in compare.finditer(text):
                    # A one-word name ("optimizer", "sync") is also an option
                    # value: flagged only where the line reads an event's name.
                    line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())]
                    word = re.findall(r'"([^"]*)"', m.group(0))[-1]
                    if re.fullmatch(r"\w+", word) and not re.search(r"name|event|trace", line):
                        continue
                    bad.append(f"  {rel}:{text.count(chr(10), 0, m.start()) + 1}: reads a trace name back "
                               f"({m.group(0).strip()}): go by the event's op and action index")
    if bad:
        print("issue 27's one-IR checks fail:", file=sys.stderr)
        print("\n".join(bad), file=sys.stderr)
        return 1
    print(f"one IR: StepAction/StepOp the only action types; none of the {len(names)} trace names is read back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
