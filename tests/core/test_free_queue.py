"""FreeKVCacheBlockQueue: O(1) linked-list operations and their edge cases."""

from __future__ import annotations

import pytest

from kvframe.core.block_pool import FreeKVCacheBlockQueue, KVCacheBlock


def make(n: int) -> tuple[list[KVCacheBlock], FreeKVCacheBlockQueue]:
    blocks = [KVCacheBlock(i) for i in range(n)]
    return blocks, FreeKVCacheBlockQueue(blocks)


def ids(queue: FreeKVCacheBlockQueue) -> list[int]:
    return [block.block_id for block in queue.get_all_free_blocks()]


def assert_links_consistent(queue: FreeKVCacheBlockQueue) -> None:
    """Walk forward and backward; both directions must agree with the count."""
    forward = []
    block = queue.head.next_free_block
    while block is not queue.tail:
        assert block is not None
        assert block.next_free_block is not None
        assert block.next_free_block.prev_free_block is block
        forward.append(block)
        block = block.next_free_block
    backward = []
    block = queue.tail.prev_free_block
    while block is not queue.head:
        assert block is not None
        backward.append(block)
        block = block.prev_free_block
    assert forward == backward[::-1]
    assert len(forward) == queue.num_free_blocks == len(queue)
    assert queue.head.prev_free_block is None and queue.tail.next_free_block is None


def test_initial_order_is_block_id_order() -> None:
    _, queue = make(5)
    assert ids(queue) == [0, 1, 2, 3, 4]
    assert_links_consistent(queue)


def test_empty_queue_sentinels_point_at_each_other() -> None:
    _, queue = make(0)
    assert queue.num_free_blocks == 0
    assert queue.head.next_free_block is queue.tail
    assert queue.tail.prev_free_block is queue.head
    assert queue.get_all_free_blocks() == []
    assert_links_consistent(queue)


def test_popleft_on_empty_queue_raises() -> None:
    _, queue = make(0)
    with pytest.raises(ValueError):
        queue.popleft()


def test_popleft_returns_head_and_clears_links() -> None:
    blocks, queue = make(3)
    block = queue.popleft()
    assert block is blocks[0]
    assert block.prev_free_block is None and block.next_free_block is None
    assert ids(queue) == [1, 2]
    assert_links_consistent(queue)


def test_popleft_until_empty_then_append_again() -> None:
    blocks, queue = make(2)
    queue.popleft()
    queue.popleft()
    assert queue.num_free_blocks == 0
    assert queue.head.next_free_block is queue.tail
    queue.append(blocks[1])
    assert ids(queue) == [1]
    assert_links_consistent(queue)


def test_popleft_n_takes_blocks_in_order() -> None:
    blocks, queue = make(6)
    popped = queue.popleft_n(4)
    assert popped == blocks[:4]
    assert all(b.prev_free_block is None and b.next_free_block is None for b in popped)
    assert ids(queue) == [4, 5]
    assert_links_consistent(queue)


def test_popleft_n_zero_and_negative_return_nothing() -> None:
    _, queue = make(3)
    assert queue.popleft_n(0) == []
    assert queue.popleft_n(-1) == []
    assert ids(queue) == [0, 1, 2]


def test_popleft_n_exactly_all_leaves_empty_queue() -> None:
    blocks, queue = make(3)
    assert queue.popleft_n(3) == blocks
    assert queue.num_free_blocks == 0
    assert queue.head.next_free_block is queue.tail
    assert queue.tail.prev_free_block is queue.head
    assert_links_consistent(queue)


def test_popleft_n_more_than_free_raises_and_changes_nothing() -> None:
    _, queue = make(3)
    with pytest.raises(ValueError):
        queue.popleft_n(4)
    assert ids(queue) == [0, 1, 2]
    assert_links_consistent(queue)


@pytest.mark.parametrize("position", [0, 2, 4], ids=["head", "middle", "tail"])
def test_remove_from_head_middle_tail(position: int) -> None:
    blocks, queue = make(5)
    queue.remove(blocks[position])
    expected = [i for i in range(5) if i != position]
    assert ids(queue) == expected
    assert blocks[position].prev_free_block is None
    assert blocks[position].next_free_block is None
    assert_links_consistent(queue)


def test_remove_only_block_leaves_sentinels_spliced() -> None:
    blocks, queue = make(1)
    queue.remove(blocks[0])
    assert queue.head.next_free_block is queue.tail
    assert queue.tail.prev_free_block is queue.head
    assert_links_consistent(queue)


def test_remove_of_block_not_in_queue_raises() -> None:
    _, queue = make(2)
    block = queue.popleft()
    with pytest.raises(RuntimeError):
        queue.remove(block)
    with pytest.raises(RuntimeError):
        queue.remove(KVCacheBlock(99))


def test_append_goes_to_tail() -> None:
    _blocks, queue = make(3)
    first = queue.popleft()
    queue.append(first)
    assert ids(queue) == [1, 2, 0]
    assert_links_consistent(queue)


def test_append_n_keeps_given_order_and_empty_is_noop() -> None:
    _blocks, queue = make(5)
    popped = queue.popleft_n(3)
    queue.append_n([])
    assert ids(queue) == [3, 4]
    queue.append_n(popped[::-1])
    assert ids(queue) == [3, 4, 2, 1, 0]
    assert_links_consistent(queue)


def test_prepend_n_puts_blocks_at_the_head_in_given_order() -> None:
    _blocks, queue = make(5)
    popped = queue.popleft_n(3)
    queue.prepend_n([])
    assert ids(queue) == [3, 4]
    queue.prepend_n(popped[::-1])
    assert ids(queue) == [2, 1, 0, 3, 4]
    assert queue.popleft().block_id == 2
    assert_links_consistent(queue)


def test_prepend_n_into_empty_queue() -> None:
    _blocks, queue = make(3)
    popped = queue.popleft_n(3)
    queue.prepend_n(popped)
    assert ids(queue) == [0, 1, 2]
    assert_links_consistent(queue)


def test_append_n_into_empty_queue() -> None:
    _blocks, queue = make(3)
    popped = queue.popleft_n(3)
    queue.append_n(popped)
    assert ids(queue) == [0, 1, 2]
    assert_links_consistent(queue)


def test_mixed_operations_keep_links_consistent() -> None:
    blocks, queue = make(8)
    queue.remove(blocks[3])
    a = queue.popleft_n(2)
    queue.append(blocks[3])
    queue.remove(blocks[7])
    b = queue.popleft()
    queue.append_n([*a, blocks[7]])
    queue.append(b)
    assert ids(queue) == [4, 5, 6, 3, 0, 1, 7, 2]
    assert_links_consistent(queue)
