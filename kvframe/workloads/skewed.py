"""A workload on which eviction policies part (``kvframe gen skewed``).

On the bundled traces at the README's settings every eviction policy ties:
either everything reused fits in the cache (no policy has to choose) or
nothing is reused in time (no policy can help). Policies differ only when
(1) popularity is skewed, so that some content is worth more than other
content; (2) one-use traffic ("scans") passes through, which a recency policy
lets push out the popular content and a frequency or scan-resistant policy
does not; and (3) the reuse distance of the popular content -- how many other
blocks are touched between two uses of it -- is around the cache size, so
that whether it survives depends on the policy's choice.

Each request is a *document* (a shared prefix, ``s{seed}-doc{k}``) followed
by a short user part, or, with probability ``scan_fraction``, a *scan*: a
prompt of ``scan_length`` tokens nobody shares. Documents are chosen with Zipf
weights ``1 / (k + 1)^popularity``. The working set is
``num_documents * document_length`` tokens; set it around the GPU cache's
size (``kvframe run`` logs the number of blocks) and the scans' volume
between two uses of a popular document at a similar size.

Determinism as in :mod:`kvframe.workloads.generator`: every random quantity has its
own stream seeded from ``seed`` and a name, and advances once per request
whatever the other settings.
"""

from __future__ import annotations

import attrs

from kvframe.workloads import generator as gen
from kvframe.workloads.chat import (
    Fixed,
    LengthDistribution,
    LogNormal,
    as_length_distribution,
    check_positive_int,
)
from kvframe.workloads.spec import RequestSpec, SyntheticPrompt

__all__ = ["SKEWED", "SkewedConfig", "generate_skewed", "write_skewed_jsonl"]


@attrs.frozen(slots=True, kw_only=True)
class SkewedConfig(gen.GeneratorConfig):
    """Every knob of the skewed generator; the whole config goes into the file header."""

    num_requests: int = attrs.field(default=1000, validator=check_positive_int)
    rate: float | None = attrs.field(default=10.0, validator=gen.check_rate)
    """Poisson arrival rate in requests per second; ``None``: all arrive at ``start_time``."""
    num_documents: int = attrs.field(default=64, validator=check_positive_int)
    document_length: LengthDistribution = attrs.field(
        default=Fixed(1024), converter=as_length_distribution
    )
    """Length of each shared document (drawn once per document)."""
    popularity: float = attrs.field(default=1.0, validator=gen.check_non_negative_finite)
    """Zipf exponent over the documents (0: uniform; 1: the classic Zipf law)."""
    scan_fraction: float = attrs.field(default=0.3, validator=gen.check_fraction)
    """Fraction of requests that are scans: one-use prompts nobody shares."""
    scan_length: LengthDistribution = attrs.field(
        default=Fixed(2048), converter=as_length_distribution
    )
    user_prompt_length: LengthDistribution = attrs.field(
        default=Fixed(64), converter=as_length_distribution
    )
    output_length: LengthDistribution = attrs.field(
        default=LogNormal(median=32, sigma=0.5, max=256), converter=as_length_distribution
    )
    seed: int = 0
    start_time: float = attrs.field(default=0.0, validator=gen.check_non_negative_finite)
    id_prefix: str = "skewed-"


def _skewed_specs(config: SkewedConfig) -> list[RequestSpec]:
    """The skewed generator's own part: a Zipf-chosen document and a user part, or a scan."""
    stream = gen.seeded_streams("skewed", config.seed)
    lengths = gen.prefix_lengths(config.document_length, stream, "documents", config.num_documents)
    documents = gen.ZipfPrefixes.of(f"s{config.seed}-doc", lengths, config.popularity)
    scanning, choice = stream("scan"), stream("document")
    own_lengths = (stream("scan-length"), stream("user"), stream("output"))

    def draw(request_id: str) -> tuple[SyntheticPrompt, int]:
        # Every stream advances once per request, whether it is a scan or not.
        scan_len, user_len, output_len = own_lengths
        max_tokens = config.output_length.sample(output_len)
        own_scan_length = config.scan_length.sample(scan_len)
        user_length = config.user_prompt_length.sample(user_len)
        u = choice.random()
        if scanning.random() < config.scan_fraction:
            return SyntheticPrompt(own_scan_length, key=request_id), max_tokens
        return documents.prompt(u, user_length, key=request_id), max_tokens

    return gen.emit_requests(config, stream("arrival"), draw)


SKEWED: gen.WorkloadGenerator[SkewedConfig] = gen.WorkloadGenerator(
    "skewed", SkewedConfig, _skewed_specs
)
"""The skewed generator (``kvframe gen skewed``)."""

generate_skewed = SKEWED.generate
"""Generate the skewed document + scan workload; see the module docstring.

Pass a :class:`SkewedConfig`, or its fields as keyword arguments (which
override the config's). Request ids are ``{id_prefix}{index:06d}``.
"""
write_skewed_jsonl = SKEWED.write_jsonl
"""Generate a skewed workload and write it as kvframe JSONL with its config in the header."""
