"""Draw docs/img/presets_recall_at_100.png from the presets' tables of docs/scale.md.

The figure holds no number of its own: it reads the `fave` and `follow` tables (Recall@100
at each scale, and the paper's row) from the page and plots them, so that it says what the
page says. Run it after the tables change::

    python docs/plot_presets.py
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = HERE / "scale.md"
OUT = HERE / "img" / "presets_recall_at_100.png"
SCALES = {"1/100": 0.01, "1/20": 0.05, "1/10": 0.1, "1/4": 0.25, "full": 1.0}
METHODS = ("MiCRO (paper)", "ANN", "Popularity")


def preset_tables(text: str) -> dict:
    """``{preset: {"scales": {scale: {method: recall}}, "paper": {method: recall}}}`` from
    the page's tables whose header starts with ``| scale | K | engagements |``."""
    tables = {}
    for preset in ("fave", "follow"):
        section = text.split(f"## `{preset}`", 1)[1]
        table = re.search(r"^\| scale \| K \| engagements \|.*?(?=^\s*$)", section,
                          flags=re.S | re.M).group(0)
        rows = [[cell.strip() for cell in line.strip("|").split("|")]
                for line in table.strip().splitlines()]
        header, body = rows[0], rows[2:]
        scales, paper = {}, {}
        for row in body:
            cells = zip(header, row, strict=False)
            values = {name: float(cell.split("±")[0]) for name, cell in cells
                      if name in METHODS and cell}
            if row[0] in SCALES:
                scales[SCALES[row[0]]] = values
            elif row[0].startswith("the paper"):
                paper = values
        tables[preset] = {"scales": scales, "paper": paper}
    return tables


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = preset_tables(PAGE.read_text())
    colors = dict(zip(METHODS, ("tab:blue", "tab:orange", "tab:green"), strict=True))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, (preset, table) in zip(axes, tables.items(), strict=True):
        xs = sorted(table["scales"])
        for method in METHODS:
            ax.plot(xs, [table["scales"][x][method] for x in xs], "o-",
                    color=colors[method], label=method)
            ax.axhline(table["paper"][method], color=colors[method], ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_xticks(xs, [next(k for k, v in SCALES.items() if v == x) for x in xs])
        ax.minorticks_off()
        ax.set_title(f"{preset} (dashed: the paper's Table 3)")
        ax.set_xlabel("scale of the paper's log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Recall@100")
    axes[0].legend(loc="center left", fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
