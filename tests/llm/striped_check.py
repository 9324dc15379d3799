#!/usr/bin/env python3
"""Striped sets written by llm_make_model and read by the engine (examples/llm, CPU path), as a careless
user meets them (issue 32):
  - a member image saved before a re-deploy and put back after it: `llm`, `gpunvme ls` and `verify` exit
    != 0 naming that member and both generations (the engine used to run a mix of two models, exit 0);
    writing the set again repairs it, and the engine's tokens are then the new model's;
  - members of 512- and 4096-byte blocks: refused naming both, no crash, both images unchanged;
  - an emu:ram member: refused (the set would vanish with the process), no image created for the other;
  - --out FILE over an image holding a deployed model, or a set member: refused, the image unchanged;
    --force replaces it; a GGUF over a GGUF is the normal case.
  striped_check.py --make-model BUILD/examples/llm_make_model --llm BUILD/examples/llm/llm --gpunvme BUILD/gpunvme
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tool_run  # noqa: E402  (tests/tool_run.py)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    a = tool_run.tool_paths(required=("make-model", "llm", "gpunvme"))
    failed = 0

    def report(ok, what, out=""):
        nonlocal failed
        print(("ok   " if ok else "FAIL ") + what + ("" if ok or not out else "\n     " + out.strip().replace("\n", "\n     ")))
        failed += not ok

    def make(*args):
        return tool_run.run([a.make_model, "--shape", "tiny", "--type", "q4_k"] + list(args), timeout=120)

    with tempfile.TemporaryDirectory() as d:
        m0, m1, saved = (os.path.join(d, n) for n in ("m0.img", "m1.img", "m1.saved"))
        members = ["--device", "emu:" + m0, "--device", "emu:" + m1]
        out_json = os.path.join(d, "run.json")

        def tokens():
            rc, out = tool_run.run([a.llm] + members + ["--prompt-ids", "1,2,3", "-n", "8", "--ignore-eos", "--path", "cpu",
                                                        "--json-out", out_json], timeout=120)
            return (json.load(open(out_json))["tokens"] if rc == 0 else None), rc, out

        # --- a member saved before a re-deploy ---
        rc, out = make("--device", f"emu:{m0},size=8M", "--device", f"emu:{m1},size=8M")
        report(rc == 0, "llm_make_model writes the set (seed 1)", out)
        with open(m1, "rb") as src, open(saved, "wb") as dst:
            dst.write(src.read())
        rc, out = make("--seed", "2", *members)
        report(rc == 0, "and writes it again (seed 2), no --force: the same layout", out)
        seed2, rc, out = tokens()
        report(seed2 is not None and len(seed2) == 8, f"the engine runs the seed-2 set: {seed2}", out)
        os.replace(saved, m1)  # the old member 2 is back
        toks, rc, out = tokens()
        report(rc != 0 and toks is None and f"emu:{m1} (member 2) holds generation 1" in out
               and "older than generation 2" in out and "Re-deploy" in out,
               f"llm --path cpu refuses member 2 of generation 1 among generation 2: exit {rc}", out)
        for cmd in ("ls", "verify"):
            rc, out = tool_run.run([a.gpunvme, cmd] + members)
            report(rc == 1 and f"emu:{m1} namespace 1 (member 2) holds generation 1" in out,
                   f"gpunvme {cmd} refuses it too: exit {rc}", out)
        rc, out = make("--seed", "2", *members)
        report(rc == 0, "writing the set again (the fix the message names) needs no --force", out)
        toks, rc, out = tokens()
        report(toks == seed2, f"and the engine's tokens are the seed-2 model's again: {toks}", out)

        # --- members of two block sizes (it died of SIGSEGV) ---
        b0, b1 = os.path.join(d, "b0.img"), os.path.join(d, "b1.img")
        for p in (b0, b1):
            with open(p, "wb") as f:
                f.truncate(8 << 20)
        before = (sha(b0), sha(b1))
        rc, out = make("--device", "emu:" + b0, "--device", f"emu:{b1},lba=4096")
        report(rc == 1 and "must share one block size" in out and f"emu:{b0} namespace 1 has 512-byte blocks" in out
               and f"emu:{b1},lba=4096 namespace 1 4096-byte blocks" in out,
               f"members of 512- and 4096-byte blocks refused naming both: exit {rc}", out)
        report((sha(b0), sha(b1)) == before, "and neither image changed")

        # --- an emu:ram member ---
        c = os.path.join(d, "c.img")
        rc, out = make("--device", "emu:ram,size=8M", "--device", f"emu:{c},size=8M")
        report(rc == 1 and "emu:ram,size=8M lives in this process's memory" in out and "gone when it exits" in out,
               f"an emu:ram member refused: exit {rc}", out)
        report(not os.path.exists(c), "and no image was created for the other member")

        # --- --out over an image holding a model ---
        one = os.path.join(d, "one.img")
        rc, out = make("--device", f"emu:{one},size=8M")
        report(rc == 0, "llm_make_model writes a model onto one namespace", out)
        for image, what in ((one, "a gpunvme deploy record: an image holding the deployed model 'tiny-q4_k'"),
                            (m0, "a gpunvme striped-set record")):
            before = sha(image)
            rc, out = make("--out", image)
            report(rc == 1 and what in out and "--force" in out, f"--out over {os.path.basename(image)} refused: exit {rc}",
                   out)
            report(sha(image) == before, f"and {os.path.basename(image)} is unchanged")
        gguf = os.path.join(d, "tiny.gguf")
        rc1, out1 = make("--out", gguf)
        rc2, out2 = make("--out", gguf, "--seed", "3")
        report(rc1 == 0 and rc2 == 0, "--out over a GGUF (regenerating) is not refused", out1 + out2)
        rc, out = make("--out", one, "--force")
        with open(one, "rb") as f:
            report(rc == 0 and f.read(4) == b"GGUF", "--out --force replaces the image with the GGUF", out)

    print(f"{'FAILED' if failed else 'passed'}: {failed} failure(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
