"""Config strings, option conversion and kvframe.toml: the text users type."""

from __future__ import annotations

import enum
import pathlib
from typing import TYPE_CHECKING, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvframe
from kvframe.config import (
    Bytes,
    ConfigError,
    OptionValue,
    PluginSpec,
    UserConfig,
    bind_options,
    config_from_mapping,
    context_params,
    convert_option,
    find_config_file,
    format_spec,
    get_kind,
    load_config,
    merge,
    parse_size,
    parse_spec,
    plugin_options,
)

if TYPE_CHECKING:
    from decimal import Decimal  # only for type checkers: unresolvable at run time


class Color(enum.Enum):
    RED = "r"
    BLUE = "b"


class OptionsPolicy(kvframe.EvictionPolicy):
    """An eviction policy whose only purpose is to have one option of every type."""

    name = "opts"

    def __init__(
        self,
        capacity: int,
        *,
        decay: float = 0.0,
        size: Bytes = 4096,
        count: int = 1,
        enabled: bool = True,
        label: str = "x",
        limit: int | None = None,
        variant: Literal["paper", "vllm"] = "paper",
        out: pathlib.Path = pathlib.Path("t.jsonl"),
        color: Color = Color.RED,
        exact: Decimal | None = None,
    ) -> None:
        super().__init__(capacity)

    def get(self, key):  # pragma: no cover - never called
        return None

    def insert(self, key, block):  # pragma: no cover
        pass

    def remove(self, key):  # pragma: no cover
        pass

    def touch(self, keys):  # pragma: no cover
        pass

    def evict(self, n, protected):  # pragma: no cover
        return None


class NeedsLevel(kvframe.ReuseFilter):
    name = "needs"

    def __init__(self, *, level: int) -> None:
        self.level = level

    def on_lookup(self, block_hashes):  # pragma: no cover
        pass

    def filter_store(self, block_hashes):  # pragma: no cover
        return list(block_hashes)


def spec(text: str, kind: str = "eviction") -> PluginSpec:
    return parse_spec(text, kind)


def caret_line(err: ConfigError) -> str:
    """The line under the quoted text, with the indentation that aligns it removed."""
    lines = str(err).splitlines()
    text_line = next(i for i, line in enumerate(lines) if line == f"    {err.text}")
    return lines[text_line + 1][4:]


# ==========================================================================
# Grammar
# ==========================================================================


def test_a_bare_name_selects_by_name_with_no_options() -> None:
    parsed = spec("lru")
    assert (parsed.kind, parsed.name, parsed.path, dict(parsed.options)) == (
        "eviction",
        "lru",
        None,
        {},
    )
    assert parsed.target == "lru"
    assert parsed.source == "lru"


def test_name_with_options_parses_values_to_their_natural_types() -> None:
    parsed = spec("cpu:capacity=8GiB,eviction=arc,ratio=0.5,pin=yes,n=3", "offload")
    assert parsed.name == "cpu"
    assert parsed.raw_options == {
        "capacity": 8 * 2**30,
        "eviction": "arc",
        "ratio": 0.5,
        "pin": True,
        "n": 3,
    }


def test_dotted_module_path_with_class_selects_by_path() -> None:
    parsed = spec("my_pkg.policies:LFU")
    assert (parsed.name, parsed.path, parsed.target) == (None, "my_pkg.policies:LFU", parsed.path)


def test_module_path_may_carry_options_after_a_second_colon() -> None:
    parsed = spec("my_pkg.policies:LFU:decay=0.5,label='a,b'")
    assert parsed.path == "my_pkg.policies:LFU"
    assert parsed.raw_options == {"decay": 0.5, "label": "a,b"}


def test_undotted_module_with_capitalised_class_is_a_path_not_options() -> None:
    assert spec("mymod:MyPolicy").path == "mymod:MyPolicy"
    assert spec("mymod:MyPolicy:x=1").raw_options == {"x": 1}
    assert spec("lru:Capacity=1").name == "lru"  # '=' makes it an option, whatever the case


def test_names_may_contain_digits_dashes_and_underscores() -> None:
    assert spec("2q").name == "2q"
    assert spec("s3-fifo_v2").name == "s3-fifo_v2"


def test_quoted_values_keep_commas_colons_and_escaped_quotes() -> None:
    parsed = spec("""jsonl:path="C:/runs/a,b.jsonl",note='it\\'s',empty=''""", "tracer")
    assert parsed.raw_options == {"path": "C:/runs/a,b.jsonl", "note": "it's", "empty": ""}


def test_quoted_numbers_stay_strings() -> None:
    assert spec("x:a='12',b=12").raw_options == {"a": "12", "b": 12}


def test_whitespace_around_separators_is_ignored() -> None:
    parsed = spec("  arc : variant = paper , ghost = true ")
    assert parsed.name == "arc"
    assert parsed.raw_options == {"variant": "paper", "ghost": True}


def test_value_spans_point_into_the_source() -> None:
    parsed = spec("arc:variant=paper,ghost='on'")
    text = parsed.source
    variant = parsed.options["variant"]
    assert variant.span is not None and variant.key_span is not None
    assert text[slice(*variant.span)] == "paper"
    assert text[slice(*variant.key_span)] == "variant"
    assert text[slice(*parsed.options["ghost"].span)] == "'on'"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "message", "caret"),
    [
        ("", "empty config string", "^"),
        ("arc:variant", "expected '=' after option name 'variant'", "           ^"),
        ("arc:", "expected an option name after ':'", "    ^"),
        ("lru:a=1,", "expected an option name after ','", "        ^"),
        ("lru:a=1,a=2", "option 'a' is given twice", "        ^"),
        ("lru:a='open", "unterminated string in the value of 'a'", "      ^^^^^"),
        ("lru:path=a:b", "unexpected ':' after the value of 'path'", "          ^"),
        ("lru:n=", "missing value for option 'n'", "      ^"),
        ("my.pkg", "a module path needs a class after ':'", "      ^"),
        ("my.2pkg:X", "'2pkg' is not a Python identifier", "   ^^^^"),
        ("my.pkg:", "expected a class name after 'my.pkg:'", "       ^"),
        ("=lru", "expected a plugin name, found '='", "^"),
        ("-lru", "'-lru' is not a valid plugin name", "^^^^"),
        ("lru x", "unexpected 'x' after 'lru'", "    ^"),
    ],
)
def test_grammar_errors_quote_the_text_and_point_at_the_problem(
    text: str, message: str, caret: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(text, "eviction", origin="--eviction")
    err = info.value
    assert message in err.message
    assert err.text == text
    assert str(err).startswith(f"--eviction: {err.message}")
    assert caret_line(err) == caret
    assert "expected NAME, NAME:key=value" in str(err)


def test_config_error_is_a_value_error_and_reports_a_column() -> None:
    with pytest.raises(ValueError) as info:
        parse_spec("arc:variant", "eviction")
    assert isinstance(info.value, ConfigError)
    assert info.value.column == 12


def test_unknown_kind_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown plugin kind 'evictoin'"):
        parse_spec("lru", "evictoin")


def test_kind_aliases_are_accepted() -> None:
    assert get_kind("scheduler").name == "scheduling"
    assert get_kind("reuse-filter").name == "reuse_filter"
    assert parse_spec("fcfs", "scheduler").kind == "scheduling"


# --------------------------------------------------------------------------
# Round trip: format_spec(parse_spec(s)) reads back as the same spec
# --------------------------------------------------------------------------

_names = st.from_regex(r"[a-z0-9_][a-z0-9_\-]{0,8}", fullmatch=True)
_paths = st.from_regex(
    r"[a-z_][a-z0-9_]{0,5}(\.[a-z_][a-z0-9_]{0,5}){1,2}:[A-Z][A-Za-z0-9_]{0,6}", fullmatch=True
)
_keys = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
_values = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12).map(lambda i: (OptionValue(str(i)), i)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: (OptionValue(repr(f)), f)),
    st.booleans().map(lambda b: (OptionValue("true" if b else "false"), b)),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12).map(
        lambda s: (OptionValue(s, quoted=True), s)
    ),
)


@given(
    target=st.one_of(_names.map(lambda n: ("name", n)), _paths.map(lambda p: ("path", p))),
    options=st.dictionaries(_keys, _values, max_size=5),
)
def test_formatted_specs_parse_back_to_the_same_target_and_values(target, options) -> None:
    field, value = target
    original = PluginSpec(
        kind="eviction", **{field: value}, options={k: v for k, (v, _) in options.items()}
    )
    text = format_spec(original)
    parsed = parse_spec(text, "eviction")
    assert (parsed.name, parsed.path) == (original.name, original.path)
    assert parsed.raw_options == {k: expected for k, (_, expected) in options.items()}
    assert format_spec(parsed) == text


# ==========================================================================
# Values and sizes
# ==========================================================================


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        ("8GiB", 8 * 2**30),
        ("512MiB", 512 * 2**20),
        ("4KiB", 4096),
        ("1.5GB", 1_500_000_000),
        ("1.5KiB", 1536),
        ("2 TiB", 2 * 2**40),
        ("8gib", 8 * 2**30),
        ("10B", 10),
        ("1_000", 1000),
        ("1.3B", None),
        ("-1GiB", None),
        ("GiB", None),
        ("8 GiBs", None),
        ("abc", None),
    ],
)
def test_parse_size(text: str, size: int | None) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "annotation", "expected"),
    [
        ("8GiB", Bytes, 8 * 2**30),
        ("-3", int, -3),
        ("0.5", float, 0.5),
        ("3", float, 3.0),
        ("1e-3", float, 0.001),
        ("yes", bool, True),
        ("Off", bool, False),
        ("1", bool, True),
        ("0", bool, False),
        ("0012", str, "0012"),
        ("none", int | None, None),
        ("7", int | None, 7),
        ("3", int | str, 3),
        ("three", int | str, "three"),
        ("vllm", Literal["paper", "vllm"], "vllm"),
        ("2", Literal[1, 2], 2),
        ("t.jsonl", pathlib.Path, pathlib.Path("t.jsonl")),
        ("BLUE", Color, Color.BLUE),
        ("b", Color, Color.BLUE),
    ],
)
def test_convert_option_to_the_annotated_type(text, annotation, expected) -> None:
    assert convert_option(text, annotation) == expected
    assert type(convert_option(text, annotation)) is type(expected)


def test_quoted_none_is_the_string_none() -> None:
    assert convert_option("none", str | None, quoted=True) == "none"


# ==========================================================================
# Options read off __init__
# ==========================================================================


def test_options_are_the_keyword_only_init_parameters_and_context_the_positional_ones() -> None:
    options = {o.name: o for o in plugin_options(OptionsPolicy)}
    assert list(options) == [
        "decay",
        "size",
        "count",
        "enabled",
        "label",
        "limit",
        "variant",
        "out",
        "color",
        "exact",
    ]
    assert context_params(OptionsPolicy) == ("capacity",)
    # `from __future__ import annotations` makes these strings; they are resolved.
    assert options["decay"].annotation is float
    assert options["size"].type_text == "bytes" and options["count"].type_text == "int"
    assert options["limit"].type_text == "int | None"
    assert options["variant"].type_text == "'paper' | 'vllm'"
    assert options["decay"].describe() == "decay: float = 0.0"
    # Decimal is imported only under TYPE_CHECKING: unresolvable, so values are guessed.
    assert options["exact"].type_text == "any"


def test_required_options_are_described_as_required() -> None:
    (level,) = plugin_options(NeedsLevel)
    assert level.required
    assert level.describe() == "level: int (required)"
    assert context_params(NeedsLevel) == ()


def test_bind_options_converts_given_values_and_leaves_defaults_to_init() -> None:
    bound = bind_options(OptionsPolicy, spec("opts:size=1MiB,enabled=off,limit=none,out=a.jsonl"))
    assert bound == {
        "size": 2**20,
        "enabled": False,
        "limit": None,
        "out": pathlib.Path("a.jsonl"),
    }


def test_unknown_option_names_it_suggests_the_closest_and_lists_accepted_with_defaults() -> None:
    with pytest.raises(ConfigError) as info:
        bind_options(OptionsPolicy, spec("opts:decy=0.5"))
    err = info.value
    assert err.message == "unknown option 'decy' for eviction policy 'opts'; did you mean 'decay'?"
    assert caret_line(err) == "     ^^^^"
    assert (
        "accepted options: decay: float = 0.0, size: bytes = 4096, count: int = 1, enabled: bool"
        in str(err)
    )
    assert "variant: 'paper' | 'vllm' = 'paper'" in str(err)


def test_option_for_a_class_without_options_says_so() -> None:
    class Plain(kvframe.Tracer):
        name = "plain"

    with pytest.raises(ConfigError) as info:
        bind_options(Plain, spec("plain:x=1", "tracer"))
    assert "unknown option 'x' for tracer 'plain'" in info.value.message
    assert "tracer 'plain' takes no options" in str(info.value)


def test_context_parameters_cannot_be_set_from_config() -> None:
    with pytest.raises(ConfigError) as info:
        bind_options(OptionsPolicy, spec("opts:capacity=10"))
    assert info.value.message == (
        "'capacity' cannot be set for eviction policy 'opts': kvframe supplies it itself"
    )


@pytest.mark.parametrize(
    ("text", "expected", "column"),
    [
        ("opts:decay=fast", "expected float, got 'fast' at column 12", 12),
        ("opts:size=12XB", "expected bytes (a number, or a size such as 512MiB or 8GiB)", 11),
        ("opts:count=1KiB", "expected int (a count, not a size: units such as KiB are for", 12),
        ("opts:enabled=maybe", "expected bool (true/false, yes/no, on/off, 1/0)", 14),
        ("opts:limit=lots", "expected int | None, got 'lots'", 12),
        ("opts:variant=papr", "expected one of 'paper', 'vllm', got 'papr'", 14),
        ("opts:color=GREEN", "expected one of 'RED', 'BLUE', got 'GREEN'", 12),
    ],
)
def test_bad_value_names_option_expected_type_text_and_position(text, expected, column) -> None:
    with pytest.raises(ConfigError) as info:
        bind_options(OptionsPolicy, spec(text))
    err = info.value
    option = text.split(":")[1].split("=")[0]
    assert err.message.startswith(f"bad value for option {option!r} of eviction policy 'opts'")
    assert expected in err.message
    assert err.column == column
    assert caret_line(err) == " " * (column - 1) + "^" * (len(text) - column + 1)


def test_bad_literal_value_suggests_the_closest_choice() -> None:
    with pytest.raises(ConfigError, match="did you mean 'paper'"):
        bind_options(OptionsPolicy, spec("opts:variant=papr"))


def test_missing_required_option_shows_how_to_write_it() -> None:
    with pytest.raises(ConfigError) as info:
        bind_options(NeedsLevel, spec("needs", "reuse_filter"))
    assert info.value.message == "missing required option 'level' for reuse filter 'needs'"
    assert "write it as needs:level=..." in str(info.value)


# ==========================================================================
# kvframe.toml
# ==========================================================================


def write_toml(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "kvframe.toml"
    path.write_text(text)
    return path


def test_toml_selects_plugins_and_passes_engine_settings_through(tmp_path) -> None:
    path = write_toml(
        tmp_path,
        """
        scheduler = "priority"
        eviction = "arc:variant=paper"
        tracer = ["jsonl:path=t.jsonl", "stats"]
        block_size = 16
        num_gpu_blocks = 2048

        [offload]
        name = "cpu"
        capacity = "8GiB"
        pinned = true
        ratio = 0.5
        """.replace("\n        ", "\n"),
    )
    config = load_config(path)
    assert config.scheduling is not None and config.scheduling.name == "priority"
    assert config.eviction is not None and config.eviction.raw_options == {"variant": "paper"}
    assert [t.target for t in config.tracer] == ["jsonl", "stats"]
    assert config.offload is not None
    assert config.offload.raw_options == {"capacity": "8GiB", "pinned": True, "ratio": 0.5}
    capacity = config.offload.options["capacity"]  # a TOML string still converts to a size
    assert convert_option(capacity.text, Bytes, quoted=capacity.quoted) == 8 * 2**30
    assert config.engine == {"block_size": 16, "num_gpu_blocks": 2048}
    assert config.origins["block_size"] == f"{path}, key 'block_size'"
    assert [s.kind for s in config.specs()] == [
        "scheduling",
        "eviction",
        "offload",
        "tracer",
        "tracer",
    ]


def test_toml_errors_name_the_file_and_the_key(tmp_path) -> None:
    path = write_toml(tmp_path, 'eviction = "arc:variant"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}, key 'eviction': expected '=' after option name")


def test_toml_tracer_list_errors_name_the_index(tmp_path) -> None:
    path = write_toml(tmp_path, 'tracer = ["jsonl", "bad:"]\n')
    with pytest.raises(ConfigError, match=r"key 'tracer'\[1\]: expected an option name"):
        load_config(path)


def test_toml_plugin_key_of_the_wrong_type_is_an_error(tmp_path) -> None:
    path = write_toml(tmp_path, "eviction = 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}, key 'eviction': expected a config string for the eviction policy, "
        "like 'NAME:key=value', got int 3"
    )


def test_invalid_toml_names_the_file_and_line(tmp_path) -> None:
    path = write_toml(tmp_path, "eviction = \n")
    with pytest.raises(ConfigError, match=rf"^{path}: invalid TOML: .*line 1"):
        load_config(path)


def test_missing_config_file_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file: No such file"):
        load_config(tmp_path / "nope.toml")


def test_selecting_a_kind_twice_through_aliases_is_an_error() -> None:
    with pytest.raises(ConfigError, match="scheduling policy is selected twice"):
        config_from_mapping({"scheduler": "fcfs", "scheduling": "priority"}, origin="f.toml")


def test_find_config_file(tmp_path) -> None:
    assert find_config_file(tmp_path) is None
    path = write_toml(tmp_path, "")
    assert find_config_file(tmp_path) == path


def test_merge_lets_cli_values_override_the_file_key_by_key() -> None:
    file_values = config_from_mapping(
        {
            "scheduler": "priority",
            "eviction": "arc",
            "tracer": ["jsonl"],
            "block_size": 16,
            "num_gpu_blocks": 100,
        },
        origin="kvframe.toml",
    )
    cli_values = config_from_mapping(
        {"scheduler": None, "eviction": "lru", "tracer": ["stats"], "block_size": 32},
        flags=True,
    )
    merged = merge(file_values, cli_values)
    assert merged.scheduling is not None and merged.scheduling.name == "priority"
    assert merged.eviction is not None and merged.eviction.name == "lru"
    assert merged.eviction.origin == "--eviction"
    assert [t.target for t in merged.tracer] == ["stats"]
    assert merged.engine == {"block_size": 32, "num_gpu_blocks": 100}
    assert merged.origins["block_size"] == "--block-size"
    assert merged.origins["num_gpu_blocks"] == "kvframe.toml, key 'num_gpu_blocks'"


def test_merge_with_nothing_on_the_command_line_keeps_the_file() -> None:
    file_values = config_from_mapping({"eviction": "arc", "block_size": 16}, origin="f")
    assert merge(file_values, UserConfig()) == file_values
