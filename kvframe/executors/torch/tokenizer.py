"""A text tokenizer built from a GGUF file's own vocabulary and merges.

GGUF files made by llama.cpp carry their tokenizer as metadata: the tokens
(``tokenizer.ggml.tokens``), their types (3: control tokens such as
``<|im_start|>``), the BPE merges and a *pre-tokenizer* name
(``tokenizer.ggml.pre``) that says how text is split before BPE. We hand these
to Hugging Face's ``tokenizers`` library (the ``model`` extra) rather than
write a BPE: it is the implementation the model was trained with, and its
byte-level handling of whitespace and Unicode is exactly what hand-written
BPEs get wrong.

Only GPT-2-style byte-level BPE is built (``tokenizer.ggml.model = gpt2``),
with the splitting rules of the pre-tokenizer names below; anything else is
an error naming what the file says, rather than a tokenizer that silently
splits differently from the model's own.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["TextTokenizer", "tokenizer_from_gguf"]

_CONTROL = 3
"""``tokenizer.ggml.token_type`` of control (special) tokens."""

_DIGIT_SPLITTING = frozenset({"smollm", "starcoder", "refact", "codeshell"})
"""Pre-tokenizers that split every digit apart before the GPT-2 rules (llama.cpp's names)."""
_GPT2_ONLY = frozenset({"gpt2", "default"})


class TextTokenizer:
    """``encode`` text to token ids and ``decode`` them back, with the model's vocabulary."""

    def __init__(self, tokenizer: Any, special_tokens: Sequence[str], source: Path) -> None:
        self._tokenizer = tokenizer
        self.special_tokens = tuple(special_tokens)
        self.source = source

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens written in it (``<|im_end|>``) are single ids."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_id(self, token: str) -> int:
        """The id of one vocabulary entry (``<|im_start|>``); ``KeyError`` if absent."""
        value = self._tokenizer.token_to_id(token)
        if value is None:
            raise KeyError(token)
        return value


def _build(path: Path) -> TextTokenizer:
    try:
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        raise ValueError(
            "decoding text needs the tokenizers package, which is not installed: "
            "pip install 'kvframe[model]'"
        ) from None
    from kvframe.executors.torch.gguf_file import GGUFError, read_gguf

    model = read_gguf(path)
    kind = model.field("tokenizer.ggml.model")
    pre = model.field("tokenizer.ggml.pre", "default")
    if kind != "gpt2" or pre not in _DIGIT_SPLITTING | _GPT2_ONLY:
        raise GGUFError(
            f"{path}: tokenizer {kind!r} with pre-tokenizer {pre!r} is not supported "
            f"(supported: gpt2 with {', '.join(sorted(_DIGIT_SPLITTING | _GPT2_ONLY))})"
        )
    tokens: list[str] = model.field("tokenizer.ggml.tokens")
    types = model.field("tokenizer.ggml.token_type", [1] * len(tokens))
    merges = [tuple(m.split(" ", 1)) for m in model.field("tokenizer.ggml.merges", [])]
    tokenizer = Tokenizer(
        models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False)
    )
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGIT_SPLITTING:
        digits = pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated")
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    else:
        tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    special = [t for t, kind in zip(tokens, types, strict=True) if kind == _CONTROL]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    return TextTokenizer(tokenizer, special, path)


@functools.lru_cache(maxsize=4)
def _cached(path: str, size: int, mtime_ns: int) -> TextTokenizer:
    return _build(Path(path))


def tokenizer_from_gguf(path: str | Path) -> TextTokenizer:
    """The tokenizer of a GGUF file (cached per file for the process).

    :raises ValueError: the ``tokenizers`` package is missing, or the file's
        tokenizer kind is not supported (:class:`~.gguf_file.GGUFError`).
    """
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _cached(str(resolved), stat.st_size, stat.st_mtime_ns)
