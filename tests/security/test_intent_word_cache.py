"""The classifier keeps the hashes of the Latin words it has seen, to skip a dozen crc32 calls per common word. A
client choosing the words must not grow that memory without bound, nor change what any message is scored as."""

import random
import string
import zlib

from engine_node.policy import intent
from engine_node.policy.intent import N_BUCKETS, buckets, grams


def hashed_grams(text: str) -> set[int]:
    return {zlib.crc32(gram.encode()) & (N_BUCKETS - 1) for gram in grams(text)}


def test_a_flood_of_new_words_keeps_the_cache_bounded_and_the_buckets_right():
    rng = random.Random(11)
    intent._WORD_HASHES.clear()
    for _ in range(3 * intent._WORD_CACHE_SIZE // 20):
        text = " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 24))) for _ in range(20))
        assert buckets(text) == hashed_grams(text)
        assert len(intent._WORD_HASHES) <= intent._WORD_CACHE_SIZE
    # After the flood, common words are cached again and still hash as they should.
    text = "where is my parcel please"
    assert buckets(text) == buckets(text) == hashed_grams(text)
    assert "parcel" in intent._WORD_HASHES


def test_long_words_are_hashed_but_never_kept():
    intent._WORD_HASHES.clear()
    word = "a" * (intent._WORD_CACHE_CHARS + 1) + "".join(random.Random(3).choices(string.ascii_lowercase, k=60))
    assert buckets(word) == hashed_grams(word)
    assert intent._WORD_HASHES == {}
    short = "z" * intent._WORD_CACHE_CHARS
    buckets(short)
    assert list(intent._WORD_HASHES) == [short]
