"""A generation's text as it grows (gpunvme.Model's TextStream and the server's replies): token pieces (bytes, a UTF-8 character may span two tokens)
joined and decoded, and cut at the first stop string. Text that could still become a stop string is held
back, so a streamed client never receives the start of a stop it then should not have seen."""
import codecs


class TextCutter:
    def __init__(self, stops):
        self.stops = [s for s in stops if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._text = ""
        self._sent = 0  # characters of _text handed out
        self.stopped = False

    def add(self, piece: bytes) -> str:
        """The text now safe to send after this piece ("" while held back); sets `stopped` at a stop."""
        if self.stopped:
            return ""
        self._text += self._decoder.decode(piece)
        return self._release(final=False)

    def finish(self) -> str:
        """What is left when the sequence ended without a stop string (an unfinished character as U+FFFD)."""
        if self.stopped:
            return ""
        self._text += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def text(self) -> str:
        return self._text[:self._sent]

    def _release(self, final):
        # A stop can only begin where it was not yet ruled out: in the held-back tail or the new text.
        begin = max(0, self._sent - max((len(s) for s in self.stops), default=0))
        hits = [i for i in (self._text.find(s, begin) for s in self.stops) if i >= 0]
        if hits:
            end, self.stopped = min(hits), True
        elif final:
            end = len(self._text)
        else:
            end = len(self._text) - self._held(self._text)
        end = max(end, self._sent)
        out, self._sent = self._text[self._sent:end], end
        if self.stopped:
            self._text = self._text[:end]
        return out

    def _held(self, text):
        """Length of the longest end of `text` that begins some stop string."""
        return max((n for s in self.stops for n in range(min(len(s) - 1, len(text)), 0, -1)
                    if s.startswith(text[-n:])), default=0)
