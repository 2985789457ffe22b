"""The documentation's snippets run and its figures agree: docs/index.rst's snippet runs as
written; every figure the README (or the changelog, or docs/reproducing.md) quotes from a
page of the docs is the page's; the HTTP reference lists every endpoint and field of the
service's OpenAPI document; the user guide outside the Results part, the API reference and
the changelog stay under their line budget."""

import importlib.util
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def read(name: str) -> str:
    return (ROOT / name).read_text()


def module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def table_rows(text: str, header_start: str) -> dict[str, list[str]]:
    """The rows of the first markdown table whose header starts with ``header_start``,
    keyed by their first cell."""
    table = re.search(rf"^{re.escape(header_start)}.*?(?=^\s*$)", text, flags=re.S | re.M)
    assert table, f"no table starting with {header_start!r}"
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in table.group(0).strip().splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


def first_number(cell: str) -> float:
    return float(re.match(r"[-+]?\d*\.?\d+", cell.replace(",", "")).group(0))


def test_index_snippet_runs_as_written():
    text = read("docs/index.rst")
    block = re.search(r"^\.\. code-block:: python\n\n(.*?)(?=^\S)", text, flags=re.S | re.M)
    namespace = {}
    exec(compile(textwrap.dedent(block.group(1)), "docs/index.rst", "exec"), namespace)
    items, scores = namespace["items"], namespace["scores"]
    assert items.shape == scores.shape == (5, 100)
    assert np.all(np.diff(scores, axis=1) <= 0)
    assert namespace["pipe"][-1].latest_chunk_ == 7


def test_readmes_reproduce_table_is_the_generated_logs_in_the_docs():
    readme = table_rows(read("README.md"), "| method | recall@50 |")
    header = ["recall@50", "mrr@50", "ndcg@50", "recall@100", "mrr@100", "ndcg@100"]
    docs = table_rows(read("docs/paper_table.md"),
                      "| method | recall@100 | mrr@100 | recall / ANN")
    names = {"MiCRO (paper)": "MiCRO (paper)", "MiCRO": "`MiCRO()`", "ANN": "ANN",
             "Popularity": "Popularity"}
    for method, prefix in names.items():
        (doc_row,) = [row for name, row in docs.items() if name.split(" (")[0] == prefix
                      or name == prefix]
        ours = readme[method]
        assert first_number(ours[header.index("recall@100")]) == first_number(doc_row[0]), method
        assert first_number(ours[header.index("mrr@100")]) == first_number(doc_row[1]), method


def test_readmes_paper_figures_are_table_3d():
    scale = module(DOCS / "plot_presets.py").preset_tables(read("docs/scale.md"))
    paper = scale["fave"]["paper"]
    quoted = re.search(r"the paper's TwitterFaveGraph: MiCRO (\.\d+), ANN (\.\d+), "
                       r"Popularity (\.\d+) Recall@100", read("README.md"))
    assert [float(x) for x in quoted.groups()] == [
        paper["MiCRO (paper)"], paper["ANN"], paper["Popularity"]]


def test_readmes_paired_lead_is_the_evaluation_pages():
    lead = re.search(r"\+\d+\.\d% \[\+\d+\.\d%, \+\d+\.\d%\] recall@100 against ANN",
                     read("README.md")).group(0)
    assert lead.split(" recall")[0] in " ".join(read("docs/evaluation.md").split())


def test_readmes_live_figures_are_the_live_pages():
    quoted = re.search(r"MiCRO live retrieves (\d\.\d+)x what chunk-only MiCRO does\s+"
                       r"\(recall@100\s+(\.\d+) against (\.\d+); ANN live (\.\d+)\)",
                       read("README.md"))
    ratio, live, chunk_only, ann = quoted.groups()
    rows = table_rows(read("docs/live_results.md"), "| method | recall@100 |")
    assert first_number(rows["MiCRO chunk-only"][0]) == float(chunk_only)
    micro_live = next(row for name, row in rows.items()  # the default live_weight
                      if name.startswith("MiCRO live (auto"))
    assert first_number(micro_live[0]) == float(live)
    assert micro_live[2].startswith(f"{ratio}x")
    assert first_number(rows["ANN live"][0]) == float(ann)


def test_readmes_compilation_figures_are_the_benchmarks():
    text = " ".join(read("README.md").split())
    warm, cold, compiling = map(float, re.search(
        r"about (\d+) CPU seconds once numba has compiled and cached its kernels, and (\d+) "
        r"the first time, (\d+) of them compiling", text).groups())
    row = table_rows(read("docs/benchmarks.md"), "| log | cold s (cpu s) |")["the built-in demo"]
    cpu = [float(x) for x in re.findall(r"\((\d+\.\d+)\)", " ".join(row[:2]))]
    assert (round(cpu[1]), round(cpu[0]), round(first_number(row[2]))) == (warm, cold, compiling)


def test_readmes_serving_figures_are_the_serving_pages():
    quoted = re.search(r"(\d,\d{3}) a second at p99 (\d+) ms, (\d+) ms while a chunk is applied",
                       read("README.md"))
    rate, p99, p99_update = (first_number(x) for x in quoted.groups())
    text = read("docs/serving_results.md")
    table = re.search(r"^\| request \| connections \|.*?(?=^\s*$)", text, flags=re.S | re.M)
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in table.group(0).splitlines()[2:]]
    (quiet,) = [r for r in rows if r[:3] == ["1 user", "16", "no"]]
    (busy,) = [r for r in rows if r[:2] == ["1 user", "16"] and r[2].startswith("yes")]
    assert rate == pytest.approx(first_number(quiet[3]), rel=0.05)
    assert p99 == pytest.approx(first_number(quiet[5]), rel=0.05)
    assert p99_update == pytest.approx(first_number(busy[5]), rel=0.05)


def test_reproducing_quotes_the_scale_tables():
    tables = module(DOCS / "plot_presets.py").preset_tables(read("docs/scale.md"))
    page = " ".join(read("docs/reproducing.md").split())
    for preset, table in tables.items():
        for method in ("MiCRO (paper)", "ANN", "Popularity"):
            values = ", ".join(f"{table['scales'][s][method]:.3f}".lstrip("0")
                               for s in sorted(table["scales"]))
            assert values in page, (preset, method, values)
            paper = f"{table['paper'][method]:.3f}".lstrip("0")
            assert f"| {paper} |" in page or f"| {paper}," in page, (preset, method, paper)


def test_changelogs_full_scale_figures_are_the_scale_pages():
    tables = module(DOCS / "plot_presets.py").preset_tables(read("docs/scale.md"))
    text = " ".join(read("docs/changelog.rst").split())
    for preset in ("fave", "follow"):
        full = tables[preset]["scales"][1.0]
        figures = [f"{full[m]:.3f}".lstrip("0") for m in ("MiCRO (paper)", "ANN", "Popularity")]
        pattern = r"(?<!\d)" + r",? (?:ANN |Popularity )?".join(map(re.escape, figures))
        assert re.search(pattern, text), (preset, figures)


def test_the_http_reference_lists_every_endpoint_and_field():
    pytest.importorskip("orjson")
    from sklearn_micro import __version__
    from sklearn_micro.serving.openapi import document
    from sklearn_micro.serving.validation import Limits

    page = module(DOCS / "_ext" / "http_reference.py").markdown()
    doc = document("int", "int", Limits(), __version__)
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            assert f"## `{method.upper()} {path}`" in page
            for status in op["responses"]:
                assert re.search(rf"^\| {status} \|", page, flags=re.M), (path, status)
    for name, schema in doc["components"]["schemas"].items():
        if name.endswith("Request"):
            for field in schema["properties"]:
                assert f"| `{field}` |" in page, (name, field)
    assert "| `m` | integer | 1 to 1,000 | `100` |" in page


def toctree_pages(name: str) -> list[str]:
    """The pages listed in the toctrees of ``docs/<name>.rst``, in order."""
    pages = []
    for block in re.findall(r"^\.\. toctree::\n((?:[ \t]+.*\n|\n)*)", read(f"docs/{name}.rst"),
                            flags=re.M):
        pages += [line.strip() for line in block.splitlines()
                  if line.strip() and not line.strip().startswith(":")]
    return pages


def page_text(page: str) -> str:
    if page == "_generated/http":  # written at build time from the OpenAPI document
        return module(DOCS / "_ext" / "http_reference.py").markdown()
    (path,) = [p for p in (DOCS / f"{page}.md", DOCS / f"{page}.rst") if p.is_file()]
    return path.read_text()


def test_the_user_guide_api_and_changelog_stay_under_3000_lines():
    pytest.importorskip("orjson")
    guide = toctree_pages("user_guide")
    assert "_generated/http" in guide and "serving" in guide
    assert not set(guide) & set(toctree_pages("results")), "a page in both parts"
    lines = {page: len(page_text(page).splitlines())
             for page in ["user_guide", *guide, "api", "changelog"]}
    assert sum(lines.values()) < 3000, sorted(lines.items(), key=lambda kv: -kv[1])
