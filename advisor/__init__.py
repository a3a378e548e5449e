"""advisor: a static performance linter and code-rewriting advisor for PyTorch training scripts."""

__version__ = "0.1.0"
