#!/usr/bin/env python3
"""TextCutter (runtime/python/gpunvme/text_cutter.py), which gpunvme.Model's streams and the server's texts
go through:
pieces joined across a UTF-8 character split over tokens, a stop string spanning pieces cut before it and
never sent in part, a held-back tail released when it turns out not to be a stop, the earliest of several
stops winning, an unfinished character at the end as U+FFFD. Needs nothing but Python."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime", "python"))
from checks import check, summary  # noqa: E402
from gpunvme.text_cutter import TextCutter  # noqa: E402


def run(pieces, stops):
    """(what each add() returned, what finish() returned, stopped)."""
    c = TextCutter(stops)
    sent = [c.add(p) for p in pieces]
    return sent, c.finish(), c.stopped


e_acute = "é".encode()  # two bytes: a byte-fallback tokenizer may give them in two tokens
check("a character split over two pieces comes whole", run([b"caf", e_acute[:1], e_acute[1:], b"!"], []),
      (["caf", "", "é", "!"], "", False))
check("a stop over three pieces: cut before it, none of it sent", run([b"Hello ", b"wo", b"rl", b"d!"], ["world"]),
      (["Hello ", "", "", ""], "", True))
check("a held-back tail that is no stop is released", run([b"Hello wo", b"nder"], ["world"]),
      (["Hello ", "wonder"], "", False))
check("a held-back tail released at the end", run([b"Hello wor"], ["world"]), (["Hello "], "wor", False))
check("the earliest of several stops wins", run([b"a.b\nc"], ["\n", "."]), (["a"], "", True))
check("nothing after a stop", run([b"x END y", b"more"], ["END"]), (["x ", ""], "", True))
check("an unfinished character at the end is U+FFFD", run([b"ok", e_acute[:1]], []), (["ok", ""], "\ufffd", False))
check("empty stop strings are ignored", run([b"abc"], [""]), (["abc"], "", False))
sys.exit(summary("TextCutter"))
