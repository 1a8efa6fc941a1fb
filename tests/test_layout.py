"""The layers of src/rnnopt (docs/layout.md): which subsystem may import which.

Read statically from every import statement, the ones inside functions included, so a lazy
import cannot hide a dependency; then the report checked in a fresh interpreter for what it
pulls in at run time.
"""

import ast
from pathlib import Path

import pytest

from tests.conftest import fresh_python

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "rnnopt"
GROUND = {"errors", "records"}
# subsystem -> the subsystems (besides itself and the ground) its modules may import
ALLOWED = {
    "models": set(),
    "measure": {"models"},
    "train": {"models", "measure"},
    "pipeline": {"models", "measure"},  # host facts: "all" cores, "l2" sizes
    "experiments": {"models", "measure", "train"},
    "report": {"models"},
    "cli": {"models", "measure", "train", "pipeline", "experiments", "report"},
}
# records writes the host's fingerprint (measure.host) into every record it makes
GROUND_ALLOWED = {"errors": set(), "records": {"measure"}}


def subsystem(dotted: str) -> str:
    """rnnopt.models.variants.base -> models; rnnopt.records -> records."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ""


def rnnopt_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("rnnopt.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "rnnopt":
                found |= {f"rnnopt.{a.name}" for a in node.names}
            elif node.module.startswith("rnnopt."):
                found.add(node.module)
    return found


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) > 1 or relative.stem in GROUND:
            yield pytest.param(path, id=str(relative))


@pytest.mark.parametrize("path", list(modules()))
def test_module_imports_only_the_layers_below_it(path):
    relative = path.relative_to(PACKAGE)
    own = relative.parts[0] if len(relative.parts) > 1 else relative.stem
    allowed = ALLOWED.get(own, GROUND_ALLOWED.get(own, set())) | GROUND | {own}
    bad = {name for name in rnnopt_imports(path) if subsystem(name) not in allowed}
    assert not bad, f"{relative} imports {sorted(bad)}; its layer may use {sorted(allowed)}"


def test_top_level_holds_only_the_ground_and_the_face():
    loose = {p.stem for p in PACKAGE.glob("*.py")}
    assert loose == {"__init__", "__main__", *GROUND}


def test_the_report_imports_no_torch_and_no_variant():
    names = fresh_python(
        "import sys\n"
        "import rnnopt.report, rnnopt.report.figures, rnnopt.report.table\n"
        "import rnnopt.cli.report\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('rnnopt.models.var')"
        " and m.count('.') > 2 and not m.endswith('.base')))\n"
    )
    assert names == ["[]"]  # no torch, no variant implementation (the registry and base are light)


def test_package_faces_import_nothing_heavy():
    names = fresh_python(
        "import sys\n"
        "import rnnopt.models, rnnopt.measure, rnnopt.train, rnnopt.experiments\n"
        "import rnnopt.pipeline, rnnopt.report, rnnopt.cli\n"
        "print(sorted(m for m in ('torch', 'numba', 'pandas', 'matplotlib') if m in sys.modules))\n"
    )
    assert names == ["[]"]
