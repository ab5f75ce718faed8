"""The docs name code that exists: every dotted module path of the packages (`regattn.…`,
`regattn_fairseq.…`, `regattn_bench.…`, `regattn_checkout.…`) mentioned in README.md and
docs/*.md imports (a module, or an attribute of one), and every repository file path they
mention is there. Modules move (the suite's stages, regattn_bench, regattn_checkout); this
keeps the docs from pointing at where they were. And every markdown link and image of README,
docs/ and the generated results/ pages opens: its target, relative to the page, exists."""

import importlib
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# not part of a longer path or name (`shared/regattn...`, `x.regattn`)
_START = r"(?<![\w./-])"
DOTTED = re.compile(_START + r"(regattn(?:_fairseq|_bench|_checkout)?(?:\.[A-Za-z_]\w*)+)")
FILE = re.compile(
    _START
    + r"((?:regattn_fairseq|regattn_bench|regattn_checkout|regattn|scripts|bench|tests|configs"
    + r"|docs)/[\w/.-]+"
    + r"\.(?:py|md|yaml|json|sh|txt))"
)
# a markdown link or image: [text](target) or ![text](target)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PAGES = [*DOCS, *sorted((REPO_ROOT / "results").rglob("*.md"))]
# files a recipe in the docs tells the reader to create
TO_BE_WRITTEN = {"configs/attention/mymax.yaml"}


def _mentions(pattern: re.Pattern) -> list[tuple[str, str]]:
    return sorted({(doc.name, found) for doc in DOCS for found in pattern.findall(doc.read_text())})


def _resolves(dotted: str) -> bool:
    """Whether `dotted` is an importable module, or an attribute chain of the longest
    importable module it starts with."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for name in parts[end:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_the_patterns_find_the_docs_paths():
    """Guards the tests below, which would pass on patterns that find nothing."""
    assert ("huggingface.md", "regattn.analysis.attention_statistics") in _mentions(DOTTED)
    assert ("development.md", "regattn_fairseq/fairseq_adapter.py") in _mentions(FILE)


@pytest.mark.parametrize("doc, dotted", _mentions(DOTTED))
def test_module_paths_in_the_docs_import(doc, dotted):
    assert _resolves(dotted), f"{doc} names {dotted}, which does not import"


@pytest.mark.parametrize("doc, path", _mentions(FILE))
def test_file_paths_in_the_docs_exist(doc, path):
    assert path in TO_BE_WRITTEN or (REPO_ROOT / path).exists(), f"{doc} names {path}"


def _links() -> list[tuple[str, str]]:
    """Every (page, target) of a relative markdown link outside code blocks, the pages'
    paths relative to the repository; targets outside the repository (``../shared/...``, the
    read-only data beside a checkout) are not the docs' to keep."""
    found = set()
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            path = target.split("#")[0]
            if not path or re.match(r"[a-z]+:", target):  # an anchor here, a URL
                continue
            if (page.parent / path).resolve().is_relative_to(REPO_ROOT):
                found.add((page.relative_to(REPO_ROOT).as_posix(), target))
    return sorted(found)


def test_the_link_pattern_finds_the_pages_links():
    """Guards the test below: links of a doc, of a generated table and of README are found."""
    links = _links()
    assert ("docs/reproduction.md", "../results/summary.md") in links
    assert ("results/nmt.md", "../docs/reproduction.md#how-to-read-these-tables") in links
    assert any(page == "README.md" and target.endswith(".png") for page, target in links)


@pytest.mark.parametrize("page, target", _links())
def test_links_in_the_docs_and_results_open(page, target):
    """A link written from the repository root in a page under docs/ or results/ (the page's
    own folder is where a markdown viewer resolves it) names a file that is not there."""
    path = (REPO_ROOT / page).parent / target.split("#")[0]
    assert path.exists(), f"{page} links {target}, which is not at {path}"
