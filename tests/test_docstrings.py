"""numpydoc's validation of the docstring of every public name, as scikit-learn's
``sklearn/tests/test_docstrings.py`` does, and the API reference naming every public name.

Validated: each name in ``__all__`` of the public modules, and each public method and
property a class of the package defines or inherits from another class of the package
(``recommend`` from the recommender mixin, ``fit`` from the baselines' common base), but not
those inherited from scikit-learn (``get_params``, ``set_*_request``, ...), which
scikit-learn checks itself. That the Examples sections run is checked by the doctests
(``--doctest-modules`` in pyproject.toml).
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

numpydoc_validation = pytest.importorskip(
    "numpydoc.validate", reason="numpydoc comes with the test extra: pip install '.[test]'"
)

PUBLIC_MODULES = (
    "sklearn_micro",
    "sklearn_micro.metrics",
    "sklearn_micro.micro",
    "sklearn_micro.baselines",
    "sklearn_micro.model_selection",
    "sklearn_micro.datasets",
    "sklearn_micro.persistence",
    "sklearn_micro.utils.estimator_checks",
)
API_REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "api.rst"

# Checks left out everywhere, as scikit-learn does:
# - GL01, GL02: where the summary starts and the blank lines around it are layout only.
# - RT02: the first line of a Returns entry names what is returned (``self : MiCRO``), not
#   only its type.
IGNORED_EVERYWHERE = {"GL01", "GL02", "RT02"}
# Checks that apply to classes and functions, not to their methods and properties: the
# extended summary (ES01), See Also (SA01) and Examples (EX01) sections of a class serve its
# methods. Functions may do with a one-line summary (ES01) but need See Also and Examples.
ONLY_FOR_CLASSES = {"ES01"}
ONLY_FOR_CLASSES_AND_FUNCTIONS = {"SA01", "EX01"}

# Names whose docstrings are not validated yet, each with its reason (none today).
PENDING: dict[str, str] = {}

# Public names that numpydoc does not validate, with the reason.
NOT_VALIDATED = {
    # a tuple: its doc-comment is what the API reference shows (autodata); numpydoc reads
    # the docstring of the object, which for a tuple is the tuple type's
    "sklearn_micro.metrics.METRICS": "a constant, documented by its doc-comment",
    "sklearn_micro.persistence.TRUSTED_TYPES": "a constant, documented by its doc-comment",
    **{f"sklearn_micro.micro.{name}": "a constant, documented by its doc-comment"
       for name in ("PERSONAL_GRID", "POPULARITY_GRID", "COENGAGEMENT_GRID",
                    "COENGAGED_NEIGHBOURS", "PHI_DECAY_GRID", "LIVE_WEIGHT_GRID",
                    "RECALL_KEPT")},
    "sklearn_micro.utils.estimator_checks.SCORE_RTOL":
        "a constant, documented by its doc-comment",
}

# Public modules that docs/api.rst does not list yet, with the reason; the list shrinks as
# the page catches up.
NOT_IN_API_REFERENCE: dict[str, str] = {}


def _defined_here(klass, name: str) -> bool:
    """Whether the member ``name`` of ``klass`` comes from a class of this package."""
    for owner in inspect.getmro(klass):
        if name in vars(owner):
            return owner.__module__.startswith("sklearn_micro")
    return False


def public_names() -> list[tuple[str, str]]:
    """``(import path, kind)`` of every public name, kind one of class, function, method,
    constant."""
    names = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            path = f"{module_name}.{name}"
            if inspect.isclass(obj):
                names.append((path, "class"))
                for member in sorted(dir(obj)):
                    if member.startswith("_") or not _defined_here(obj, member):
                        continue
                    value = inspect.getattr_static(obj, member)
                    if callable(value) or isinstance(value, (property, staticmethod,
                                                             classmethod)):
                        names.append((f"{path}.{member}", "method"))
            elif callable(obj):
                names.append((path, "function"))
            else:
                names.append((path, "constant"))
    return names


def _errors(path: str, kind: str) -> list[str]:
    result = numpydoc_validation.validate(path)
    errors = []
    for code, message in result["errors"]:
        if code in IGNORED_EVERYWHERE:
            continue
        if code in ONLY_FOR_CLASSES and kind != "class":
            continue
        if code in ONLY_FOR_CLASSES_AND_FUNCTIONS and kind == "method":
            continue
        errors.append(f"{code}: {message}")
    return errors


def _params():
    for path, kind in public_names():
        if path in NOT_VALIDATED:
            continue
        marks = ()
        if path in PENDING:
            marks = pytest.mark.xfail(reason=PENDING[path], strict=False)
        yield pytest.param(path, kind, id=path, marks=marks)


@pytest.mark.parametrize("path, kind", list(_params()))
def test_docstring(path, kind):
    errors = _errors(path, kind)
    if errors:
        pytest.fail(f"{path}: numpydoc validation failed:\n  " + "\n  ".join(errors))


def test_exclusions_name_public_names():
    """Every name left out above is public: the lists shrink as names are fixed or go."""
    paths = {path for path, _ in public_names()}
    assert not set(PENDING) - paths, "remove from PENDING, no longer public"
    assert not set(NOT_VALIDATED) - paths, "remove from NOT_VALIDATED, no longer public"


def _resolve(path: str):
    """The object a dotted path names, or None."""
    module_name, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return None


def test_api_reference_names_every_public_name():
    """docs/api.rst lists each name of ``__all__`` under its module in an autosummary."""
    listed, module = set(), None
    for line in API_REFERENCE.read_text().splitlines():
        found = re.match(r"\.\. currentmodule:: (\S+)", line)
        if found:
            module = found.group(1)
        elif re.fullmatch(r" {3}[A-Za-z_][A-Za-z0-9_]*", line) and module:
            listed.add(f"{module}.{line.strip()}")
    for module_name in PUBLIC_MODULES:
        if module_name in NOT_IN_API_REFERENCE:
            assert not any(name.startswith(f"{module_name}.") for name in listed), (
                f"docs/api.rst lists {module_name}: remove it from NOT_IN_API_REFERENCE")
            continue
        module = importlib.import_module(module_name)
        # a name re-exported from a module listed elsewhere counts where it is listed
        listed_objects = [_resolve(path) for path in listed]
        missing = sorted(n for n in module.__all__ if f"{module_name}.{n}" not in listed
                         and not any(getattr(module, n) is obj for obj in listed_objects
                                     if not isinstance(obj, (int, float, str))))
        assert not missing, f"docs/api.rst does not list {module_name}: {missing}"
