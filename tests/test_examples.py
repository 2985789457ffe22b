"""The example scripts: they run on the real log and say so clearly when it is absent."""

import importlib.util
import re
from pathlib import Path

import pytest

from sklearn_micro.datasets import data_home

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["higgs_pipeline", "paper_table", "grid_search_k"])
def test_example_exits_with_a_message_without_data(name, tmp_path, monkeypatch):
    pytest.importorskip("pandas")
    monkeypatch.setenv("SKLEARN_MICRO_DATA", str(tmp_path / "absent"))
    with pytest.raises(SystemExit, match="SKLEARN_MICRO_DATA"):
        load_example(name).main([])


@pytest.mark.skipif(data_home() is None, reason="the real logs of ../shared/data are absent")
def test_higgs_pipeline_on_replies(capsys):
    """Replies only (37k engagements): fit, then nine test chunks, in a few seconds."""
    pytest.importorskip("pandas")
    recall = load_example("higgs_pipeline").main(["--kinds", "RE", "--k", "20", "--dim", "16"])
    out = capsys.readouterr().out
    rows = re.findall(r"^ +(\d+) +\d+ +0\.\d{4}$", out, flags=re.MULTILINE)
    assert [int(t) for t in rows] == list(range(19, 28))  # one line per test chunk
    assert 0.05 < recall < 0.5
