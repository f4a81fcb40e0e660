"""Sphinx configuration for kvframe's documentation site.

Sphinx + MyST rather than MkDocs: pluggy, pytest and datasette — the plugin
ecosystems kvframe follows — document themselves with Sphinx, their docstrings
are reST field lists (``:param:``), as ours are, and autodoc turns those into
the API reference without a second docstring dialect. MyST lets the pages stay
the Markdown that GitHub renders. Build (warnings are errors)::

    .venv/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

The guides are listed in ``index.md``'s toctree in the order a newcomer reads
them (a page in no toctree fails the ``-W`` build); a new page needs no edit here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

import kvframe

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent

project = "kvframe"
author = "the kvframe authors"
copyright = "2026, the kvframe authors"
release = kvframe.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.viewcode"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# GitHub-style anchors (`#arrival-order`) for the pages' own section links.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Signatures stay as written (``list[int]``) instead of failing to resolve
# annotations imported only under TYPE_CHECKING.
autodoc_typehints_format = "short"

# Code fences in a language Pygments lacks (``jsonl``) are shown plain; that is
# not a broken link or reference, so it must not fail the -W build.
suppress_warnings = ["misc.highlighting_failure"]

html_theme = "furo"
html_title = f"kvframe {release}"


class RepositoryFileLinks(SphinxPostTransform):
    """Links from a page to repository files outside ``docs/`` (``../examples/x/README.md``).

    On GitHub these are the natural links; in the site they have no page. So
    a link to a module of kvframe whose source page the site has (``viewcode``
    makes one for every module the API reference documents) goes to that
    highlighted page; any other link whose file or folder exists becomes plain
    text (the reader of the site sees what it names) rather than MyST's raw
    download of the file; and a link whose target is missing is a warning,
    which the ``-W`` build turns into a failure: a broken link still fails.
    Runs just before MyST's resolver (priority 9), which would otherwise
    report every such link as a missing document.
    """

    default_priority = 8

    def run(self, **kwargs: Any) -> None:
        self._source_files()
        log = logging.getLogger(__name__)
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            target = str(node.get("reftarget") or "")
            if node.get("refdomain") == "doc" and target.startswith("/"):
                path = Path(target + ".md")
            elif target.startswith("../"):
                doc_dir = (DOCS / node.get("refdoc", self.env.docname)).parent
                path = (doc_dir / target.partition("#")[0]).resolve()
            else:
                continue
            if path.is_relative_to(DOCS) or not path.is_relative_to(REPO):
                continue
            if not path.exists():
                log.warning(
                    "link to a repository file that does not exist: %s",
                    path.relative_to(REPO),
                    location=node,
                )
            node.replace_self(nodes.inline("", "", *node.children))

    def _source_files(self) -> None:
        """MyST's download links to repository files: a source page, or plain text."""
        log = logging.getLogger(__name__)
        documented = getattr(self.env, "_viewcode_modules", {})
        for node in list(self.document.findall(addnodes.download_reference)):
            target = str(node.get("reftarget") or "")
            doc_dir = (DOCS / node.get("refdoc", self.env.docname)).parent
            path = (doc_dir / target.partition("#")[0]).resolve()
            if path.is_relative_to(DOCS) or not path.is_relative_to(REPO):
                continue
            if not path.exists():
                log.warning(
                    "link to a repository file that does not exist: %s",
                    path.relative_to(REPO),
                    location=node,
                )
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            if path.suffix == ".py" and documented.get(module):
                depth = self.env.docname.count("/")
                uri = "../" * depth + "_modules/" + module.replace(".", "/") + ".html"
                node.replace_self(
                    nodes.reference("", "", *node.children, refuri=uri, internal=True)
                )
            else:
                node.replace_self(nodes.inline("", "", *node.children))


def setup(app: Any) -> dict[str, Any]:
    app.add_post_transform(RepositoryFileLinks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
