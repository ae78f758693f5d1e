"""Optional dependencies: which extra brings a module, and the one-line error when it is missing.

The base install carries what ``kai-ray`` needs offline and for read-only cluster views; operators, plots, the Ray
hook and the test control plane each come with an extra (pyproject.toml), so the operator image carries no plotting
stack and no test tooling. A command that reaches for a missing one says which extra to install instead of
printing an ImportError traceback.
"""

from __future__ import annotations

from importlib.util import find_spec

EXTRA_OF = {
    "kopf": "operator",
    "prometheus_client": "operator",
    "matplotlib": "plots",
    "ray": "ray",
    "cryptography": "operator",
    "pytest": "testing",
}


class MissingExtra(ModuleNotFoundError):
    """A module of an extra that is not installed; the message names the extra and the pip command."""


def missing_extra(exc: ModuleNotFoundError, purpose: str = "") -> MissingExtra | None:
    """``exc`` as a :class:`MissingExtra` when the missing module belongs to one of our extras, else None."""
    root = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(root)
    if extra is None:
        return None
    what = f"{purpose} needs" if purpose else "this needs"
    return MissingExtra(
        f"{what} {root}, which comes with the {extra!r} extra: in a kai-ray checkout, pip install '.[{extra}]'",
        name=root,
    )


def require(*modules: str, purpose: str) -> None:
    """Fail early, before any slow set-up, when a module of an extra is not installed (nothing is imported)."""
    for module in modules:
        if find_spec(module) is None:
            raise missing_extra(ModuleNotFoundError(name=module), purpose) or ModuleNotFoundError(name=module)
