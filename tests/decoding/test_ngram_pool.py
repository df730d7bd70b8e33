import numpy as np
import pytest

from paraspec.decoding.drafters.ngram_pool import NgramPool


def test_lru_evicts_least_recently_used_and_refresh_moves_to_newest():
    pool = NgramPool(ngram_len=2, guess_set_size=3)
    for ng in [(1, 1), (2, 2), (3, 3)]:
        pool.add(7, ng)
    assert pool.candidates(7) == [(3, 3), (2, 2), (1, 1)]  # newest first

    pool.add(7, (1, 1))  # refresh: (2, 2) is now the least recently used
    assert pool.candidates(7) == [(1, 1), (3, 3), (2, 2)]

    pool.add(7, (4, 4))
    assert pool.candidates(7) == [(4, 4), (1, 1), (3, 3)]
    assert len(pool) == 3 and pool.num_keys() == 1


def test_keys_are_independent():
    pool = NgramPool(ngram_len=1, guess_set_size=1)
    pool.add(1, (10,))
    pool.add(2, (20,))
    pool.add(1, (11,))
    assert pool.candidates(1) == [(11,)]
    assert pool.candidates(2) == [(20,)]
    assert pool.candidates(3) == [] and 3 not in pool


def test_add_sequence_inserts_every_ngram_oldest_first():
    pool = NgramPool(ngram_len=2, guess_set_size=4)
    pool.add_sequence(np.array([1, 2, 3, 1, 2, 4]))  # numpy ints are stored as ints
    assert pool.candidates(1) == [(2, 4), (2, 3)]
    assert pool.candidates(2) == [(3, 1)]
    assert pool.candidates(3) == [(1, 2)]
    assert 4 not in pool  # no N tokens start at the last two positions
    assert all(type(t) is int for ng in pool.candidates(1) for t in ng)


def test_add_sequence_shorter_than_n_adds_nothing():
    pool = NgramPool(ngram_len=3, guess_set_size=2)
    pool.add_sequence([1, 2, 3])
    assert len(pool) == 0
    pool.add_sequence([1, 2, 3, 4])
    assert pool.candidates(1) == [(2, 3, 4)]


def test_eos_never_enters_the_pool():
    pool = NgramPool(ngram_len=2, guess_set_size=4, eos_token_ids=[0])
    assert pool.add(5, (6, 0)) is False
    assert pool.add(0, (6, 7)) is False
    pool.add_sequence([5, 6, 0, 8, 9, 10])
    assert pool.candidates(5) == []  # (5; 6, 0) holds EOS
    assert pool.candidates(8) == [(9, 10)]  # after EOS the n-grams are clean again
    assert 0 not in pool and 6 not in pool


def test_wrong_length_and_bad_sizes_raise():
    pool = NgramPool(ngram_len=3, guess_set_size=2)
    with pytest.raises(ValueError, match="expected 3"):
        pool.add(1, (2, 3))
    with pytest.raises(ValueError):
        NgramPool(ngram_len=0, guess_set_size=2)
    with pytest.raises(ValueError):
        NgramPool(ngram_len=2, guess_set_size=0)
