#!/usr/bin/env python3
"""What `pip install .` puts in the wheel, checked on the main build's install plan in a second instead of
a 4-to-12-minute pip build: meson-python packs the files whose install tag pyproject.toml names
(tool.meson-python.args.install --tags) and builds the target it names (args.compile). So:
- every module of the package's source folder (runtime/python/gpunvme, *.py, *.pyi, py.typed) is installed
  under that tag (a module left out of a meson.build would be missing from the wheel only);
- the engine module is too (an extension module's default tag is runtime: it was left out once);
- all of it in one of purelib and platlib (meson-python refuses a package split between the two);
- nothing else carries the tag, and the compile target exists in the build.
  wheel_plan_check.py BUILD_DIR
"""
import json
import os
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from checks import check, summary  # noqa: E402

PACKAGE = os.path.join(ROOT, "runtime", "python", "gpunvme")


def main():
    build = sys.argv[1]
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        args = tomllib.load(f)["tool"]["meson-python"]["args"]
    tags = [a.split("=", 1)[1] for a in args["install"] if a.startswith("--tags=")]
    check("pyproject.toml names one install tag", len(tags), 1)
    with open(os.path.join(build, "meson-info", "intro-install_plan.json")) as f:
        plan = json.load(f)
    tagged = {}  # source -> destination, for the wheel's tag
    for group in plan.values():
        for source, entry in group.items():
            if entry.get("tag") == tags[0]:
                tagged[source] = entry["destination"]
    sources = sorted(os.path.relpath(os.path.join(d, f), PACKAGE) for d, _, files in os.walk(PACKAGE)
                     for f in files if f.endswith((".py", ".pyi")) or f == "py.typed")
    installed = sorted(os.path.relpath(s, PACKAGE) for s in tagged if s.startswith(PACKAGE + os.sep))
    check(f"the package's {len(sources)} source files are installed under the tag {tags[0]}", installed, sources)
    engine = [d for s, d in tagged.items() if os.path.basename(s).startswith("_engine.") and s.endswith(".so")]
    check("the engine module is installed under the tag", len(engine), 1)
    roots = {d.split("/", 1)[0] for d in tagged.values()}
    check("all in one of purelib and platlib", roots, {"{py_platlib}"})
    others = sorted(d for d in tagged.values() if not d.split("/", 1)[1].startswith("gpunvme/"))
    check("nothing else carries the tag", others, [])
    with open(os.path.join(build, "build.ninja")) as f:
        ninja = f.read()
    missing = [t for t in args["compile"] if f"build {t}: phony" not in ninja]
    check("the compile targets exist", missing, [])
    return summary("wheel plan")


if __name__ == "__main__":
    sys.exit(main())
