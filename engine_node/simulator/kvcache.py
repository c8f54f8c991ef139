"""The simulated paged KV cache: fixed-size blocks handed out first-fit, a prefix cache, and fragmentation.

Fragmentation models the CUDA caching allocator rather than vLLM's block table: blocks freed below a
block that is still live leave a hole ("interior free blocks"), and the allocator keeps such split
segments cached until memory is released wholesale. So the simulator keeps the high-water mark of
interior free blocks (sampled after every engine step) since the last release, and reports

    fragmentation = floor + (1 - floor) * stranded_blocks / num_blocks

Sequences that start and finish in the same steps free their blocks together and leave no hole;
mixed lengths leave long-lived blocks above freed runs and the ratio climbs. Sleep and wake-up (which
empties the cache and calls the equivalent of torch.cuda.empty_cache) set stranded_blocks back to 0, and so does
the `release_cached_blocks` worker call (the agent's cleanup, the equivalent of torch.cuda.empty_cache) on a
drained engine; with sequences still running only the holes below them stay stranded.
"""

import heapq
from collections import OrderedDict
from collections.abc import Iterable


class BlockPool:
    """Fixed-size KV blocks over one linear address range; each owner holds a list of block indices."""

    def __init__(self, num_blocks: int, block_size: int, bytes_per_block: int, fragmentation_floor: float) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.bytes_per_block = bytes_per_block
        self.fragmentation_floor = fragmentation_floor
        # A min-heap of free indices gives first-fit: the lowest free address is reused first.
        self._free = list(range(num_blocks))
        self._live = bytearray(num_blocks)
        self._owned: dict[int, list[int]] = {}
        self._num_live = 0
        self._highest_live = -1
        self.stranded_blocks = 0

    @property
    def num_free(self) -> int:
        """Blocks not held by any sequence."""
        return self.num_blocks - self._num_live

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1: vllm:kv_cache_usage_perc."""
        return self._num_live / self.num_blocks

    def blocks_needed(self, owner: int, num_tokens: int) -> int:
        """How many more blocks `owner` needs to hold `num_tokens` tokens."""
        have = len(self._owned.get(owner, ()))
        return max(0, -(-num_tokens // self.block_size) - have)

    def grow(self, owner: int, num_tokens: int) -> bool:
        """Give `owner` enough blocks for `num_tokens` tokens; False (and nothing taken) if too few are free."""
        needed = self.blocks_needed(owner, num_tokens)
        if needed > self.num_free:
            return False
        blocks = self._owned.setdefault(owner, [])
        for _ in range(needed):
            index = heapq.heappop(self._free)
            self._live[index] = 1
            self._highest_live = max(self._highest_live, index)
            blocks.append(index)
        self._num_live += needed
        return True

    def release(self, owner: int) -> None:
        """Free all of `owner`'s blocks."""
        blocks = self._owned.pop(owner, [])
        for index in blocks:
            self._live[index] = 0
            heapq.heappush(self._free, index)
        self._num_live -= len(blocks)
        while self._highest_live >= 0 and not self._live[self._highest_live]:
            self._highest_live -= 1

    def note_holes(self) -> None:
        """Record the free blocks now lying below a live one; called at step boundaries, not per release,
        so sequences that finish in the same step leave no hole between them."""
        interior_free = self._highest_live + 1 - self._num_live
        self.stranded_blocks = max(self.stranded_blocks, interior_free)

    def release_memory(self) -> int:
        """Drop the allocator's cached segments (sleep, or empty_cache through release_cached_blocks): what stays
        stranded is only the free blocks lying below a live one now, none on an idle engine. Returns the blocks
        no longer stranded."""
        before = self.stranded_blocks
        self.stranded_blocks = max(0, self._highest_live + 1 - self._num_live)
        return max(0, before - self.stranded_blocks)

    @property
    def fragmentation(self) -> float:
        """sim:memory_fragmentation_ratio, between the profile's floor and 1."""
        floor = self.fragmentation_floor
        return floor + (1.0 - floor) * self.stranded_blocks / self.num_blocks

    def fragmentation_stats(self) -> dict:
        """The allocator view the agent reads through collective_rpc("fragmentation_stats")."""
        reserved = self.num_blocks * self.bytes_per_block
        fragmentation = self.fragmentation
        return {
            "reserved_bytes": reserved,
            "allocated_bytes": self._num_live * self.bytes_per_block,
            "inactive_split_bytes": round(fragmentation * reserved),
            "fragmentation": fragmentation,
            "simulated": True,
        }


class PrefixCache:
    """Hashes of full prompt blocks computed before, least recently used first, bounded by the block count."""

    def __init__(self, capacity: int, block_size: int) -> None:
        self._capacity = capacity
        self._block_size = block_size
        self._hashes: OrderedDict[int, None] = OrderedDict()

    def block_hashes(self, pieces: Iterable[str]) -> list[int]:
        """Chained hashes of each full block of `pieces`, so a block matches only with its whole prefix."""
        pieces = list(pieces)
        hashes: list[int] = []
        previous = 0
        for start in range(0, len(pieces) - self._block_size + 1, self._block_size):
            previous = hash((previous, tuple(pieces[start : start + self._block_size])))
            hashes.append(previous)
        return hashes

    def hit_blocks(self, hashes: list[int]) -> int:
        """How many leading blocks of a prompt are cached."""
        count = 0
        for block_hash in hashes:
            if block_hash not in self._hashes:
                break
            self._hashes.move_to_end(block_hash)
            count += 1
        return count

    def remember(self, hashes: list[int]) -> None:
        """Mark these block hashes as cached, evicting the least recently used beyond capacity."""
        for block_hash in hashes:
            self._hashes[block_hash] = None
            self._hashes.move_to_end(block_hash)
        while len(self._hashes) > self._capacity:
            self._hashes.popitem(last=False)

    def reset(self) -> None:
        """Forget every cached prefix (POST /reset_prefix_cache, sleep)."""
        self._hashes.clear()
