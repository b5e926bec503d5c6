"""Transport seams for the real-GPU methods, which no GPU here can run: a fake ``nvidia-smi``, a fake
``libcudart.so`` (built with the C compiler), a fake ``tc``. They emulate only the interface the code
uses (the CSV of ``--query-gpu``, ``-lgc``/``-rgc``, the CUDA runtime calls, ``tc qdisc``) — never the
hardware: passing against them proves the plumbing, not the effect on a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FAKE_SMI = r'''#!{python}
"""Fake nvidia-smi: 2 GPUs; memory.used = base + what drill's hogs report holding; -lgc/-rgc lock clocks."""
import glob, json, os, sys
STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "smi-state.json")
state = json.load(open(STATE)) if os.path.exists(STATE) else {{"locks": {{}}}}
args = sys.argv[1:]
if args and args[0].startswith("--query-gpu"):
    for i in range(2):
        held = sum(json.load(open(f))["held"] for f in glob.glob("/tmp/drill-hog-*.json")
                   if json.load(open(f))["device"] == i)
        lock = state["locks"].get(str(i))
        sm = min(1980, lock) if lock else 1980
        print(f"{{i}}, GPU-fake-{{i}}, NVIDIA H100 80GB HBM3, {{1024 + held // 2**20}}, 81559, {{sm}}, 1980")
    sys.exit(0)
if "-i" in args and ("-lgc" in args or "-rgc" in args):
    if os.geteuid() != 0:
        print("Setting locked GPU clocks requires root"); sys.exit(4)
    index = args[args.index("-i") + 1]
    if "-lgc" in args:
        state["locks"][index] = int(args[args.index("-lgc") + 1].split(",")[1])
    else:
        state["locks"].pop(index, None)
    json.dump(state, open(STATE, "w"))
    print(f"GPU {{index}}: done"); sys.exit(0)
print("fake nvidia-smi: unsupported arguments", args); sys.exit(2)
'''

FAKE_TC = r'''#!{python}
"""Fake tc: keeps root qdiscs per device in a JSON file; 'qdisc add|show|del dev X root handle H: netem ...'."""
import json, os, sys
STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tc-state.json")
state = json.load(open(STATE)) if os.path.exists(STATE) else {{}}
a = sys.argv[1:]
if a[:2] == ["qdisc", "show"]:
    dev = a[3]
    print(state.get(dev) or f"qdisc noqueue 0: dev {{dev}} root refcnt 2"); sys.exit(0)
if a[:2] == ["qdisc", "add"]:
    dev, handle = a[3], a[6]
    if dev in state:
        print("Error: Exclusivity flag on, cannot modify."); sys.exit(2)
    state[dev] = f"qdisc netem {{handle}} dev {{dev}} root refcnt 2 limit 1000 " + " ".join(a[8:])
elif a[:2] == ["qdisc", "del"]:
    dev = a[3]
    if dev not in state:
        print("Error: Cannot delete qdisc with handle of zero."); sys.exit(2)
    del state[dev]
json.dump(state, open(STATE, "w"))
'''

FAKE_CUDART = r"""
#include <stddef.h>
static size_t used = 0;
static const size_t total = 80ull << 30;
int cudaSetDevice(int device) { return device <= 1 ? 0 : 101; }
int cudaMalloc(void **ptr, size_t n) { if (used + n > total) return 2; used += n; *ptr = (void *)used; return 0; }
int cudaMemset(void *ptr, int value, size_t n) { return 0; }
int cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = total - used; *total_bytes = total; return 0;
}
"""


def write_tool(directory: Path, name: str, template: str, python: str = sys.executable) -> Path:
    """Write an executable fake tool named ``name`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(template.format(python=python))
    path.chmod(0o755)
    return path


def c_compiler() -> str | None:
    """The C compiler ``./dev setup`` provides (``$CC``, cc, gcc or clang), as scripts/setup.sh looks for it."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def build_fake_cudart(directory: Path) -> Path:
    """Compile the fake CUDA runtime into ``directory``/libcudart.so.

    Without a C compiler the test fails (``./dev setup`` installs one), so a machine that lacks it cannot
    pass the GPU tests by skipping them; ``DRILL_ALLOW_NO_CC=1`` turns that into a visible skip.
    """
    compiler = c_compiler()
    if compiler is None:
        message = "no C compiler (cc, gcc, clang or $CC) to build the fake libcudart.so; run ./dev setup"
        if os.environ.get("DRILL_ALLOW_NO_CC"):
            pytest.skip(message)
        pytest.fail(message)
    directory.mkdir(parents=True, exist_ok=True)
    source, library = directory / "fake_cudart.c", directory / "libcudart.so"
    source.write_text(FAKE_CUDART)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=60)
    return library
