#!/usr/bin/env python3
"""Fails if a function in the given folders' C++ files (.cc, .h, .hpp) is longer than LIMIT lines (default 80),
from the line of its signature's start to the line of its closing brace. Lambdas and local classes count towards
the function they are in; member functions defined in a class body are functions of their own.

   check-function-length.py [--limit N] DIR..."""
import re
import sys
from pathlib import Path


def strip(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            end = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    text = strip(path.read_text(errors="replace"))
    stack = []  # (kind, line of the statement's start)
    statement, statement_line, line = "", 1, 1
    for c in text:
        if c == "\n":
            line += 1
        if c == "{":
            head = statement.strip()
            inside_function = any(kind == "function" for kind, _ in stack)
            if re.search(r"\bnamespace\b", head) or head.startswith("extern \"C\""):
                kind = "namespace"
            elif not inside_function and re.search(r"\b(class|struct|union|enum)\b[^(]*$", head):
                kind = "type"
            elif not inside_function and ")" in head and not head.endswith("=") and \
                    not re.match(r"^(if|for|while|switch|catch|do|else)\b", head):
                kind = "function"
            else:
                kind = "block"
            stack.append((kind, statement_line))
            statement, statement_line = "", line
        elif c == "}":
            if stack:
                kind, start = stack.pop()
                if kind == "function":
                    yield start, line - start + 1
            statement, statement_line = "", line
        elif c == ";":
            statement, statement_line = "", line
        else:
            if not statement.strip() and not c.isspace():
                statement_line = line
            statement += c


def main(argv):
    args = argv[1:]
    limit = 80
    if len(args) >= 2 and args[0] == "--limit":
        limit, args = int(args[1]), args[2:]
    long_ones = []
    for folder in args:
        for path in sorted(p for p in Path(folder).rglob("*") if p.suffix in (".cc", ".h", ".hpp")):
            lines = path.read_text(errors="replace").splitlines()
            for start, length in functions(path):
                if length > limit:
                    long_ones.append(f"{path}:{start}: {length} lines: {lines[start - 1].strip()[:90]}")
    if long_ones:
        print(f"functions over {limit} lines:")
        print("\n".join(long_ones))
        return 1
    print(f"check-function-length: every function in {', '.join(args)} within {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
