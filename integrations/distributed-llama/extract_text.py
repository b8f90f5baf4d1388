#!/usr/bin/env python3
"""Reads `dllama inference` output on stdin and writes the generated text, as llama2.c prints it.

dllama prints one line per generated token, "🔶 Pred ... kB | PIECE", a piece may hold newlines, and the last
one is followed by "\nEvaluation\n". The text is the pieces joined, minus one leading space (SentencePiece and
llama2.c drop it after BOS), plus the final "\n" llama2.c prints. No numpy: any python3.
"""
import re
import sys

PIECE = re.compile(rb'\xf0\x9f\x94\xb6 Pred *\d+ ms Sync *\d+ ms \| Sent *\d+ kB Recv *\d+ kB \| (.*?)\n'
                   rb'(?=\xf0\x9f\x94\xb6 Pred|\nEvaluation\n)', re.S)


def main():
    text = b''.join(PIECE.findall(sys.stdin.buffer.read()))
    if not text:
        sys.stderr.write('extract_text.py: no "Pred" lines in the input\n')
        return 1
    sys.stdout.buffer.write((text[1:] if text[:1] == b' ' else text) + b'\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
