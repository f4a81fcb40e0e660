"""vLLM 0.33.0's connector rules, one by one, each parting from the 0.19.1 connector.

``JobOffloadingConnector`` (the 0.33 target's) and ``OffloadingConnector``
(0.19.1's) are driven through the same scripted steps -- requests with
hand-made block hashes, scheduler outputs built by hand, transfers landing
when the test says -- and each test shows one rule of
``docs/fidelity.md``'s tier table (rows 1-9) where the two connectors answer
differently. No vLLM needed; ``tests/differential/test_vllm_decisions.py`` checks the
whole loop against vLLM 0.33.0 itself.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kvframe_lru import LRUPolicy
from kvframe_lru.rank import RankLRUPolicy

from kvframe.core.scheduler_output import CachedRequestData, KVConnectorOutput
from kvframe.domain.request import RequestStatus
from kvframe.offload.jobs.connector import JobOffloadingConnector
from kvframe.offload.jobs.manager import RequestScopedOffloadManager
from kvframe.offload.slots.connector import OffloadingConnector
from kvframe.offload.slots.manager import SlotOffloadManager

BLOCK = 4


def request(rid: str, prompt: int, *, family: str | None = None, outputs: int = 0) -> Any:
    """A request of ``prompt + outputs`` tokens; requests of one ``family`` share blocks."""
    name = family or rid
    num_tokens = prompt + outputs
    return SimpleNamespace(
        request_id=rid,
        num_tokens=num_tokens,
        num_prompt_tokens=prompt,
        num_computed_tokens=0,
        status=RequestStatus.WAITING,
        block_hashes=[b"%s-%d" % (name.encode(), i) for i in range(num_tokens // BLOCK)],
    )


def block(block_id: int, cached: bool = False) -> Any:
    return SimpleNamespace(block_id=block_id, block_hash=b"h" if cached else None, is_null=False)


def output(
    scheduled: dict[str, int],
    *,
    new: dict[str, list[int]] | None = None,
    running: dict[str, list[int]] | None = None,
    preempted: tuple[str, ...] = (),
    finished: tuple[str, ...] = (),
) -> Any:
    """A scheduler output: ``new`` requests' block tables, ``running`` ones' new blocks."""
    running = running or {}
    return SimpleNamespace(
        scheduled_new_reqs=[
            SimpleNamespace(req_id=r, block_ids=ids) for r, ids in (new or {}).items()
        ],
        scheduled_cached_reqs=CachedRequestData(
            req_ids=list(running), new_block_ids=list(running.values())
        ),
        num_scheduled_tokens=dict(scheduled),
        preempted_req_ids=set(preempted),
        finished_req_ids=set(finished),
    )


def job_connector(num_chunks: int = 8, **kwargs: Any) -> JobOffloadingConnector:
    manager = RequestScopedOffloadManager(RankLRUPolicy(num_chunks), num_chunks)
    return JobOffloadingConnector(manager, gpu_block_size=BLOCK, **kwargs)


def old_connector(num_slots: int = 8) -> OffloadingConnector:
    manager = SlotOffloadManager(LRUPolicy(num_slots), num_slots, block_size=BLOCK)
    return OffloadingConnector(manager, gpu_block_size=BLOCK)


def admit(connector: Any, req: Any, block_ids: list[int], computed: int = 0) -> Any:
    """Look ``req`` up, allocate ``block_ids`` and schedule its whole prompt: the step's output."""
    hits, is_async = connector.get_num_new_matched_tokens(req, computed)
    assert hits == 0 and not is_async, (hits, is_async)
    connector.update_state_after_alloc(req, [block(b) for b in block_ids], 0)
    return output({req.request_id: req.num_tokens - computed}, new={req.request_id: block_ids})


def run_step(connector: Any, out: Any, req: Any | None = None) -> Any:
    """Build the step's metadata; then ``req`` has computed what the step scheduled."""
    meta = connector.build_connector_meta(out)
    if req is not None:
        req.num_computed_tokens += out.num_scheduled_tokens.get(req.request_id, 0)
    return meta


def test_jobs_share_one_counter_and_a_store_is_ready_when_its_job_lands() -> None:
    """Rows 1, 6: a running request's stored chunks are hit once *its store job* lands."""
    new = job_connector()
    a, b = request("a", 8, family="doc"), request("b", 8, family="doc")
    meta = run_step(new, admit(new, a, [1, 2]), a)
    assert list(meta.store_jobs) == [0] and meta.store_jobs[0].gpu_block_ids == [1, 2]
    new.update_connector_output(KVConnectorOutput(completed_jobs=[0]))
    # a is still running; b shares its prompt and hits all of it but the last token.
    hits, is_async = new.get_num_new_matched_tokens(b, 0)
    assert (hits, is_async) == (8, True)
    new.update_state_after_alloc(b, [block(3), block(4)], 8)
    meta = run_step(new, output({}))
    assert list(meta.load_jobs) == [1]  # the load is numbered after the store

    old = old_connector()
    a, b = request("a", 8, family="doc"), request("b", 8, family="doc")
    run_step(old, admit(old, a, [1, 2]), a)
    old.update_connector_output(KVConnectorOutput())  # 0.19.1 waits for finished_sending
    assert old.get_num_new_matched_tokens(b, 0) == (0, False)


def test_a_finished_request_frees_its_blocks_at_once() -> None:
    """Row 2: 0.33.0 answers False at the finish; 0.19.1 holds a stored request's blocks."""
    new, old = job_connector(), old_connector()
    for connector in (new, old):
        a = request("a", 8)
        run_step(connector, admit(connector, a, [1, 2]), a)
    assert new.request_finished(a, [1, 2]) is False
    assert old.request_finished(a, [1, 2]) is True


def test_last_stores_come_the_step_after_the_finish_and_are_fenced() -> None:
    """Rows 3, 4: a refused store is offered again after the finish, from the freed
    blocks, and flushed when one of those blocks is allocated again."""
    new = job_connector(num_chunks=3)
    c = request("c", 8)
    run_step(new, admit(new, c, [5, 6]), c)  # job 0: two of the tier's three chunks
    a = request("a", 8)
    meta = run_step(new, admit(new, a, [1, 2]), a)
    assert meta.store_jobs == {}  # one free chunk, nothing evictable: refused, cursor stays
    new.update_connector_output(KVConnectorOutput(completed_jobs=[0]))
    a.status = RequestStatus.FINISHED_LENGTH_CAPPED
    assert new.request_finished(a, [1, 2]) is False
    # Next step: block 2 goes to a new request, and a's last store reads it.
    d = request("d", 4)
    meta = run_step(new, _with(admit(new, d, [2]), finished={"a"}), d)
    assert [job.request_id for job in meta.store_jobs.values()] == ["d", "a"]
    job_id = max(meta.store_jobs)
    assert meta.store_jobs[job_id].gpu_block_ids == [1, 2]
    assert meta.jobs_to_flush == {job_id}
    # Once it landed the fence is gone and the finished request's state with it.
    new.update_connector_output(KVConnectorOutput(completed_jobs=[job_id]))
    assert "a" not in new._states and all(job_id not in f for f in new._fenced.values())

    old = old_connector(num_slots=2)
    c = request("c", 8)
    run_step(old, admit(old, c, [5, 6]), c)
    a = request("a", 8)
    run_step(old, admit(old, a, [1, 2]), a)
    old.request_finished(a, [1, 2])
    meta = old.build_connector_meta(_with(output({}), finished={"a"}))
    assert meta.reqs_to_store == {}  # 0.19.1 never stores for a finished request


def _with(out: Any, *, finished: set[str]) -> Any:
    out.finished_req_ids = set(finished)
    return out


def test_only_the_prompt_is_offloaded() -> None:
    """Row 5: with offload_prompt_only (0.33.0's default) no output block is offered."""
    stored: dict[str, list[list[int]]] = {}
    for name, connector in (
        ("new", job_connector()),
        ("all", job_connector(offload_prompt_only=False)),
        ("old", old_connector()),
    ):
        a = request("a", 4, outputs=4)
        a.num_tokens = 4
        run_step(connector, admit(connector, a, [1]), a)
        a.num_tokens = 8  # four tokens decoded: the second block is full
        a.num_computed_tokens = 7
        meta = connector.build_connector_meta(output({"a": 1}, running={"a": [2]}))
        jobs = meta.store_jobs.values() if name != "old" else meta.reqs_to_store.values()
        stored[name] = [list(job.gpu_block_ids) for job in jobs]
    assert stored == {"new": [], "all": [[2]], "old": [[2]]}


def test_a_chunk_being_written_defers_the_lookup() -> None:
    """Row 6: a hit run holding a chunk whose store has not landed answers None
    (ask again next step); 0.19.1 stopped the hit there and admitted at once."""
    new, old = job_connector(), old_connector()
    answers = []
    for connector in (new, old):
        a, b = request("a", 8, family="doc"), request("b", 9, family="doc")
        run_step(connector, admit(connector, a, [1, 2]), a)
        answers.append(connector.get_num_new_matched_tokens(b, 0))
    assert answers == [(None, False), (0, False)]


def test_no_lookup_while_a_job_is_in_flight() -> None:
    """Row 8: a preempted request whose store has not landed is not looked up."""
    new = job_connector()
    a = request("a", 8)
    run_step(new, admit(new, a, [1, 2]), a)
    meta = run_step(new, output({}, preempted=("a",)))
    assert meta.jobs_to_flush == {0}
    a.num_computed_tokens = 0
    assert new.get_num_new_matched_tokens(a, 0) == (None, False)
    new.update_connector_output(KVConnectorOutput(completed_jobs=[0]))
    assert new.get_num_new_matched_tokens(a, 0) == (8, True)


class RecordingManager(RequestScopedOffloadManager):
    """Records every store offer."""

    offers: list[list[bytes]]

    def prepare_store(self, keys: Any, access: Any) -> Any:
        keys = list(keys)
        self.offers.append(keys)
        return super().prepare_store(keys, access)


def test_the_store_cursor_restarts_at_every_lookup() -> None:
    """Row 9: a request re-admitted with a GPU hit offers its chunks again (they count as
    its reuses); 0.19.1's cursor survived the preemption and offered nothing twice."""
    manager = RecordingManager(RankLRUPolicy(8), 8)
    manager.offers = []
    new = JobOffloadingConnector(manager, gpu_block_size=BLOCK)
    a = request("a", 8)
    run_step(new, admit(new, a, [1, 2]), a)
    new.update_connector_output(KVConnectorOutput(completed_jobs=[0]))
    run_step(new, output({}, preempted=("a",)))
    a.num_computed_tokens = 0
    a.num_tokens = a.num_prompt_tokens = 12
    a.block_hashes.append(b"a-2")
    # Re-admitted: the GPU cache still holds the first 8 tokens.
    assert new.get_num_new_matched_tokens(a, 8) == (0, False)
    new.update_state_after_alloc(a, [block(1, True), block(2, True), block(3)], 0)
    a.num_computed_tokens = 8
    run_step(new, output({"a": 4}, new={"a": [1, 2, 3]}), a)
    assert manager.offers == [[b"a-0", b"a-1"], [b"a-0", b"a-1", b"a-2"]]

    old_manager = SlotOffloadManager(LRUPolicy(8), 8, block_size=BLOCK)
    offers: list[list[bytes]] = []
    prepare = old_manager.prepare_store
    old_manager.prepare_store = lambda hashes: offers.append(list(hashes)) or prepare(hashes)
    old = OffloadingConnector(old_manager, gpu_block_size=BLOCK)
    a = request("a", 8)
    run_step(old, admit(old, a, [1, 2]), a)
    run_step(old, output({}, preempted=("a",)))
    a.num_tokens = a.num_prompt_tokens = 12
    a.block_hashes.append(b"a-2")
    a.num_computed_tokens = 0
    old.get_num_new_matched_tokens(a, 8)
    old.update_state_after_alloc(a, [block(1, True), block(2, True), block(3)], 0)
    a.num_computed_tokens = 8
    old.build_connector_meta(output({"a": 4}, running={"a": [1, 2, 3]}))
    assert offers == [[b"a-0", b"a-1"], [b"a-2"]]


# -- invariants under random schedules ------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from("aflp"), st.integers(0, 5), st.integers(1, 4)),
        min_size=1,
        max_size=40,
    )
)
def test_jobs_and_fences_stay_consistent(ops: list[tuple[str, int, int]]) -> None:
    """Random admissions, finishes, landings and preemptions: every job in flight
    belongs to a live request state, job ids are unique and increasing, a fence
    names only jobs in flight, and a finished request's state goes once its jobs
    have landed."""
    new = job_connector(num_chunks=6)
    live: dict[str, Any] = {}
    next_block = 1
    seen_jobs: list[int] = []
    for number, (op, pick, size) in enumerate(ops):
        finished: set[str] = set()
        preempted: tuple[str, ...] = ()
        completed: list[int] = []
        scheduled: dict[str, int] = {}
        new_reqs: dict[str, list[int]] = {}
        if op == "a" or not live:
            rid = f"r{number}"
            req = request(rid, BLOCK * size, family=f"f{pick % 3}")
            hits, _ = new.get_num_new_matched_tokens(req, 0)
            if hits is None or hits:
                continue
            ids = list(range(next_block, next_block + size))
            next_block += size
            new.update_state_after_alloc(req, [block(b) for b in ids], 0)
            scheduled[rid] = req.num_tokens
            new_reqs[rid] = ids
            live[rid] = req
        elif op == "f":
            rid = sorted(live)[pick % len(live)]
            req = live.pop(rid)
            req.status = RequestStatus.FINISHED_STOPPED
            new.request_finished(req, [])
            finished.add(rid)
        elif op == "l":
            completed = sorted(new._jobs)[: pick + 1]
        else:
            rid = sorted(live)[pick % len(live)]
            preempted = (live.pop(rid).request_id,)
        if completed:
            new.update_connector_output(KVConnectorOutput(completed_jobs=completed))
        out = output(scheduled, new=new_reqs, preempted=preempted, finished=finished)
        meta = new.build_connector_meta(out)
        for rid, n in scheduled.items():
            live[rid].num_computed_tokens += n
        jobs = [*meta.load_jobs, *meta.store_jobs]
        assert all(j not in seen_jobs for j in jobs)
        assert jobs == sorted(jobs) and (not seen_jobs or not jobs or jobs[0] > seen_jobs[-1])
        seen_jobs += jobs
        for job_id, job in new._jobs.items():
            assert job.request_id in new._states
            assert job_id in new._states[job.request_id].jobs
        assert all(fence <= new._jobs.keys() for fence in new._fenced.values())
        assert meta.jobs_to_flush <= new._jobs.keys()
        for rid, state in new._states.items():
            assert not (state.finished_signaled and not state.jobs), rid
