"""TouchWalkCache answers what filtering the whole list answers, whatever happened between."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvframe.contract.support import TouchWalkCache

LISTS = [
    [0, 1, 2, 3, 4, 5],
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [9, 3, 3, 7, 1],  # repeats: kept, in walk order
    [20, 21, 22],
    [5, 4, 3, 2, 1, 0],
]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    capacity=st.integers(0, 6),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("insert"), st.integers(0, 23)),
            st.tuples(st.just("remove"), st.integers(0, 23)),
            st.tuples(st.just("walk"), st.integers(0, len(LISTS) - 1), st.booleans()),
        ),
        max_size=80,
    ),
)
def test_walk_is_the_filter_of_the_reversed_list(capacity, ops):
    cache = TouchWalkCache(capacity, min_length=2)
    held: set[int] = set()
    for op in ops:
        if op[0] == "insert":
            if op[1] not in held:
                held.add(op[1])
                cache.inserted(op[1])
        elif op[0] == "remove":
            held.discard(op[1])
        else:
            # A copy or the same list object: the cache compares by value.
            keys = list(LISTS[op[1]]) if op[2] else LISTS[op[1]]
            assert cache.walk(keys, held.__contains__) == [k for k in reversed(keys) if k in held]
        assert len(cache.log) <= cache.max_log
        assert cache._num_cached <= max(cache.max_cached, max(map(len, LISTS)))
