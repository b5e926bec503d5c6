"""Real NVIDIA GPU helpers: ``nvidia-smi`` queries and clock locks, and a CUDA memory hog.

**Not verified on hardware.** No GPU was available where this was written; the code follows
NVIDIA's documented interfaces and is tested at its transport seam only (a fake ``nvidia-smi``
on ``PATH``, a fake ``libcudart.so`` built by the test). Faults using it are marked
``Realism.HARDWARE_UNVERIFIED`` (docs/fault-methods.md §2 lists these primitives):

* ``nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,clocks.sm,clocks.max.sm
  --format=csv,noheader,nounits`` — one CSV line per GPU (MiB, MHz);
* ``nvidia-smi -i <i> -lgc <min>,<max>`` locks the graphics (SM) clock into a range (root, Volta+);
  ``nvidia-smi -i <i> -rgc`` resets it to the default;
* the memory hog is :data:`HOG_SCRIPT`, run with ``python3 -c`` on the host or through
  ``docker exec`` in a replica's container. It allocates with the CUDA runtime
  (``cudaSetDevice``/``cudaMalloc``/``cudaMemset``/``cudaMemGetInfo`` from ``libcudart.so``, the
  driver API ``libcuda.so.1`` as fallback), daemonizes, writes ``/tmp/drill-hog-<tag>.json``
  (its pid, bytes held, free/total bytes), holds the memory until SIGTERM or its lease runs out
  (a target-side dead-man switch: it frees the GPU even if nothing reverts it), and removes the
  file on exit.

``nvidia-smi`` runs on this host when ``container`` is None, else in the container. Every call
is bounded by ``timeout_s``; failures raise :class:`drill.errors.GpuError` with a hint.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from drill.errors import GpuError

if TYPE_CHECKING:  # pragma: no cover
    from drill.backends.docker import DockerBackend

__all__ = ["GpuControl", "GpuInfo", "HOG_SCRIPT", "HogStatus"]

DEFAULT_TIMEOUT_S = 10.0
GIB = 1024**3
_QUERY = "index,uuid,name,memory.used,memory.total,clocks.sm,clocks.max.sm"
_SMI_EXIT = {
    4: "insufficient permissions (locking clocks needs root)",
    6: "the query failed",
    9: "the NVIDIA driver is not loaded",
    15: "the GPU is lost or fell off the bus",
}

#: The memory hog: ``python3 -c HOG_SCRIPT TAG BYTES DEVICE LEASE_S CUDA_LIB``.
HOG_SCRIPT = r"""
import ctypes, glob, json, os, signal, sys, time
tag, want, device, lease, lib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
path = "/tmp/drill-hog-%s.json" % tag
CHUNK = 1 << 30

def runtime(names):
    for name in names:
        try:
            cuda = ctypes.CDLL(name)
        except OSError:
            continue
        if cuda.cudaSetDevice(device) != 0:
            raise SystemExit("cudaSetDevice(%d) failed" % device)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        def alloc(n):
            ptr = ctypes.c_void_p()
            if cuda.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(n)) != 0:
                return False
            cuda.cudaMemset(ptr, 1, ctypes.c_size_t(n))
            return True
        def info():
            cuda.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
            return free.value, total.value
        return "cudart:" + name, alloc, info
    return None

def driver():
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), device):
        raise SystemExit("cuInit/cuDeviceGet(%d) failed" % device)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    def alloc(n):
        ptr = ctypes.c_uint64()
        if cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(n)) != 0:
            return False
        cuda.cuMemsetD8_v2(ptr, 1, ctypes.c_size_t(n))
        return True
    def info():
        cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value
    return "driver:libcuda.so.1", alloc, info

def hold():
    names = [lib] if lib else ["libcudart.so", "libcudart.so.12", "libcudart.so.11.0"] + sorted(
        glob.glob(sys.prefix + "/lib/python3*/site-packages/nvidia/cuda_runtime/lib/libcudart.so*"))
    api, alloc, info = runtime(names) or driver()
    held = 0
    while held < want and alloc(min(CHUNK, want - held)):
        held += min(CHUNK, want - held)
    free, total = info()
    status = {"pid": os.getpid(), "tag": tag, "api": api, "wanted": want, "held": held, "free": free,
              "total": total, "device": device, "until": time.time() + lease}
    with open(path + ".tmp", "w") as fh:
        json.dump(status, fh)
    os.replace(path + ".tmp", path)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    try:
        time.sleep(lease)
    finally:
        os.path.exists(path) and os.unlink(path)

try:
    running = json.load(open(path))
except (OSError, ValueError):
    running = None
if running and os.path.exists("/proc/%d" % running["pid"]):
    print(json.dumps(running)); sys.exit(0)
pid = os.fork()
if pid == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        hold()
    finally:
        os._exit(0)
deadline = time.time() + 60
while time.time() < deadline:
    if os.path.exists(path):
        print(open(path).read()); sys.exit(0)
    if os.waitpid(pid, os.WNOHANG) != (0, 0):
        sys.exit("the hog process exited before holding any memory (no CUDA library, or no device %d)" % device)
    time.sleep(0.05)
sys.exit("the hog did not report within 60s")
"""

#: Read a hog's status, or stop it: ``python3 -c ... TAG stop|status``.
_HOG_CTL = r"""
import json, os, signal, sys, time
path = "/tmp/drill-hog-%s.json" % sys.argv[1]
try:
    status = json.load(open(path))
except (OSError, ValueError):
    print("{}"); sys.exit(0)
def running(pid):
    try:
        return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False
alive = running(status["pid"])
if sys.argv[2] == "stop" and alive:
    os.kill(status["pid"], signal.SIGTERM)
    for _ in range(200):
        if not running(status["pid"]):
            break
        time.sleep(0.025)
    else:
        os.kill(status["pid"], signal.SIGKILL)
    alive = False
if not alive and os.path.exists(path):
    os.unlink(path)
status["alive"] = alive
print(json.dumps(status))
"""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi`` reports it: memory in MiB, clocks in MHz."""

    index: int
    uuid: str
    name: str
    memory_used_mib: float
    memory_total_mib: float
    clocks_sm_mhz: float
    clocks_max_sm_mhz: float


@dataclass(frozen=True)
class HogStatus:
    """A running memory hog: its pid, bytes ``held`` of ``wanted``, the device's free/total bytes after."""

    pid: int
    api: str
    wanted: int
    held: int
    free: int
    total: int
    device: int
    alive: bool = True


class GpuControl:
    """``nvidia-smi`` and the CUDA memory hog, on this host or in a container (through ``docker``)."""

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        docker: Callable[[], DockerBackend] | None = None,
        nvidia_smi: str = "nvidia-smi",
        python: str = "python3",
    ) -> None:
        self.timeout_s = timeout_s
        self._docker = docker
        self.nvidia_smi = nvidia_smi
        self.python = python

    def close(self) -> None:
        """Nothing to release (the Docker connection belongs to the fault context)."""

    # -- nvidia-smi ------------------------------------------------------------------------------
    def query(self, container: str | None = None) -> list[GpuInfo]:
        """Every GPU visible on the host (or in ``container``)."""
        out = self._smi(["--query-gpu=" + _QUERY, "--format=csv,noheader,nounits"], container, "query GPUs")
        return [_gpu_line(line) for line in out.splitlines() if line.strip()]

    def lock_clocks(self, indices: list[int], max_mhz: int, min_mhz: int | None = None) -> None:
        """Lock the SM clock of GPUs ``indices`` into ``min_mhz``–``max_mhz`` (host only; root)."""
        for index in indices:
            self._smi(
                ["-i", str(index), "-lgc", f"{min_mhz or max_mhz},{max_mhz}"],
                None,
                f"lock GPU {index} clocks at {max_mhz} MHz",
            )

    def reset_clocks(self, indices: list[int]) -> None:
        """Remove the clock lock of GPUs ``indices`` (``-rgc``; idempotent)."""
        for index in indices:
            self._smi(["-i", str(index), "-rgc"], None, f"reset GPU {index} clocks")

    def _smi(self, args: list[str], container: str | None, operation: str) -> str:
        if container is not None:
            return self._in_container(container, [self.nvidia_smi, *args], operation)
        if shutil.which(self.nvidia_smi) is None:
            raise GpuError(
                f"{operation}: {self.nvidia_smi} not found on this host",
                operation=operation,
                hint="this method needs real NVIDIA GPUs and their driver tools",
            )
        return self._host([self.nvidia_smi, *args], operation)

    # -- memory hog ------------------------------------------------------------------------------
    def start_memory_hog(
        self,
        container: str | None,
        *,
        tag: str,
        gib: float,
        device: int = 0,
        lease_s: float = 3600.0,
        cuda_lib: str = "",
        python: str | None = None,
    ) -> HogStatus:
        """Start a process holding ``gib`` GiB on ``device``; returns once it holds them (or fails).

        ``python`` is the interpreter where it runs (default ``self.python``). Idempotent for one
        ``tag``: a hog already running is reported, not doubled.
        """
        args = [
            python or self.python,
            "-c",
            HOG_SCRIPT,
            tag,
            str(int(gib * GIB)),
            str(device),
            f"{lease_s:g}",
            cuda_lib,
        ]
        out = self._run(container, args, f"start a {gib:g} GiB memory hog on GPU {device}")
        status = _hog(out)
        if status is None:
            raise GpuError(f"the memory hog reported nothing: {out[:200]!r}", operation="start memory hog")
        return status

    def hog_status(self, container: str | None, tag: str, python: str | None = None) -> HogStatus | None:
        """The hog ``tag`` as it reports itself; None when none is running."""
        argv = [python or self.python, "-c", _HOG_CTL, tag, "status"]
        status = _hog(self._run(container, argv, "read memory hog"))
        return status if status is not None and status.alive else None

    def stop_memory_hog(self, container: str | None, tag: str, python: str | None = None) -> bool:
        """Stop hog ``tag`` (SIGTERM, SIGKILL after 5 s); False when none was running. Idempotent."""
        argv = [python or self.python, "-c", _HOG_CTL, tag, "stop"]
        return _hog(self._run(container, argv, "stop memory hog")) is not None

    # -- plumbing --------------------------------------------------------------------------------
    def _run(self, container: str | None, argv: list[str], operation: str) -> str:
        if container is None:
            return self._host(argv, operation)
        return self._in_container(container, argv, operation)

    def _host(self, argv: list[str], operation: str) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise GpuError(
                f"{operation}: {argv[0]} did not finish within {self.timeout_s:g}s", operation=operation
            ) from exc
        except OSError as exc:
            raise GpuError(f"{operation}: cannot run {argv[0]}: {exc}", operation=operation) from exc
        return _checked(done.returncode, done.stdout + done.stderr, argv[0], operation)

    def _in_container(self, container: str, argv: list[str], operation: str) -> str:
        if self._docker is None:
            raise GpuError(f"{operation}: no Docker backend to reach container {container}", operation=operation)
        result = self._docker().exec(container, argv)
        return _checked(
            result.exit_code, result.output.decode(errors="replace"), argv[0], f"{operation} in container {container}"
        )


def _checked(code: int, output: str, program: str, operation: str) -> str:
    if code == 0:
        return output
    why = _SMI_EXIT.get(code, "") if "nvidia-smi" in program else ""
    raise GpuError(
        f"{operation}: {program} exited {code}{' (' + why + ')' if why else ''}: {output.strip()[-300:]}",
        operation=operation,
        hint="real-GPU methods need NVIDIA GPUs, their driver and CUDA where the replica runs",
    )


def _gpu_line(line: str) -> GpuInfo:
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 7:
        raise GpuError(f"unexpected nvidia-smi line {line!r}", operation="query GPUs")
    return GpuInfo(int(parts[0]), parts[1], parts[2], *(_number(p) for p in parts[3:]))


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")  # "[N/A]" on GPUs that do not report it


def _hog(output: str) -> HogStatus | None:
    lines = [line for line in output.strip().splitlines() if line.startswith("{")]
    try:
        data = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return None
    if not data:
        return None
    return HogStatus(
        pid=int(data["pid"]),
        api=str(data["api"]),
        wanted=int(data["wanted"]),
        held=int(data["held"]),
        free=int(data["free"]),
        total=int(data["total"]),
        device=int(data["device"]),
        alive=bool(data.get("alive", True)),
    )
