"""Real text prompts for the generated workloads (``kvframe gen chat|agentic --text MODEL``).

The generators describe prompts as token *streams*: a shared prefix named by
an id, then a stream unique to a key, each cut to a length
(:class:`~kvframe.workloads.spec.SyntheticPrompt`). Their useful properties --
which requests share which prefix, and that an agent's turn ``k`` prompt is a
prefix of turn ``k + 1``'s -- come from the streams being deterministic and
*prefix-stable* (the first ``n`` tokens of a stream never depend on how many
are asked for). :func:`with_text_prompts` keeps exactly that structure and
only changes what a stream holds: instead of random ids, the tokens of English
sentences, drawn from a small built-in bank by a generator seeded with the
stream's name and tokenized with a real model's tokenizer. So a text workload
has the same lengths, arrivals, sharing and turn structure as the plain one
made with the same settings, and a real model (``--executor torch:model=...``)
reads text rather than noise.

Each sentence is encoded on its own and the ids are concatenated; every
sentence but the first starts with a space, where a byte-level BPE splits
anyway, so this equals encoding the joined text.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import attrs

from kvframe.workloads.spec import RequestSpec, SyntheticPrompt, TokenPrompt

__all__ = ["SENTENCES", "TextStreams", "with_text_prompts"]

SENTENCES: tuple[str, ...] = (
    "You are a careful assistant who answers questions about science and history.",
    "Explain each step before you give the final answer.",
    "When you are not sure, say so and describe what you would check.",
    "Keep the answer short unless the user asks for detail.",
    "The library opens at nine in the morning and closes at six in the evening.",
    "A river carries sand from the mountains to the sea.",
    "The recipe needs two cups of flour, one egg and a pinch of salt.",
    "Our team meets every Monday to plan the work of the week.",
    "The train to the city leaves from the second platform.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "The old bridge was built of stone more than two hundred years ago.",
    "Please summarise the report in three sentences.",
    "What are the main causes of the seasons on Earth?",
    "How does a computer store a number in memory?",
    "Why do some metals rust while others do not?",
    "Write a short poem about the first snow of winter.",
    "Describe how a bicycle gear changes the effort needed to climb a hill.",
    "The museum has a large collection of maps from the age of exploration.",
    "Bees visit thousands of flowers to make a single jar of honey.",
    "The committee will publish its decision at the end of the month.",
    "A good password is long, random and used for one account only.",
    "The cat slept in the sun on the kitchen windowsill.",
    "Rain is expected in the north, with clear skies in the south.",
    "The first step is to read the whole question carefully.",
    "She planted tomatoes, beans and sunflowers along the garden wall.",
    "How many minutes are there in a week?",
    "Translate the following sentence into simple English.",
    "The engineer measured the voltage across each resistor.",
    "Clouds form when warm, moist air rises and cools.",
    "The map shows three paths through the forest to the lake.",
    "List the planets of the solar system in order from the sun.",
    "The shop sells fresh bread every morning before eight.",
    "What is the difference between weather and climate?",
    "The children built a small boat from wood and string.",
    "A triangle has three sides and its angles add up to one hundred and eighty degrees.",
    "The tool returned a list of files, and the agent opened the largest one.",
)
"""Plain sentences written for kvframe: general topics, questions and instructions."""


class TextStreams:
    """Prefix-stable token streams of English text, one per name (cached)."""

    def __init__(self, encode: Callable[[str], Sequence[int]], *, namespace: str = "") -> None:
        self._encode = encode
        self._namespace = namespace
        self._streams: dict[str, tuple[list[int], random.Random]] = {}

    def tokens(self, name: str, n: int) -> list[int]:
        """The first ``n`` tokens of the stream ``name``."""
        if n <= 0:
            return []
        entry = self._streams.get(name)
        if entry is None:
            entry = self._streams[name] = (
                [],
                random.Random(f"kvframe.text:{self._namespace}{name}"),
            )
        ids, rng = entry
        while len(ids) < n:
            sentence = SENTENCES[int(rng.random() * len(SENTENCES))]
            ids.extend(self._encode(sentence if not ids else " " + sentence))
        return ids[:n]


def with_text_prompts(
    specs: Sequence[RequestSpec], encode: Callable[[str], Sequence[int]]
) -> list[RequestSpec]:
    """``specs`` with every :class:`SyntheticPrompt` made of text tokens, same lengths and sharing.

    Other prompt kinds (explicit tokens, Mooncake hash ids) are left as they are.
    """
    streams = TextStreams(encode)
    out: list[RequestSpec] = []
    for spec in specs:
        prompt = spec.prompt
        if isinstance(prompt, SyntheticPrompt):
            ids: list[int] = []
            if prompt.shared_prefix_id is not None:
                ids = streams.tokens(
                    "prefix/" + prompt.shared_prefix_id, prompt.shared_prefix_length
                )
            ids += streams.tokens(
                "unique/" + prompt.key, prompt.length - prompt.shared_prefix_length
            )
            spec = attrs.evolve(spec, prompt=TokenPrompt.of(ids))
        out.append(spec)
    return out
