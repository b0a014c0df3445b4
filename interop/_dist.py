"""The distribution this package is installed as, and the check for a foreign ``interop`` beside it.

The import name ``interop`` is fixed, but the name ``interop`` on PyPI belongs to another project (Illumina
InterOp): ``pip install interop`` brings that one. Ours is the distribution ``interop-video``.
"""

from __future__ import annotations

import importlib.metadata
import os

DISTRIBUTION = "interop-video"


def pip_hint(extra: str | None = None) -> str:
    """The pip command that brings a part of interop (an extra) into this environment."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install '{DISTRIBUTION}'"


def foreign_interop() -> str | None:
    """Why another installed distribution may shadow this package's import name, or None.

    A distribution called ``interop`` (the PyPI name, not ours) installs into the same ``interop/`` folder, so
    its files and ours overwrite each other. Checked from the installed metadata only: nothing is imported.
    """
    try:
        other = importlib.metadata.distribution("interop")
    except importlib.metadata.PackageNotFoundError:
        return None
    except Exception:  # broken metadata of an unrelated package must not break doctor
        return None
    if (other.metadata["Name"] or "").lower() == DISTRIBUTION:
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    return (f"another package named 'interop' ({other.metadata['Summary'] or 'not this project'}, version "
            f"{other.version}) is installed and shares the import name `interop` with {DISTRIBUTION} ({here}): "
            f"`pip uninstall interop`, then reinstall this project (`pip install --force-reinstall '.[all]'` in "
            f"its checkout)")
