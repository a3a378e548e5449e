"""advisor: a static performance linter and code-rewriting advisor for PyTorch training scripts."""

import os as _os

__version__ = "0.1.0"


def _find_checkout_rules() -> None:
    """The rules live beside the package (pyproject maps ``advisor.rules`` to ``rules/``, so the
    folder listing reads parse -> facts -> rules). An installed advisor has them in place; a plain
    checkout on PYTHONPATH (bench/verify on a GPU machine, verify's harness) finds them here."""
    import importlib.util
    import sys

    package = _os.path.dirname(_os.path.abspath(__file__))
    rules = _os.path.join(_os.path.dirname(package), "rules")
    if _os.path.isdir(_os.path.join(package, "rules")) or not _os.path.isfile(_os.path.join(rules, "__init__.py")):
        return

    class CheckoutRules:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "advisor.rules":
                return None
            return importlib.util.spec_from_file_location(
                name, _os.path.join(rules, "__init__.py"), submodule_search_locations=[rules]
            )

    # Last, so that an editable install's own finder answers first where there is one.
    sys.meta_path.append(CheckoutRules)


_find_checkout_rules()
