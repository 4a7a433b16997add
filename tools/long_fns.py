#!/usr/bin/env python3
"""Lists Rust functions longer than a limit (default 150 lines), longest first.

    tools/long_fns.py [--max N] [PATH ...]      (default PATH: runtime/src)

A function's length runs from its `fn` line to its closing brace. Comments, strings and
character literals are blanked before braces are counted, so a `{` in a string or a doc
comment does not open a block. Functions inside functions are listed on their own as well
as counted in the one around them. Exits 1 when any function is over the limit, so it can
gate a change; it is a check, not a test, because it reads source text, not behaviour.
"""

import os
import re
import sys


def blank(src):
    """The source with comments, strings and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(src)

    def keep_newlines(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_newlines(src[i:j]))
            i = j
        elif re.match(r'b?r#*"', src[i:i + 8]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', src[i:i + 8])
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(keep_newlines(src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(keep_newlines(src[i:j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}'), else a lifetime or label.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:i + 12])
            if m:
                out.append(" " * m.end())
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def functions(path):
    text = blank(open(path, encoding="utf-8").read())
    line_of = []
    line = 1
    for ch in text:
        line_of.append(line)
        if ch == "\n":
            line += 1
    found = []
    for m in FN.finditer(text):
        # The body is the first `{` after the signature at bracket depth 0; a `;` first
        # means a declaration without a body (trait method, extern).
        depth, j = 0, m.end()
        while j < len(text):
            ch = text[j]
            if ch in "([<":
                depth += 1
            elif ch in ")]>":
                # `->` is not a closing bracket.
                if not (ch == ">" and text[j - 1] == "-"):
                    depth -= 1
            elif ch == ";" and depth <= 0:
                j = -1
                break
            elif ch == "{" and depth <= 0:
                break
            j += 1
        if j < 0 or j >= len(text):
            continue
        braces, k = 0, j
        while k < len(text):
            if text[k] == "{":
                braces += 1
            elif text[k] == "}":
                braces -= 1
                if braces == 0:
                    break
            k += 1
        start, end = line_of[m.start()], line_of[min(k, len(text) - 1)]
        found.append((end - start + 1, start, m.group(1)))
    return found


def main(argv):
    limit = 150
    paths = []
    it = iter(argv)
    for a in it:
        if a == "--max":
            limit = int(next(it))
        else:
            paths.append(a)
    paths = paths or ["runtime/src"]
    rows = []
    for root in paths:
        files = [root] if os.path.isfile(root) else [
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".rs")
        ]
        for f in sorted(files):
            for length, line, name in functions(f):
                if length > limit:
                    rows.append((length, f"{f}:{line}", name))
    for length, at, name in sorted(rows, reverse=True):
        print(f"{length:5}  {at}  {name}")
    if not rows:
        print(f"no function over {limit} lines in {', '.join(paths)}")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
