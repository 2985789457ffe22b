"""README's Python snippets, run in order in one namespace as a reader would paste them."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readmes_snippets_run_as_written():
    snippets = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    assert len(snippets) == 2
    namespace = {}
    for code in snippets:
        exec(compile(code, str(README), "exec"), namespace)
    items, scores = namespace["items"], namespace["scores"]
    assert items.shape == scores.shape == (5, 100)
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    assert namespace["model"].latest_chunk_ == 7
    assert namespace["search"].best_params_["interests__n_clusters"] in (10, 20, 40)
