"""What the documentation generators share (scripts/accuracy_table.py,
scripts/time_model_tables.py): a generated block between two HTML-comment
markers of a markdown file, and the file rewritten whole or not at all."""
import os
import sys


def block_span(text, begin, end, where):
    """(start, stop) of the text between the markers; exit 2 naming them unless each is there once, in order."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        print(f"{where} needs exactly one {begin} ... {end}", file=sys.stderr)
        sys.exit(2)
    return text.index(begin) + len(begin), text.index(end)


def replace_block(text, begin, end, content, where):
    b, e = block_span(text, begin, end, where)
    return text[:b] + "\n" + content + "\n" + text[e:]


def write_if_changed(path, old, new):
    """Write `new` over `path` through a temporary renamed into place, when it differs from `old`."""
    if new == old:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(new)
    os.replace(tmp, path)
