#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) on a GGUF, fed a prompt and then the engine's generated tokens: prints JSON
{"n_vocab": N, "gaps": [...]}, per generated step llama.cpp's largest logit minus its logit of the engine's
token (0 where llama.cpp picks the same). make_model_check.py runs it with a Python that has llama_cpp
(LLAMA_CPP_PYTHON), as scripts/llm/reference.py runs llama.cpp.
  llamacpp_gaps.py GGUF PROMPT_IDS ENGINE_TOKENS   (ids comma-separated)
"""
import json
import sys

import llama_cpp
import numpy as np


def main():
    path, prompt, tokens = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    m = llama_cpp.Llama(model_path=path, n_ctx=64, n_threads=2, verbose=False, logits_all=True, seed=0)
    m.eval([int(t) for t in prompt])
    gaps = []
    for t in (int(t) for t in tokens):
        s = np.asarray(m.scores[m.n_tokens - 1], dtype=np.float64)
        gaps.append(float(s.max() - s[t]))
        m.eval([t])
    print(json.dumps({"n_vocab": m.n_vocab(), "gaps": gaps}))


if __name__ == "__main__":
    main()
