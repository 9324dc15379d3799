#!/usr/bin/env python3
"""The output rule (runtime/guard/output_file.h) through the tools, as a careless user would meet it:
  - `llm --json-out / --trace / --logits-out` and `gpunvme read --out` (and `read >> IMAGE`) naming the
    device's own image, by its path, a hard link or a symlink, exit != 0 naming the output and the
    device, and the image's bytes are unchanged (sha256 before and after);
  - `llm --trace /dev/full` exits != 0 ("No space left on device");
  - a run that fails after its outputs were opened leaves the old file as it was and no temporary file;
  - a good run writes all three outputs, consistent with each other, and `read --out` the device's bytes.
The model is llm_make_model's tiny one (no GPU, no gguf-py).
  test_output_file_cli.py --llm BUILD/examples/llm/llm --make-model BUILD/examples/llm_make_model --gpunvme BUILD/gpunvme
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tool_run  # noqa: E402  (tests/tool_run.py)

VOCAB = 512  # llm_make_model's tiny shape

failures = []


def check(ok, what, out=""):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
        if out:
            print("     output: " + out.strip().replace("\n", "\n             "))


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm", required=True)
    ap.add_argument("--make-model", required=True)
    ap.add_argument("--gpunvme", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpunvme-output-cli-") as d:
        img = os.path.join(d, "model.img")
        rc, out = tool_run.run([a.make_model, "--shape", "tiny", "--type", "q4_k", "--device", f"emu:{img},size=32M"])
        if rc != 0:
            print(out)
            return 1
        before = sha(img)
        os.link(img, os.path.join(d, "hard.img"))
        os.symlink(img, os.path.join(d, "sym.img"))
        dev = f"emu:{img}"
        llm = [a.llm, "--prompt-ids", "1,2,3", "-n", "2", "--path", "cpu"]

        # Every output flag onto the device, by every name: refused, naming both, the image untouched.
        cases = []
        for flag in ("--json-out", "--trace", "--logits-out"):
            cases.append((f"llm {flag} IMAGE", llm + ["--device", dev, flag, img], img, dev))
        cases.append(("llm --json-out HARDLINK", llm + ["--device", dev, "--json-out", os.path.join(d, "hard.img")],
                      os.path.join(d, "hard.img"), dev))
        cases.append(("llm --trace SYMLINK (device with options)",
                      llm + ["--device", dev + ",size=32M", "--trace", os.path.join(d, "sym.img")],
                      os.path.join(d, "sym.img"), dev + ",size=32M"))
        cases.append(("gpunvme read --out IMAGE", [a.gpunvme, "read", "--device", dev, "--out", img], img, dev))
        cases.append(("gpunvme read --out SYMLINK", [a.gpunvme, "read", "--device", dev, "--out", os.path.join(d, "sym.img")],
                      os.path.join(d, "sym.img"), dev))
        for name, cmd, path, device in cases:
            rc, out = tool_run.run(cmd)
            check(rc != 0 and path in out and device in out and "choose another path" in out, f"{name}: refused (exit {rc})", out)
            check(sha(img) == before, f"{name}: the image's bytes are unchanged")
        # stdout appended to the image by the shell (no truncation): the tool refuses to write it.
        p = subprocess.run(f"'{a.gpunvme}' read --device '{dev}' --bytes 4K >> '{img}'", shell=True,
                           stderr=subprocess.PIPE, timeout=120)
        err = p.stderr.decode("utf-8", "replace")
        check(p.returncode != 0 and "/dev/stdout" in err and dev in err, f"gpunvme read >> IMAGE: refused (exit {p.returncode})", err)
        check(sha(img) == before, "gpunvme read >> IMAGE: the image's bytes are unchanged")

        # A write error is an error.
        rc, out = tool_run.run(llm + ["--device", dev, "--trace", "/dev/full"])
        check(rc != 0 and "--trace /dev/full" in out and "No space left on device" in out, f"llm --trace /dev/full: exit {rc}", out)
        rc, out = tool_run.run([a.gpunvme, "read", "--device", dev, "--bytes", "4K", "--out", "/dev/full"])
        check(rc != 0 and "No space left on device" in out, f"gpunvme read --out /dev/full: exit {rc}", out)
        rc, out = tool_run.run(llm + ["--device", dev, "--json-out", os.path.join(d, "no", "such", "dir.json")])
        check(rc != 0 and "does not exist" in out, f"llm --json-out in a missing directory: exit {rc}", out)

        # A failed run (a token outside the vocabulary, found after the outputs opened) leaves the old files.
        outs = {name: os.path.join(d, name) for name in ("run.json", "trace.jsonl", "logits.bin")}
        for path in outs.values():
            with open(path, "w") as f:
                f.write("the old file\n")
        flags = ["--json-out", outs["run.json"], "--trace", outs["trace.jsonl"], "--logits-out", outs["logits.bin"]]
        rc, out = tool_run.run([a.llm, "--device", dev, "--prompt-ids", f"1,{VOCAB + 7}", "-n", "2", "--path", "cpu"] + flags)
        check(rc != 0, f"llm with a bad prompt id fails (exit {rc})", out)
        for name, path in outs.items():
            with open(path) as f:
                check(f.read() == "the old file\n", f"a failed run leaves the old {name}")
        names = sorted(os.listdir(d))
        check(names == sorted(["model.img", "hard.img", "sym.img"] + list(outs)), f"and no temporary file: {names}")

        # A good run replaces all three, consistently.
        rc, out = tool_run.run([a.llm, "--device", dev, "--prompt-ids", "1,2,3", "-n", "3", "--ignore-eos", "--path", "cpu"] + flags)
        check(rc == 0, f"llm with three outputs succeeds (exit {rc})", out)
        if rc == 0:
            with open(outs["run.json"]) as f:
                tokens = json.load(f)["tokens"]
            with open(outs["trace.jsonl"]) as f:
                traced = [json.loads(line)["token"] for line in f]
            check(len(tokens) == 3 and traced == tokens, f"--trace has the run's tokens: {traced} vs {tokens}")
            check(os.path.getsize(outs["logits.bin"]) == 3 * VOCAB * 4, "--logits-out has every token's logits")
        check(sha(img) == before, "the image is unchanged by the good run")

        blocks = os.path.join(d, "blocks.bin")
        rc, out = tool_run.run([a.gpunvme, "read", "--device", dev, "--bytes", "8K", "--out", blocks])
        with open(img, "rb") as f:
            head = f.read(8192)
        check(rc == 0 and os.path.exists(blocks) and open(blocks, "rb").read() == head,
              "gpunvme read --out FILE writes the device's bytes", out)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
