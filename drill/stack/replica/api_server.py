"""One replica process of the reference stack: ``python -m drill.stack.replica.api_server --launch FILE.json``.

Started by the supervisor (topology side) or by hand with tp = pp = 1 (stack-contracts.md §3).
In order: read the :class:`~drill.stack.launch.ReplicaLaunch`; plan GPU memory (vLLM's
start-up errors when the model does not fit); connect the TP/PP interconnect
(``drill.stack.interconnect.tcp.connect(launch)``; a no-op one for a single GPU); load the weights
(sleep the modelled weight-load time) *before* binding the port, as vLLM does; start the engine
loop and the HTTP server; write ``ready_file`` if asked.

Exit codes: 0 after SIGTERM/SIGINT (stop listening, let in-flight requests finish for up to
:data:`SHUTDOWN_GRACE_S`, abort the rest, flush spans and the ledger); 1 when the engine died
(simulated CUDA OOM, XID, broken link: every in-flight request has had its 500 or error event and
``[DONE]``, ``/health`` answered 503, exit within ~1 s); 2 when the launch or configuration cannot
start (nothing to restart); 3 on any other failure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from drill.errors import DrillError, InputError, StackError
from drill.stack.config import EngineConfig
from drill.stack.http.server import HttpServer, Router
from drill.stack.inference.core import Engine
from drill.stack.inference.cost_model import CostModel
from drill.stack.inference.executor import Executor
from drill.stack.inference.gpu import GpuState, plan_memory
from drill.stack.inference.kv_cache import KVCacheManager
from drill.stack.inference.scheduler import Scheduler
from drill.stack.interconnect import tcp as interconnect
from drill.stack.interconnect.step_exchange import Interconnect
from drill.stack.launch import PeerLaunch, ReplicaLaunch, read_replica_launch
from drill.stack.replica.admin_api import AdminApi
from drill.stack.replica.kv_worker import kv_hooks
from drill.stack.replica.ledger import Ledger
from drill.stack.replica.metrics import EngineMetrics
from drill.stack.replica.openai_api import ApiContext, OpenAIApi
from drill.stack.replica.recorder import RequestRecorder
from drill.stack.replica.request_spans import Tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor

__all__ = ["EXIT_ENGINE_DEAD", "PeerLaunch", "Replica", "ReplicaLaunch", "SHUTDOWN_GRACE_S", "main"]

log = logging.getLogger("drill.stack.replica")

SHUTDOWN_GRACE_S = 2.0
DEATH_LINGER_S = 0.4
DEATH_FLUSH_S = 0.2
EXIT_OK, EXIT_ENGINE_DEAD, EXIT_CONFIG, EXIT_FAILURE = 0, 1, 2, 3


class Replica:
    """The engine, its APIs and its HTTP server, built from a launch (nothing runs until :meth:`start`)."""

    def __init__(self, launch: ReplicaLaunch, *, span_processor: SpanProcessor | None = None) -> None:
        self.launch = launch
        config = launch.config
        engine_config = config.engine
        self.cost_model = CostModel(
            config.model_preset,
            config.gpu_preset,
            engine_config.tensor_parallel_size,
            engine_config.pipeline_parallel_size,
        )
        plan = plan_memory(self.cost_model, engine_config, config.gpu_preset.memory)
        kv = KVCacheManager(plan.num_blocks, engine_config.block_size, engine_config.enable_prefix_caching)
        self.scheduler = Scheduler(engine_config, kv)
        self.gpu = GpuState(plan, self.cost_model)
        self.tracing = Tracing(
            launch.service_name,
            launch.otlp_endpoint,
            span_processor=span_processor,
            resource={"drill.replica": launch.name, **_worker_resource(launch)},
            span_shape=config.tracing.span_shape,
        )
        self.ledger = Ledger(launch.ledger_path, launch.name)
        self.metrics = EngineMetrics(
            self.scheduler,
            model_name=config.model_name,
            max_model_len=engine_config.max_model_len,
            gpu=self.gpu,
            cache_info=_cache_info(engine_config, plan.num_blocks),
        )
        self.recorder = RequestRecorder(self.ledger, self.tracing, launch.name)
        self.engine = Engine(
            self.scheduler, Executor(self.cost_model, self.gpu), listeners=[self.metrics, self.recorder]
        )
        router = Router()
        self.kv = kv_hooks(launch, self.tracing)  # a P/D worker's KV side; None when aggregated
        self.metrics.kv = self.kv  # its connector metrics join the replica's /metrics
        self.api = OpenAIApi(
            self.engine, config, self.metrics, self.tracing, seed=config.seed + launch.seed + launch.index, kv=self.kv
        )
        self.api.register(router)
        self.admin = AdminApi(
            self.engine,
            self.ledger,
            name=launch.name,
            index=launch.index,
            admin_token=launch.admin_token,
            last_death=take_death(launch.ledger_path),
        )
        self.admin.register(router)
        if self.kv is not None:
            self.admin.register_extra(router, self.kv.routes())
        self.server = HttpServer(router, host=launch.host, port=launch.port, half_close=not config.abort_abandoned)
        self._engine_task: asyncio.Task | None = None
        log.info(
            "GPU KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx",
            f"{plan.kv_tokens(engine_config.block_size):,}",
            f"{engine_config.max_model_len:,}",
            plan.num_blocks / -(-engine_config.max_model_len // engine_config.block_size),
        )

    @property
    def weight_load_seconds(self) -> float:
        """The configured weight-load time, or the cost model's for ``auto``."""
        value = self.launch.config.engine.weight_load_time
        return self.cost_model.weight_load_seconds() if value == "auto" else float(value)

    async def start(self) -> None:
        """Connect ranks, load weights (sleep), start the engine, bind the port, write the ready file."""
        self.engine.set_interconnect(await connect_interconnect(self.launch))
        log.info("loading weights: %.2f s (modelled)", self.weight_load_seconds)
        await asyncio.sleep(self.weight_load_seconds)
        self._engine_task = asyncio.create_task(self.engine.run(), name="engine-core")
        if self.kv is not None:
            await self.kv.start()
        self.tracing.start()
        await self.server.start()
        log.info("replica %s listening on %s", self.launch.name, self.server.url)
        if self.launch.ready_file is not None:
            _write_ready(
                self.launch.ready_file,
                {
                    "pid": os.getpid(),
                    "port": self.server.port,
                    "url": self.server.url,
                    "name": self.launch.name,
                    "index": self.launch.index,
                },
            )

    async def run_until_stopped(self, stop: asyncio.Event) -> int:
        """Serve until ``stop`` is set (exit 0) or the engine dies (exit 1); then shut down cleanly."""
        dead = asyncio.create_task(self.engine.dead_event.wait())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({dead, stopped}, return_when=asyncio.FIRST_COMPLETED)
        dead.cancel()
        stopped.cancel()
        if self.engine.dead is not None:
            log.error("engine dead (%s); exiting", self.engine.dead.cause)
            write_death(self.launch.ledger_path, self.engine.dead.cause)  # the next life reports why this one ended
            await asyncio.sleep(DEATH_LINGER_S)  # /health answers 503 meanwhile, as vLLM's does before it exits
            await self.close(grace_s=DEATH_FLUSH_S)
            return EXIT_ENGINE_DEAD
        await self.close(grace_s=SHUTDOWN_GRACE_S)
        return EXIT_OK

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop listening, let requests finish for ``grace_s``, abort the rest, flush spans and the ledger."""
        await self.server.stop_listening()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self.server.in_flight and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for request in list(self.scheduler.requests.values()):
            self.engine.abort_request(request)
            if isinstance(request.context, ApiContext):  # the API layer's (the engine's context is opaque)
                request.context.resolve()
        await self.server.close(grace_s=0.2)
        if self._engine_task is not None:
            self._engine_task.cancel()
            await asyncio.gather(self._engine_task, return_exceptions=True)
        await self.engine.interconnect.close()
        if self.kv is not None:
            await self.kv.close()
        await self.tracing.aclose()
        self.ledger.close()


async def connect_interconnect(launch: ReplicaLaunch) -> Interconnect:
    """``drill.stack.interconnect.tcp.connect(launch)`` (topology side), awaited if it is a coroutine."""
    result = interconnect.connect(launch)
    return await result if inspect.isawaitable(result) else result


def _worker_resource(launch: ReplicaLaunch) -> dict[str, str | int]:
    """A P/D worker's role and its own TP/PP (its role's engine) on every span it exports; none when aggregated."""
    if launch.role is None:
        return {}
    engine = launch.config.engine
    return {
        "drill.role": launch.role,
        "drill.tensor_parallel_size": engine.tensor_parallel_size,
        "drill.pipeline_parallel_size": engine.pipeline_parallel_size,
    }


def _cache_info(engine: EngineConfig, num_blocks: int) -> dict[str, str]:
    """Labels of ``vllm:cache_config_info`` (vLLM's CacheConfig fields as strings)."""
    return {
        "block_size": str(engine.block_size),
        "cache_dtype": "auto",
        "gpu_memory_utilization": str(engine.gpu_memory_utilization),
        "enable_prefix_caching": str(engine.enable_prefix_caching),
        "num_gpu_blocks": str(num_blocks),
    }


def death_file(ledger_path: Path) -> Path:
    """Where a replica records why its engine died, beside its side-effect ledger (it survives the restart)."""
    return ledger_path.with_name(ledger_path.stem + ".death.json")


def write_death(ledger_path: Path, reason: str) -> None:
    """Record this process's death (pid, reason, UNIX time) for the admin API of the restarted replica."""
    try:
        death_file(ledger_path).write_text(json.dumps({"pid": os.getpid(), "reason": reason, "at": time.time()}))
    except OSError as exc:
        log.warning("cannot record the engine's death in %s: %s", death_file(ledger_path), exc)


def take_death(ledger_path: Path) -> dict | None:
    """The previous process's death record, removed so that only the next life reports it; None if none."""
    path = death_file(ledger_path)
    try:
        record = json.loads(path.read_text())
        path.unlink()
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_ready(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def _setup_logging(launch: ReplicaLaunch) -> None:
    handler: logging.Handler
    if launch.log_path is not None:
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(launch.log_path)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {launch.name} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


async def _amain(launch: ReplicaLaunch) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    replica = Replica(launch)
    starting = asyncio.create_task(replica.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # SIGTERM while loading weights
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await replica.close()
        return EXIT_OK
    stopping.cancel()
    starting.result()
    gc.freeze()  # start-up objects never become garbage: keep them out of every later collection
    return await replica.run_until_stopped(stop)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m drill.stack.replica.api_server", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--launch", required=True, type=Path, help="ReplicaLaunch JSON file")
    args = parser.parse_args(argv)
    try:
        launch = read_replica_launch(args.launch)
    except InputError as exc:
        print(f"replica: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    _setup_logging(launch)
    try:
        return asyncio.run(_amain(launch))
    except (InputError, StackError) as exc:
        log.error("replica %s cannot start: %s", launch.name, exc)
        return EXIT_CONFIG
    except (DrillError, OSError) as exc:
        log.error("replica %s failed: %s", launch.name, exc)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
