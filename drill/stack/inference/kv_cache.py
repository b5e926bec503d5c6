"""The paged KV cache of the virtual GPU: 16-token blocks, reference counts, optional prefix caching.

Used by the scheduler only (vLLM's ``KVCacheManager``): :meth:`get_computed_blocks` looks up a
waiting request's cached prefix, :meth:`allocate_slots` reserves blocks for a step's new tokens
(``False`` when there are not enough free blocks: the scheduler preempts), :meth:`free` returns a
finished or preempted request's blocks. Freed blocks keep their prefix hash and are evicted
least-recently-freed first, tail blocks of a request before its head (vLLM frees in reverse).

:meth:`set_capacity` models another process taking GPU memory (``/admin/gpu/memory-hog``): free
blocks are taken out of the pool at once; blocks still held become a *deficit* that the scheduler
pays back by preempting (:attr:`deficit`), and each block freed goes to the hog until it is paid.
"""

from __future__ import annotations

from collections import OrderedDict

from drill.stack.inference.request import Request

__all__ = ["KVCacheManager"]


class KVCacheManager:
    """Block accounting for ``num_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, num_blocks: int, block_size: int = 16, enable_prefix_caching: bool = False) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._free: OrderedDict[int, None] = OrderedDict((block, None) for block in range(num_blocks))
        self._ref = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # prefix hash -> block id
        self._owned: dict[str, list[int]] = {}
        self._lost: list[int] = []  # blocks taken by another process (memory hog)
        self.deficit = 0  # blocks the hog is still owed, held by running requests
        self.prefix_queries = 0  # tokens looked up (vLLM counts in tokens)
        self.prefix_hits = 0

    # capacity -------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Blocks the engine may use now: all blocks minus those taken or owed to another process."""
        return self.num_blocks - len(self._lost) - self.deficit

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be allocated now (cached-but-unreferenced blocks count as free)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free) - len(self._lost)

    @property
    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: used / usable blocks, 0..1 (1 when nothing is usable)."""
        usable = self.num_blocks - len(self._lost)
        return 1.0 if usable <= 0 else min(1.0, self.num_used_blocks / usable)

    def set_capacity(self, blocks: int) -> None:
        """Shrink or grow the usable pool to ``blocks`` (0..num_blocks), see the module docstring."""
        blocks = max(0, min(self.num_blocks, blocks))
        taken = self.num_blocks - blocks
        while len(self._lost) + self.deficit > taken and (self.deficit or self._lost):
            if self.deficit:
                self.deficit -= 1
            else:
                self._release_block(self._lost.pop())
        while len(self._lost) + self.deficit < taken:
            if self._free:
                block, _ = self._free.popitem(last=False)
                self._forget_hash(block)
                self._lost.append(block)
            else:
                self.deficit += 1

    # lookups and allocation -----------------------------------------------------------------
    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """The cached blocks of the request's prompt prefix and how many tokens they hold.

        At least one token is always left to compute (its logits are needed), as in vLLM.
        """
        if not self.enable_prefix_caching:
            return [], 0
        blocks: list[int] = []
        limit = (request.num_tokens - 1) // self.block_size
        for block_hash in request.get_block_hashes(self.block_size)[:limit]:
            block = self._cached.get(block_hash)
            if block is None:
                break
            blocks.append(block)
        return blocks, len(blocks) * self.block_size

    def allocate_slots(self, request: Request, num_new_tokens: int, computed_blocks: list[int] | None = None) -> bool:
        """Reserve blocks so ``request`` can hold ``num_computed_tokens + num_new_tokens`` tokens.

        ``computed_blocks`` (from :meth:`get_computed_blocks`) are shared, not copied. Returns
        False, changing nothing, when too few blocks are free.
        """
        owned = self._owned.get(request.request_id)
        have = len(owned) if owned else 0
        total = request.num_computed_tokens + num_new_tokens
        if owned and not computed_blocks and total <= have * self.block_size:
            return True  # fast path: a decode step inside the last block
        cached = computed_blocks or ()
        need = -(-total // self.block_size) - have - len(cached)
        revived = sum(1 for block in cached if self._ref[block] == 0)
        if need > 0 and need + revived > len(self._free):
            return False
        if owned is None:
            owned = self._owned[request.request_id] = []
        for block in cached:
            if self._ref[block] == 0:
                del self._free[block]
            self._ref[block] += 1
            owned.append(block)
        for _ in range(need):
            block, _ = self._free.popitem(last=False)
            self._forget_hash(block)
            self._ref[block] = 1
            owned.append(block)
        if self.enable_prefix_caching and request.num_computed_tokens < request.num_prompt_tokens:
            self._cache_full_blocks(request, owned, request.num_computed_tokens // self.block_size, total)
        return True

    def record_prefix_lookup(self, num_query_tokens: int, num_hit_tokens: int) -> None:
        """Count one admitted request's lookup (``vllm:prefix_cache_queries/hits``, in tokens)."""
        if not self.enable_prefix_caching:
            return
        self.prefix_queries += num_query_tokens
        self.prefix_hits += num_hit_tokens

    def free(self, request: Request) -> None:
        """Release the request's blocks (tail first); blocks nobody references become free."""
        owned = self._owned.pop(request.request_id, None)
        if not owned:
            return
        for block in reversed(owned):
            self._ref[block] -= 1
            if self._ref[block] == 0:
                if self.deficit:
                    self.deficit -= 1
                    self._forget_hash(block)
                    self._lost.append(block)
                else:
                    self._free[block] = None

    def num_blocks_of(self, request: Request) -> int:
        """Blocks the request holds now."""
        return len(self._owned.get(request.request_id, ()))

    # internals ------------------------------------------------------------------------------
    def _cache_full_blocks(self, request: Request, owned: list[int], first: int, num_tokens: int) -> None:
        hashes = request.get_block_hashes(self.block_size)
        for index in range(first, min(num_tokens // self.block_size, len(hashes), len(owned))):
            block = owned[index]
            if self._hash_of[block] is None and hashes[index] not in self._cached:
                self._hash_of[block] = hashes[index]
                self._cached[hashes[index]] = block

    def _forget_hash(self, block: int) -> None:
        block_hash = self._hash_of[block]
        if block_hash is not None:
            self._hash_of[block] = None
            if self._cached.get(block_hash) == block:
                del self._cached[block_hash]

    def _release_block(self, block: int) -> None:
        self._free[block] = None
