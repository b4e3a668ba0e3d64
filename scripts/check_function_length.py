#!/usr/bin/env python3
"""No function over 120 lines (issue 27; the developers' guide says <= 120).

Finds every function definition in the C++ sources of the project's folders
and fails when one is longer than the limit and not named, with a reason, in
the allowlist (scripts/function_length_allow.txt). An allowlist entry that
names no function over the limit any more fails too: once a function is
split, its exception goes.

A function's length is counted from the line of its body's opening brace to
the line of its closing brace, both included. The sources are clang-formatted,
but the counting does not rely on the layout: comments, string and character
literals (raw strings too) and preprocessor lines are blanked first, then the
braces are matched. A brace at namespace, class or extern "C" level opens a
function body when the text before it, back to the last ';', '{' or '}' of
that level, ends in a parameter list (with qualifiers, a trailing return type
or a constructor's initialiser list); brace-initialisers of members inside such
a list are skipped. Lambdas and local classes count toward the function that
holds them.

  scripts/check_function_length.py [--root DIR] [--allow FILE] [--limit N] [--list]

--list prints every function over the limit with its length (allowed or not).
Exit status: 0 all within the limit or allowed, 1 otherwise, 2 bad arguments.
"""
import argparse
import os
import re
import sys

FOLDERS = ["costmodel", "strategies", "specs", "planner", "calibration", "runtime"]
EXTS = (".cpp", ".hpp", ".h", ".cc", ".cpp.in")
LIMIT = 120


def blank(text):
    """The text with comments, literals and preprocessor lines replaced by
    spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("  \n")  # keep the line count
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) \
                or (c in "uUL8" and re.match(r'(u8|u|U|L)R"', text[i:i + 4]) and (i == 0 or not text[i - 1].isalnum())):
            m = re.match(r'(u8|u|U|L)?R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(2) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum() \
                    and re.match(r"[0-9a-fA-FxXbB']", text[i - 1]):
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " ")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


# Text before a brace that makes it something other than a function body.
SCOPE = re.compile(r"^(.*\b)?(namespace|class|struct|union|enum)\b[^()]*$", re.S)
QUALIFIERS = r"(\s*(const|volatile|noexcept(\s*\([^()]*\))?|override|final|mutable|&&?|->[^{;]*|\[\[[^\]]*\]\]|" \
             r"requires[^{;]*))*\s*"


def param_list_end(header):
    """The index after the ')' closing the parameter list when `header` (the
    text before a '{' at namespace or class level) is a function signature,
    possibly followed by qualifiers and a constructor's initialiser list
    (whose own braces the caller skips); else -1."""
    h = header.rstrip()
    # A constructor initialiser list: ") : a_(x), b_{y}, c_(z)".
    depth = 0
    for k in range(len(h) - 1, -1, -1):
        ch = h[k]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            depth -= 1
        elif depth == 0 and ch == ":" and (k == 0 or h[k - 1] != ":") and (k + 1 >= len(h) or h[k + 1] != ":"):
            before = h[:k].rstrip()
            if re.search(r"\)" + QUALIFIERS + r"$", before):
                h = before
            break
        elif depth == 0 and ch in ";=":
            break
    m = re.search(r"\)" + QUALIFIERS + r"$", h)
    if not m:
        return -1
    if "=" in re.sub(r"(operator\s*[=!<>+\-*/%&|^]*=|\[[^\]]*=[^\]]*\]|=\s*default|<[^<>()]*=[^<>()]*>)", "", h.split("(")[0]):
        return -1  # `T x = f(...) {` is not a definition (nor is an initialised variable)
    return m.start() + 1


def init_list_colon(tail):
    """Whether `tail` (the text after a parameter list) holds a constructor
    initialiser list's ':' (a single colon, not part of '::')."""
    return re.search(r"(?<!:):(?!:)", tail) is not None


def brace_kind(header):
    """What a '{' at namespace or class level after `header` opens: "body" (a
    function's), "member" (a member's brace-initialiser inside a constructor's
    initialiser list, `) : a_{x}`) or None (anything else)."""
    p = param_list_end(header)
    if p < 0:
        return None
    tail = header[p:].rstrip()
    if init_list_colon(tail) and re.search(r"[\w>]$", tail):
        return "member"
    return "body"


def function_name(header):
    """The (qualified) name before the parameter list of a signature."""
    h = re.sub(r"\s+", " ", header).strip()
    h = re.sub(r"__attribute__ ?\(\(.*?\)\)|__declspec ?\(.*?\)|alignas ?\(.*?\)|\[\[.*?\]\]", " ", h).strip()
    h = re.sub(r"^template ?<.*?> ?(?=[A-Za-z_:~])", "", h)
    angle = 0
    for k, ch in enumerate(h):
        if ch == "<" and not h[max(0, k - 8):k].endswith("operator"):
            angle += 1
        elif ch == ">" and k > 0 and h[k - 1] != "-" and angle > 0:
            angle -= 1
        elif ch == "(" and angle == 0:
            m = re.search(r"((?:[A-Za-z_]\w*(?:<[^()]*>)?\s*::\s*)*(?:operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*))\s*$",
                          h[:k])
            if m:
                return re.sub(r"\s+", "", m.group(1))
            return h[:k].split()[-1] if h[:k].split() else "?"
    return "?"


def skip_braces(src, i):
    """From the '{' at i: the index after its matching '}' and the newlines in between."""
    depth, j, lines = 1, i + 1, 0
    while j < len(src) and depth:
        if src[j] == "{":
            depth += 1
        elif src[j] == "}":
            depth -= 1
        elif src[j] == "\n":
            lines += 1
        j += 1
    return j, lines


def functions(text):
    """(name, first line, last line) of each function definition in `text`."""
    src = blank(text)
    found = []
    depth = 0         # open namespaces, classes and extern blocks
    header_start = 0  # where the current declaration's text begins at this level
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
        elif c == "{":
            header = src[header_start:i]
            flat = re.sub(r"\s+", " ", header).strip()
            if SCOPE.match(flat) or re.search(r'extern\s*"\s*"$', flat):
                depth += 1
                header_start = i + 1
            else:
                kind = brace_kind(header)
                j, lines = skip_braces(src, i)
                if kind == "body":
                    found.append((function_name(header), line, line + lines))
                line += lines
                i = j
                if kind == "body":
                    header_start = j
                # A member's brace-initialiser (kind "member") or a variable's
                # initialiser: the declaration goes on to its ';' or body.
                continue
        elif c == "}":
            depth = max(0, depth - 1)
            header_start = i + 1
        elif c == ";":
            header_start = i + 1
        i += 1
    return found


def sources(root):
    for folder in FOLDERS:
        base = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(EXTS):
                    p = os.path.join(dirpath, f)
                    yield os.path.relpath(p, root).replace(os.sep, "/"), p


def read_allowlist(path):
    """{(file, function): reason}; a line is `file function reason...`, '#' starts a comment."""
    allow = {}
    if not path:
        return allow
    with open(path, encoding="utf-8") as fh:
        for k, raw in enumerate(fh, 1):
            s = raw.split("#", 1)[0].strip() if raw.lstrip().startswith("#") else raw.strip()
            if not s:
                continue
            parts = s.split(None, 2)
            if len(parts) < 3:
                print(f"{path}:{k}: expected `file function reason`", file=sys.stderr)
                sys.exit(2)
            allow[(parts[0], parts[1])] = parts[2]
    return allow


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here))
    ap.add_argument("--allow", default=os.path.join(here, "function_length_allow.txt"))
    ap.add_argument("--limit", type=int, default=LIMIT)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if not os.path.isdir(a.root):
        print(f"check_function_length: no folder {a.root}", file=sys.stderr)
        return 2
    allow = read_allowlist(a.allow if a.allow and os.path.exists(a.allow) else None)
    long_ones = {}
    for rel, path in sources(a.root):
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name, first, last in functions(text):
            length = last - first + 1
            if length > a.limit:
                long_ones[(rel, name)] = (length, first)
    bad = []
    for (rel, name), (length, first) in sorted(long_ones.items()):
        ok = (rel, name) in allow
        if a.list:
            print(f"{rel}:{first}: {name} {length} lines" + (f" (allowed: {allow[(rel, name)]})" if ok else ""))
        if not ok:
            bad.append(f"  {rel}:{first}: {name} is {length} lines (over {a.limit})")
    for (rel, name) in sorted(allow):
        if (rel, name) not in long_ones:
            bad.append(f"  {rel}: {name} is allowed over {a.limit} lines but is not (split or gone): "
                       f"remove it from the allowlist")
    if bad:
        print(f"functions over {a.limit} lines not in {os.path.relpath(a.allow, a.root) if a.allow else 'the allowlist'}:"
              if any(" is allowed " not in b for b in bad) else "stale allowlist entries:", file=sys.stderr)
        print("\n".join(bad), file=sys.stderr)
        return 1
    print(f"function length: no function over {a.limit} lines but the {len(allow)} allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
