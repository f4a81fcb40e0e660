"""SchedulerContext.num_cached_tokens: what admitting a request would hit, asked as a query."""

from __future__ import annotations

from kvframe_fcfs import FCFSPolicy

from kvframe.domain.request import Request

from .helpers import add, make_scheduler, run_to_completion


class Keeper(FCFSPolicy):
    """FCFS that keeps the scheduler's view."""

    def attach(self, context) -> None:
        self.context = context


def test_it_answers_the_cached_prefix_in_whole_blocks_and_counts_no_lookup() -> None:
    policy = Keeper()
    scheduler = make_scheduler(policy)  # 4-token blocks
    shared = list(range(100, 116))  # 4 blocks
    add(scheduler, "a", [*shared, 1, 2, 3], max_tokens=2)
    run_to_completion(scheduler)
    manager = scheduler.kv_cache_manager
    manager.make_prefix_cache_stats()  # reset the counters

    def probe(tokens: list[int]) -> int:
        request = add(scheduler, f"p{len(tokens)}", tokens)
        scheduler.waiting.remove_request(request)
        return policy.context.num_cached_tokens(request)

    assert probe([*shared, 9, 9]) == 16  # the 4 shared blocks
    assert probe(shared[:6]) == 4  # whole blocks only
    assert probe(shared) == 12  # the last token is always computed: 3 blocks
    assert probe([7, 7, 7, 7, 7]) == 0
    stats = manager.make_prefix_cache_stats()
    assert stats.queries == 0 and stats.hits == 0


def test_it_is_zero_when_the_request_skips_the_prefix_cache() -> None:
    policy = Keeper()
    scheduler = make_scheduler(policy)
    add(scheduler, "a", list(range(100, 116)), max_tokens=2)
    run_to_completion(scheduler)
    request: Request = add(scheduler, "b", [*range(100, 116), 5])
    request.skip_reading_prefix_cache = True
    assert policy.context.num_cached_tokens(request) == 0
