"""Every number that steers the tuner lives in tuning/constants.py with a line saying what it bounds and where
its value comes from; a bare number elsewhere in tuning/ fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import specpilot.tuning as tuning_pkg
from specpilot.tuning import constants

TUNING = Path(tuning_pkg.__file__).parent
# Numbers that are arithmetic, not tuning: identities, halves and doubles (the -1/2 of a normal log density),
# a count's +-1.
TRIVIAL = {0, 1, 2, 0.5, -0.5, -1}
# Generated data (measured step times, scripts/cost_shapes.py); its provenance is its docstring.
DATA_MODULES = {"cost_shapes.py", "constants.py"}
# Published formulas whose coefficients are the formula: the Cornish-Fisher expansion of a t quantile.
FORMULAS = {("judge.py", "t_quantile")}
# Percent: how the status and reasons print a fraction.
PERCENT = 100
PROVENANCE = re.compile(r"\[(formula|measured|chosen|safety|by hand)\b")


def _allowed(node: ast.Constant, parents: dict[ast.AST, ast.AST]) -> bool:
    value = node.value
    parent = parents.get(node)
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub):
        value, parent = -value, parents.get(parent)
    if value in TRIVIAL or value == PERCENT:
        return True
    # v[3]: a field of a list read back from the status.
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    # round(x, digits) and x ** k: a display precision and an exponent.
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "round":
        return len(parent.args) == 2 and parent.args[1] is node
    return isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Pow) and parent.right is node


def _bare_numbers(path: Path, root: Path = TUNING) -> list[str]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    exempt = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
              and (path.name, f.name) in FORMULAS for n in ast.walk(f)}
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and type(node.value) in (int, float) and id(node) not in exempt
            and not _allowed(node, parents)]


def test_no_bare_number_outside_the_constants_module() -> None:
    found = [hit for path in sorted(TUNING.rglob("*.py")) if path.name not in DATA_MODULES
             for hit in _bare_numbers(path)]
    assert found == [], "name these in tuning/constants.py, with their provenance:\n" + "\n".join(found)


def test_the_check_catches_a_bare_number(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("def f(x, v):\n    return round(x * 100, 3) + x ** 3 + 0.5 * x - 1 + v[3] + 0.07\n")
    assert _bare_numbers(path, tmp_path) == ["x.py:2: 0.07"]


def test_every_constant_says_what_it_bounds_and_where_it_comes_from() -> None:
    lines = (TUNING / "constants.py").read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    missing = []
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        # The comment block just above the assignment (or above a group of assignments sharing it).
        row = node.lineno - 2
        while row >= 0 and not lines[row].startswith("#") and lines[row].strip() and "=" in lines[row]:
            row -= 1
        block = []
        while row >= 0 and lines[row].startswith("#"):
            block.append(lines[row])
            row -= 1
        if not PROVENANCE.search(" ".join(block)):
            missing.append(lines[node.lineno - 1])
    assert missing == []


def test_the_modules_use_the_constants_module_s_values() -> None:
    from specpilot.tuning import judge, machine, planner, state, step_model, transfer
    assert judge.EXTEND is constants.EXTEND and judge.MIN_WINDOWS is constants.MIN_WINDOWS
    assert machine.LOADS_KEPT == state.LOADS_KEPT == constants.LOADS_KEPT
    assert planner.MIN_NET_VALUE == constants.MIN_NET_VALUE and transfer.BORROW_SD == constants.BORROW_SD
    assert step_model.KAPPA_GRID is constants.KAPPA_GRID
