"""The conformance suite catches each deliberately broken plugin, and says what broke.

Every test runs the suite the way an author would — ``pytest --kvframe-plugin
KIND:SPEC`` — in a pytester sandbox, against a class from ``broken_plugins.py``,
and checks the outcome and the words of the failure. ``-k`` narrows each run to
the check that should fire, which keeps hypothesis' shrinking (and this file)
fast.
"""

from __future__ import annotations

from pathlib import Path

import hypothesis  # noqa: F401 - loaded once here, not again by every sandboxed run
import importlib_metadata  # noqa: F401 - see below
import pytest

import kvframe.testing.test_conformance  # noqa: F401 - likewise (the suites and what they import)

# importlib_metadata (the plugin registry's entry-point scan) patches the standard
# library's finder out of sys.meta_path when first imported and adds its own; a
# sandboxed run that imported it first would have its finder removed on restore,
# leaving no way to find any distribution. Imported above, it is part of the baseline.

pytest_plugins = ["pytester"]

# The sandboxed runs: no assertion rewriting (the suite words its own messages, and
# re-parsing hypothesis for every run is most of a run's cost) and no cache directory.
SANDBOX = ("-p", "kvframe.testing", "--assert=plain", "-p", "no:cacheprovider")
QUICK = ("--kvframe-max-examples", "10")

HERE = Path(__file__).parent


@pytest.fixture
def suite(pytester: pytest.Pytester):
    """Run the suite in the sandbox: ``suite("eviction:broken_plugins:X", args=("-k", ...))``."""
    pytester.syspathinsert(HERE)

    def run(*selections: str, args: tuple[str, ...] = ()) -> pytest.RunResult:
        options = [item for s in selections for item in ("--kvframe-plugin", s)]
        return pytester.runpytest(*SANDBOX, *options, *args)

    return run


def failure_text(result: pytest.RunResult) -> str:
    return "\n".join(result.outlines)


# ==========================================================================
# Eviction policies
# ==========================================================================


def test_a_correct_lru_passes_the_whole_eviction_suite(suite) -> None:
    result = suite("eviction:broken_plugins:GoodLRU", args=("-rs", *QUICK))
    # Skipped: the optional idle-tracking and max_evictable checks (GoodLRU declines
    # tracking and inherits max_evictable) and the three of its vLLM 0.33.0 form (it has
    # none): the contract, the tier below DRAM, determinism.
    result.assert_outcomes(passed=18, skipped=5)
    result.stdout.fnmatch_lines(
        [
            "*eviction policy 'broken_plugins:GoodLRU' offers no vLLM 0.33.0 form "
            "(request_scoped_form is None): it runs under --vllm 0.19.1, and an offload "
            "tier under --vllm 0.33 refuses it*docs/plugin-authors.md*"
        ]
    )


# -- the vLLM 0.33.0 form (request_scoped_form) ---------------------------------


def test_a_correct_request_scoped_form_passes(suite) -> None:
    result = suite("eviction:broken_plugins:GoodScopedLRU", args=("-k", "request_scoped"))
    # The contract, the same form ordering a tier below DRAM, determinism.
    result.assert_outcomes(passed=3)


def test_a_form_that_rejects_the_options_is_skipped_saying_so(suite) -> None:
    result = suite(
        "eviction:broken_plugins:ScopedNoVariant:variant=b", args=("-rs", "-k", "request_scoped")
    )
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["*request_scoped_form rejects these options (no variant 'b'*"])


@pytest.mark.parametrize(
    ("plugin", "check", "words"),
    [
        (
            "ScopedEvictsPinned",
            "keeps_the_contract",
            "*a victim must be marked evictable (ref_cnt == 0) and not protected*",
        ),
        (
            "ScopedEvictsProtected",
            "keeps_the_contract",
            "*a victim must be marked evictable (ref_cnt == 0) and not protected*",
        ),
        ("ScopedRefuses", "keeps_the_contract", "*evictable, unprotected chunks*it must evict*"),
        ("ScopedKeepsAtClear", "keeps_the_contract", "*still answers a block after clear()*"),
        (
            "ScopedNondeterministic",
            "is_deterministic",
            "*not deterministic: the same calls on a fresh request-scoped form*",
        ),
    ],
)
def test_a_broken_request_scoped_form_is_caught(suite, plugin: str, check: str, words: str) -> None:
    result = suite(f"eviction:broken_plugins:{plugin}", args=("-k", f"request_scoped_form_{check}"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([words])


def test_evicting_a_protected_key_is_caught_with_the_calls_that_led_there(suite) -> None:
    result = suite("eviction:broken_plugins:EvictsProtected", args=("-k", "reference_model"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*ContractViolation: after *insert(0)*",
            "*then evict(1, protected={*}) returned [[]*[]], which includes *, which is protected",
            "*The contract: evict returns exactly 1 (key, block) pairs*",
        ]
    )


def test_returning_one_victim_too_few_is_caught(suite) -> None:
    result = suite("eviction:broken_plugins:ReturnsOneShort", args=("-k", "reference_model"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*then evict(2, protected=*) returned 1 victim(s) [[]*[]], not 2"])


def test_evicting_a_block_in_use_is_caught(suite) -> None:
    result = suite("eviction:broken_plugins:IgnoresRefCnt", args=("-k", "reference_model"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*then evict(1, protected=*) returned [[]0[]], which includes 0, "
            "whose block has ref_cnt * (*)"
        ]
    )


def test_a_refused_eviction_that_changed_state_is_caught(suite) -> None:
    result = suite("eviction:broken_plugins:NotAtomic", args=("-k", "refused"))
    result.assert_outcomes(failed=1)
    text = failure_text(result)
    assert "returned None" in text
    assert (
        "neither removed nor evicted since" in text
        or "must have changed nothing" in text
        or "on a twin policy given the same calls without the refused evict" in text
    )


def test_random_victims_are_caught_as_nondeterminism(suite) -> None:
    result = suite("eviction:broken_plugins:Nondeterministic", args=("-k", "same_victims"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*not deterministic: given the same calls, evict(*"])


def test_memory_that_grows_with_every_key_is_caught(suite) -> None:
    result = suite("eviction:broken_plugins:LeakyLFU", args=("-k", "bounded_by_capacity"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*its memory grows with the number of keys ever seen*"])


def test_options_through_kwargs_are_caught(suite) -> None:
    result = suite("eviction:broken_plugins:TakesKwargs", args=("-k", "options"))
    result.assert_outcomes(failed=2, passed=0)
    text = failure_text(result)
    assert "__init__ takes **kwargs, so a misspelt option is accepted silently" in text
    assert "accepted the unknown option 'kvframe_suite_no_such_option'" in text


def test_an_untyped_option_is_caught(suite) -> None:
    result = suite("eviction:broken_plugins:UntypedOption", args=("-k", "test_options_are"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*option 'decay' has type 'any'; use int, float, bool, str*"])


def test_a_heavy_import_is_caught_in_a_fresh_interpreter(suite, pytester) -> None:
    # A stand-in "torch" on the path: the check only looks at sys.modules.
    pytester.makepyfile(torch="LOADED = True\n")
    pytester.makepyfile(
        heavy_plugin="""
        import torch
        from broken_plugins import GoodLRU

        class HeavyLRU(GoodLRU):
            name = "heavy-lru"
        """
    )
    pytester.syspathinsert()
    result = suite("eviction:heavy_plugin:HeavyLRU", args=("-k", "test_import"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*importing 'heavy_plugin' imports torch*"])


# ==========================================================================
# Scheduling policies
# ==========================================================================


def test_a_correct_fifo_passes_the_scheduling_suite(suite) -> None:
    result = suite("scheduling:broken_plugins:GoodFIFO", args=QUICK)
    result.assert_outcomes(passed=13)


def test_a_policy_that_starves_long_prompts_at_its_defaults_is_caught(suite) -> None:
    # The generated workloads miss it: their prompts are all shorter than its cap.
    passed = suite("scheduling:broken_plugins:StarvesLongPrompts", args=(*QUICK, "-k", "generated"))
    passed.assert_outcomes(passed=1)
    result = suite("scheduling:broken_plugins:StarvesLongPrompts", args=("-k", "longer"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*not every request finished (starvation): *long0 (WAITING, 0/4097 tokens computed*"
            "may_admit refused long0 * times*",
            "*max_model_len=4225",
        ]
    )


def test_a_starved_request_is_caught(suite) -> None:
    result = suite("scheduling:broken_plugins:Starves", args=("-k", "crowded"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*not every request finished (starvation): p2 (WAITING, *nothing was scheduled for "
            "the last 50 steps while requests waited and nothing else was pending",
            "*scheduler: block_size=4, num_gpu_blocks=14*",
        ]
    )


def test_a_victim_that_is_not_running_is_caught(suite) -> None:
    result = suite("scheduling:broken_plugins:VictimNotRunning", args=("-k", "crowded"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*choose_victim returned request * (status WAITING), which is not one of the running*"]
    )


def test_retention_that_never_ends_is_caught(suite) -> None:
    result = suite("scheduling:broken_plugins:RetainsForever", args=("-k", "crowded"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*on_finish(*) returned inf: a retention deadline is a finite time*"]
    )


# ==========================================================================
# Tracers, reuse filters, offload specs
# ==========================================================================


def test_a_correct_tracer_passes_the_tracer_suite(suite) -> None:
    suite("tracer:broken_plugins:GoodTracer", args=QUICK).assert_outcomes(passed=11)


def test_a_tracer_that_modifies_records_is_caught(suite) -> None:
    result = suite("tracer:broken_plugins:MutatesRecords", args=("-k", "modify"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*on_step_decision modified what it was given: decision was *"])


def test_a_tracer_that_raises_is_caught(suite) -> None:
    result = suite("tracer:broken_plugins:RaisesOnClearedCache", args=("-k", "every_record"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*on_kv_events(*) raised ValueError: unexpected KV event*"])


def test_a_tracer_that_keeps_the_scheduler_is_caught(suite) -> None:
    result = suite("tracer:broken_plugins:KeepsTheScheduler", args=("-k", "engine"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the tracer still references engine state: *Scheduler*"])


def test_a_correct_reuse_filter_passes(suite) -> None:
    result = suite("reuse_filter:broken_plugins:GoodThreshold", args=("-rs", *QUICK))
    result.assert_outcomes(passed=10, skipped=1)  # it offers no vLLM 0.33.0 form
    result.stdout.fnmatch_lines(
        ["*'broken_plugins:GoodThreshold' offers no vLLM 0.33.0 form (in_manager_form*"]
    )


def test_a_correct_in_manager_form_passes(suite) -> None:
    result = suite(
        "reuse_filter:broken_plugins:InManagerThreshold:store_threshold=3",
        args=("-k", "in_manager"),
    )
    result.assert_outcomes(passed=1)


def test_an_in_manager_form_with_another_threshold_is_caught(suite) -> None:
    result = suite("reuse_filter:broken_plugins:InManagerOffByOne", args=("-k", "in_manager"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*its store_threshold is 3, but the filter's option is 2*"])


def test_admitting_below_the_threshold_is_caught(suite) -> None:
    result = suite("reuse_filter:broken_plugins:AdmitsEarly", args=("-k", "respect_the"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*then filter_store([[]h*[]]) admitted h*, which was looked up * time(s)",
            "*store_threshold=*: nothing is admitted before that many sightings.",
        ]
    )


def test_a_tracker_that_never_forgets_is_caught(suite) -> None:
    result = suite("reuse_filter:broken_plugins:NeverForgets", args=("-k", "memory"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*its memory is not bounded by max_tracker_size*"])


def test_a_correct_tier_passes_and_skips_the_round_trip_with_a_reason(suite) -> None:
    result = suite("offload:broken_plugins:GoodSlotSpec", args=("-rs", *QUICK))
    result.assert_outcomes(passed=12, skipped=1)
    result.stdout.fnmatch_lines(["*the spec provides no transfer handler: this test tier*"])


def test_a_tier_that_evicts_pinned_blocks_is_caught(suite) -> None:
    result = suite("offload:broken_plugins:EvictsPinnedSpec", args=("-k", "never_evicted"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*evicted *, which is pinned by 1 load(s)*"])


# ==========================================================================
# The pytest plugin itself
# ==========================================================================


def test_without_the_option_the_plugin_collects_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest(*SANDBOX)
    result.assert_outcomes(passed=1)
    assert "kvframe conformance" not in result.stdout.str()


def test_the_option_runs_only_the_suite_from_any_directory(suite, pytester) -> None:
    # A test file in the current directory is not collected: the suite runs alone.
    pytester.makepyfile(test_unrelated="def test_unrelated():\n    raise AssertionError\n")
    result = suite("eviction:broken_plugins:GoodLRU", args=("-k", "name"))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["kvframe conformance suite for: eviction:broken_plugins:GoodLRU*"])


def test_a_class_path_without_a_kind_finds_its_kind(suite) -> None:
    result = suite("broken_plugins:GoodTracer", args=("-k", "name", "-v"))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*TestTracer::test_has_a_valid_name[[]broken_plugins:GoodTracer[]] PASSED*"]
    )


def test_an_unknown_plugin_is_a_usage_error_listing_what_is_installed(suite) -> None:
    result = suite("eviction:no-such-policy")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown eviction policy 'no-such-policy'*"])


def test_an_unknown_kind_is_a_usage_error(suite) -> None:
    result = suite("evictoin:lru")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*expected KIND:SPEC with KIND one of scheduling, eviction*"])


def test_subclassing_a_suite_tests_a_class_and_skips_a_capability(pytester) -> None:
    pytester.syspathinsert(HERE)
    pytester.makepyfile(
        test_mine="""
        from broken_plugins import GoodLRU
        from kvframe.testing import EvictionPolicySuite

        class TestMyLRU(EvictionPolicySuite):
            plugin = GoodLRU
            gpu_prefix_cache = False
        """
    )
    result = pytester.runpytest(*SANDBOX, "-rs", *QUICK)
    # Skipped: idle tracking, max_evictable, the four GPU-tier checks (two of on_hit)
    # and the three of the vLLM 0.33.0 form (GoodLRU has none).
    result.assert_outcomes(passed=14, skipped=9)
    result.stdout.fnmatch_lines(["*capability gpu_prefix_cache is off for this policy*"])


def test_a_suite_subclass_without_a_plugin_explains_itself(pytester) -> None:
    pytester.makepyfile(
        test_empty="""
        from kvframe.testing import ReuseFilterSuite

        class TestNothing(ReuseFilterSuite):
            pass
        """
    )
    result = pytester.runpytest(*SANDBOX, "-k", "valid_name")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*TestNothing: no reuse filter to test: set `plugin = MyClass`*"])


def test_the_suite_is_collected_whatever_the_projects_collection_patterns(suite, pytester) -> None:
    pytester.makeini("[pytest]\npython_files = check_*.py\npython_classes = Check*\n")
    result = suite("eviction:broken_plugins:GoodLRU", args=("-k", "valid_name"))
    result.assert_outcomes(passed=1)


ROUND_TRIP = """
from broken_plugins import {spec}
from kvframe.testing import OffloadSpecSuite

class TestTier(OffloadSpecSuite):
    plugin = {spec}

    def kv_cache_access(self, handler, context):
        return handler.device
"""


def test_a_tier_whose_bytes_come_back_unchanged_passes_the_round_trip(pytester) -> None:
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_tier=ROUND_TRIP.format(spec="MemoryTierSpec"))
    result = pytester.runpytest(*SANDBOX, "-k", "round_trip")
    result.assert_outcomes(passed=1)


def test_a_tier_that_corrupts_bytes_fails_the_round_trip(pytester) -> None:
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_tier=ROUND_TRIP.format(spec="CorruptingTierSpec"))
    result = pytester.runpytest(*SANDBOX, "-k", "round_trip")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*GPU block 3 after the round trip differs from what was stored, first at byte 0 of 64"]
    )


@pytest.fixture(scope="module")
def torch_loaded() -> None:
    """torch, imported once before any sandboxed run (a sandbox that imported it first
    would remove it again, and torch cannot be imported twice in one process)."""
    pytest.importorskip("torch")


def test_the_round_trip_runs_from_the_command_line_with_the_suites_own_tensors(
    torch_loaded, suite
) -> None:
    result = suite("offload:broken_plugins:TensorTierSpec", args=("-k", "round_trip"))
    result.assert_outcomes(passed=1)


def test_a_handler_that_loads_back_one_layer_fails_the_command_line_round_trip(
    torch_loaded, suite
) -> None:
    result = suite("offload:broken_plugins:FirstLayerTierSpec", args=("-k", "round_trip"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*GPU block 3 after the round trip differs from what was stored, first at byte 32 of 64"]
    )
