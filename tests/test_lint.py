"""The packages stay free of undefined names, unused imports and syntax errors (ruff's F and E9 rules),
and in rooms a newcomer can find: no module over 500 lines, no function over 100."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TOP = Path(__file__).resolve().parent.parent


def test_imports_point_one_way():
    """import-linter's contracts in pyproject.toml: ingest <- snapshots <- compute <- api <- the wiring."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(lint_imports)], cwd=TOP, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


STAGES = ("ingest", "snapshots", "compute", "api")


def test_every_import_names_the_pulsegraph_namespace():
    """A checkout can also import a stage's folder as a top-level package (``compute.stage``): a second
    copy of every module and class beside ``pulsegraph.compute.stage``. Nothing of ours may."""
    bare = []
    for path in sorted(p for top in (*PACKAGES, "bench", "tests") for p in (TOP / top).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            bare += [f"{path.relative_to(TOP)}:{node.lineno} {n}" for n in names if n.split(".")[0] in STAGES]
    assert not bare, "import these as pulsegraph.<stage>: " + "; ".join(bare)


def test_the_wiring_contract_names_every_module_of_the_wiring():
    with open(TOP / "pyproject.toml", "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    (wiring,) = [c for c in contracts if c["name"].startswith("No stage and no shared module imports the wiring")]
    modules = {f"pulsegraph.{p.stem}" for p in (TOP / "pulsegraph").glob("*.py") if p.stem != "__init__"}
    assert modules <= set(wiring["forbidden_modules"]), sorted(modules - set(wiring["forbidden_modules"]))


def test_ruff_finds_nothing():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "F,E9", "ingest", "snapshots", "compute", "api", "pulsegraph", "bench", "tests"],
        cwd=TOP, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


PACKAGES = ("ingest", "snapshots", "compute", "api", "pulsegraph")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 100


def test_no_module_over_500_lines_and_no_function_over_100():
    too_big = []
    for path in sorted(p for pkg in PACKAGES for p in (TOP / pkg).rglob("*.py")):
        src = path.read_text()
        name = path.relative_to(TOP)
        if len(src.splitlines()) > MAX_MODULE_LINES:
            too_big.append(f"{name}: {len(src.splitlines())} lines")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_big.append(f"{name}:{node.lineno} {node.name}: {lines} lines")
    assert not too_big, "split these: " + "; ".join(too_big)
