#!/usr/bin/env python3
"""A small byte-level BPE vocabulary (GPT-2 style, as Llama 3 and Qwen2 use), trained on a built-in corpus,
for the engine's BPE tokenizer tests: no real Llama 3 or Qwen2 vocabulary is on PyPI, and the tokenizer's
code paths (pre-tokenizer, byte symbols, merge ranks) are the same for any vocabulary.

  bpe_train.py [--merges N]        prints a summary and a few tokens (make_models.py imports train())

Deterministic: words are counted, the most frequent adjacent pair is merged (ties: the smaller pair in
string order), N times. The corpus mixes English prose, code, numbers, accented Latin, Cyrillic, Greek,
CJK, emoji and white-space runs so that every pre-tokenizer rule meets learnt merges.
"""
import argparse
import heapq
import re
from collections import Counter

CORPUS = r"""
The quick brown fox jumps over the lazy dog. It's a sentence that uses every letter of the alphabet,
and we've all typed it a hundred times. They'll say it's boring; I'd say it's useful. DON'T PANIC!
Once upon a time, in a village by the sea, there lived an old fisherman and his daughter. Every morning
they walked down to the harbour, where the boats were waiting, and every evening they came back with
their nets full of silver fish. The capital of France is Paris; the capital of Germany is Berlin, and
the capital of Japan is Tokyo. Water boils at 100 degrees Celsius and freezes at 0 degrees.
A model streams its layers from the drive into the memory of the graphics card while the previous layer
computes. Reading 4096 bytes per command, with 256 commands in flight, keeps the queue busy.
Shopping list:
1. eggs
2. milk
3. bread (whole wheat)
4. apples, pears & oranges
    indented text
		tabbed text
trailing spaces   
Hello world! Hello, World? HELLO WORLD... hello   world
"Quoted text," she said. 'Single quotes' too -- and em-dashes — and ellipses…
Prices: $3.99, €12.50, £7, ¥1200; 15% off; 3/4 cup; 2+2=4; x^2 + y^2 = z^2; a <= b >= c != d.
Dates: 2024-01-15, 1999-12-31, 12:30:45; phone 555-0123; version 1.2.3; pi 3.14159265358979
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 42 99 100 123 256 512 1000 1024 2048 4096 65536 1000000
12345678901234567890 31415926535 271828 1618033988
def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

for i in range(10):
    print(f"fib({i}) = {fibonacci(i)}")

int main(int argc, char** argv) {
  std::vector<uint32_t> ids = tokenize(text);
  for (size_t i = 0; i < ids.size(); ++i) printf("%u\n", ids[i]);
  return 0;
}
class Tokenizer: pass  # comments, snake_case_names and camelCaseNames, CONSTANT_VALUES, __dunder__
<html><body><b>bold</b> & <i>italic</i> <a href="https://example.com/path?q=1&r=2">link</a></body></html>
{"key": "value", "list": [1, 2, 3], "nested": {"a": true, "b": null}}
Français : naïve café, résumé, élève, crème brûlée, garçon, où est la gare ? Ça va très bien, merci.
Deutsch: Über den Wolken muß die Freiheit wohl grenzenlos sein. Größe, Straße, Mädchen, schön, fünf.
Español: ¿Dónde está la biblioteca? ¡Qué bueno! El niño comió piña y jalapeños en la montaña.
Português: São Paulo, coração, ação, não, irmã, avô, português, você está aí?
Polski: Zażółć gęślą jaźń. Čeština: Příliš žluťoučký kůň úpěl ďábelské ódy. Dansk: Rødgrød med fløde.
Русский: Привет, мир! Как дела? Съешь же ещё этих мягких французских булок, да выпей чаю.
Ελληνικά: Γειά σου κόσμε! Καλημέρα, τι κάνεις;
日本語のテキスト。東京は日本の首都です。今日はいい天気ですね。ひらがな、カタカナ、漢字。
中文：你好，世界！北京是中国的首都。我们今天去公园散步吧。
한국어: 안녕하세요, 세계! 서울은 한국의 수도입니다.
العربية: مرحبا بالعالم. עברית: שלום עולם. हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก
Emoji: 🙂 😀 😂 🚀 🎉 👍 ❤️ 🔥 ✨ 🌍 🐍 🦀 👨‍👩‍👧 🇫🇷 — end
Whitespace runs:  two  spaces,   three,    four,        eight; tabs	and		double tabs; lines


and CRLF lines
"""

# Added to the corpus word counts: common words that make the vocabulary useful for prose.
EXTRA_WORDS = """the of and to in is was for on that with as by at from this be are or an it not have
has had but which one all were when there their will would more can if out so about what up its into them
than only other new some could time these two may then do first any my now such like our over man me even
most made after also did many before must through back years where much your way well down should because
each just those people how too little state good very make world still own see men work long get here
between both life being under never day same another know while last might us great old year off come
since against go came right used take three states himself few house use during without again place
around however home small found thought went say part once general high upon school every don does got
united left number course war until always away something fact though water less public put think almost
hand enough far took head yet government system better set told nothing night end why called didn eyes
find going look asked later knew point next program city business give group toward young days let room
president side social given present several order national possible rather second face per among form
important often things looking early white case john become large big need four within felt along
children saw best church ever least power development light thing seemed family interest want members
mind country area others done turned although open god service certain kind problem began different door
thus help sense means whole matter perhaps itself york times law human line above name example action
company hands local show whether five history gave today either act feet across taken past quite anything
seen having death week experience body word half field really already information tell together college
shall money period held keep sure probably free seems political real behind clear feel fire south
kernel memory buffer driver queue command completion doorbell namespace controller device stream layer
tensor weight token vocabulary merge rank symbol tokenizer engine model prompt context logits sample""".split()


def bytes_to_unicode():
    """GPT-2's byte -> printable code point table (the printable Latin-1 bytes stand for themselves)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


BYTE_SYMBOL = bytes_to_unicode()
# A rough Llama-3-style word split for counting (the tokenizer's own pre-tokenizer is the engine's and
# llama.cpp's; the trainer only needs plausible words): contractions, letters with one leading
# non-letter, 1-3 digits, punctuation runs, newline runs, white space.
WORD = re.compile(r"'(?:[sdmt]|ll|ve|re)|[^\r\n\w]?[^\W\d_]+|\d{1,3}| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+|_+",
                  re.IGNORECASE)


def corpus_words():
    counts = Counter(WORD.findall(CORPUS))
    for w in EXTRA_WORDS:
        counts[" " + w] += 3
        counts[" " + w.capitalize()] += 1
        counts[w.upper()] += 1
    return counts


def symbols(word):
    return tuple(BYTE_SYMBOL[b] for b in word.encode("utf-8"))


def train(n_merges):
    """(merges as "left right" strings, in rank order; the merged tokens in the same order)."""
    words = [list(symbols(w)) for w in sorted(corpus_words())]
    freq = [c for _, c in sorted(corpus_words().items())]
    pairs, where = Counter(), {}
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pairs[p] += freq[i]
            where.setdefault(p, set()).add(i)
    heap = [(-c, p) for p, c in pairs.items()]
    heapq.heapify(heap)
    merges = []
    while heap and len(merges) < n_merges:
        c, p = heapq.heappop(heap)
        if pairs.get(p, 0) != -c or c == 0:
            continue  # stale entry
        merges.append(p)
        touched = set()
        for i in sorted(where.pop(p, ())):
            w, new, k = words[i], [], 0
            for q in zip(w, w[1:]):
                pairs[q] -= freq[i]
                touched.add(q)
            while k < len(w):
                if k + 1 < len(w) and (w[k], w[k + 1]) == p:
                    new.append(w[k] + w[k + 1])
                    k += 2
                else:
                    new.append(w[k])
                    k += 1
            words[i] = new
            for q in zip(new, new[1:]):
                pairs[q] += freq[i]
                where.setdefault(q, set()).add(i)
                touched.add(q)
        for q in touched:
            if pairs[q] > 0:
                heapq.heappush(heap, (-pairs[q], q))
    return [f"{a} {b}" for a, b in merges], [a + b for a, b in merges]


def base_tokens():
    """The 256 byte symbols, in byte order."""
    return [BYTE_SYMBOL[b] for b in range(256)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--merges", type=int, default=3000)
    a = ap.parse_args()
    merges, toks = train(a.merges)
    decode = {v: k for k, v in BYTE_SYMBOL.items()}
    print(f"{len(merges)} merges; the last: " + ", ".join(
        repr(bytes(decode[ch] for ch in t).decode("utf-8", "replace")) for t in toks[-12:]))


if __name__ == "__main__":
    main()
