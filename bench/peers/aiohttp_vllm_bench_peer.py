"""Peer for bench/load_driver.py: the client pattern of ``vllm bench serve``, on aiohttp.

A reimplementation (vLLM is not installed here) of its streaming request function
(``vllm/benchmarks/lib/endpoint_request_func.py``: ``async for chunk_bytes in response.content``,
one timestamp per ``data:`` line) driven open loop on an absolute schedule of constant
arrivals, as ``--request-rate R --burstiness inf`` does (docs/serving-facts.md §5.1).

    python bench/peers/aiohttp_vllm_bench_peer.py URL RATE SECONDS CHUNKS OUT.json
"""

import asyncio
import json
import sys
import time
import uuid

import aiohttp


async def one(session, url, chunks, samples):
    rid = uuid.uuid4().hex
    body = {"model": "bench-model", "prompt": "hello " * 20, "max_tokens": chunks, "stream": True, "ignore_eos": True}
    times = []
    async with session.post(url + "/v1/completions", json=body, headers={"X-Request-Id": rid}) as response:
        async for chunk_bytes in response.content:
            chunk_bytes = chunk_bytes.strip()
            if chunk_bytes.startswith(b"data: {"):
                times.append(time.time())
    samples.append([rid, times])


async def main(url, rate, seconds, chunks, out):
    samples, tasks = [], []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        start = time.perf_counter()
        n = int(rate * seconds)
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, url, chunks, samples)))
        await asyncio.gather(*tasks, return_exceptions=True)
    with open(out, "w") as fh:
        json.dump({"samples": samples}, fh)


if __name__ == "__main__":
    url, rate, seconds, chunks, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    asyncio.run(main(url, rate, seconds, chunks, out))
