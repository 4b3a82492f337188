"""The .pxd files agree with the .py files they type.

A compiled module's classes are declared twice: in Python (``__slots__``, the attributes the
methods set) and in the .pxd beside it (the extension type's fields and ``cpdef`` methods). A
field missing from the .pxd fails only compiled, and only when the code that sets it runs; a
field missing from ``__slots__`` fails only in pure Python. These tests read both from the
sources (``ast`` and the .pxd text), so either lane catches a disagreement before anything runs.
"""
import ast
import os
import re

import pytest
from sluice_helpers import SLUICE_DIR

PKG = os.path.join(SLUICE_DIR, "sluice")
PXDS = sorted(f for f in os.listdir(PKG) if f.endswith(".pxd"))


class PxdClass:
    def __init__(self, name):
        self.name = name
        self.fields = set()
        self.methods = set()


def parse_pxd(text):
    """({class name: PxdClass}, module-level cpdef function names, module-level C variable
    names) of a .pxd file."""
    classes, functions, variables = {}, set(), set()
    current = None
    for line in text.splitlines():
        code = line.split("#", 1)[0].rstrip()
        if not code.strip() or code.lstrip().startswith("@"):
            continue
        m = re.match(r"cdef class (\w+)", code)
        if m:
            current = classes[m.group(1)] = PxdClass(m.group(1))
            continue
        indented = code[0] in " \t"
        if not indented:
            current = None
        m = re.match(r"\s*cpdef\s+[\w\s]*?(\w+)\(", code)
        if m:
            (current.methods if current is not None and indented else functions).add(m.group(1))
            continue
        m = re.match(r"\s*cdef\s+(?:public\s+|readonly\s+)?([^(]+)$", code)
        if m:  # "cdef public <type> a, b, c": the type's words, then the names
            first, *rest = m.group(1).split(",")
            names = {first.split()[-1]} | {n.strip() for n in rest}
            (current.fields if current is not None and indented else variables).update(names)
    return classes, functions, variables


class PyClass:
    def __init__(self, node):
        self.name = node.name
        self.slots = None
        self.methods = set()
        self.assigned = set()   # attributes its methods set on self
        self.in_init = set()    # those __init__ sets
        for item in node.body:
            if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets):
                self.slots = {e.value for e in item.value.elts}
            elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.methods.add(item.name)
                if not item.args.args:
                    continue
                me = item.args.args[0].arg
                for n in ast.walk(item):
                    if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                            and isinstance(n.value, ast.Name) and n.value.id == me):
                        self.assigned.add(n.attr)
                        if item.name == "__init__":
                            self.in_init.add(n.attr)


def parse_py(source):
    """({class name: PyClass}, module-level function names, module-level names bound)."""
    tree = ast.parse(source)
    classes, functions, names = {}, set(), set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = PyClass(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return classes, functions, names


def set_elsewhere():
    """The attributes the package's modules set on objects other than ``self`` (the relay
    modules set the exchange's fields, for one)."""
    names = set()
    for f in os.listdir(PKG):
        if f.endswith(".py"):
            with open(os.path.join(PKG, f)) as src:
                tree = ast.parse(src.read())
            names.update(n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                         and isinstance(n.ctx, ast.Store)
                         and not (isinstance(n.value, ast.Name) and n.value.id == "self"))
    return names


def disagreements(pxd_text, py_source, elsewhere=frozenset()):
    """What a .pxd and its .py disagree on, one line each (empty: they agree). ``elsewhere``:
    attributes other modules set."""
    pxd_classes, pxd_functions, pxd_variables = parse_pxd(pxd_text)
    py_classes, py_functions, py_names = parse_py(py_source)
    found = []
    for name, pxd in sorted(pxd_classes.items()):
        py = py_classes.get(name)
        if py is None:
            found.append(f"cdef class {name}: no Python class of that name")
            continue
        if py.slots is not None:
            for f in sorted(py.slots - pxd.fields):
                found.append(f"{name}.{f}: in __slots__, not in the .pxd")
            for f in sorted(pxd.fields - py.slots):
                found.append(f"{name}.{f}: in the .pxd, not in __slots__")
            for f in sorted(py.slots - py.assigned - elsewhere):
                found.append(f"{name}.{f}: a slot no method sets")
        for f in sorted(py.assigned - pxd.fields):
            found.append(f"{name}.{f}: set by the Python class, not declared in the .pxd")
        for meth in sorted(pxd.methods - py.methods):
            found.append(f"{name}.{meth}: a cpdef method the Python class does not define")
    for fn in sorted(pxd_functions - py_functions):
        found.append(f"{fn}: a cpdef function the module does not define")
    for var in sorted(pxd_variables - py_names):
        found.append(f"{var}: a C variable the module does not assign or import")
    return found


@pytest.mark.parametrize("pxd", PXDS)
def test_pxd_declares_what_the_python_module_has(pxd):
    with open(os.path.join(PKG, pxd)) as f:
        pxd_text = f.read()
    with open(os.path.join(PKG, pxd[:-4] + ".py")) as f:
        py_source = f.read()
    assert disagreements(pxd_text, py_source, set_elsewhere()) == []


def test_every_compiled_module_has_its_pxd():
    import sluice
    assert sorted(m + ".pxd" for m in sluice.COMPILED_MODULES) == PXDS


def test_a_field_missing_on_either_side_is_found():
    pxd = ("cdef class Thing:\n"
           "    cdef public int a, b\n"
           "    cdef public long long c\n"
           "    cpdef go(self, int n)\n"
           "cdef int LIMIT\n"
           "cpdef int helper(Thing t)\n")
    py = ("LIMIT = 3\n"
          "class Thing:\n"
          "    __slots__ = ('a', 'b', 'c')\n"
          "    def __init__(self):\n"
          "        self.a = self.b = 0\n"
          "        self.c = 1\n"
          "    def go(self, n):\n"
          "        pass\n"
          "def helper(t):\n"
          "    return 1\n")
    assert disagreements(pxd, py) == []
    assert disagreements(pxd.replace("int a, b", "int a"), py) == [
        "Thing.b: in __slots__, not in the .pxd",
        "Thing.b: set by the Python class, not declared in the .pxd"]
    assert disagreements(pxd, py.replace("'a', 'b', 'c'", "'a', 'b'")) == [
        "Thing.c: in the .pxd, not in __slots__"]
    assert disagreements(pxd, py.replace("        self.c = 1\n", "")) == ["Thing.c: a slot no method sets"]
    assert disagreements(pxd, py.replace("def go(", "def went(")) == [
        "Thing.go: a cpdef method the Python class does not define"]
    assert disagreements(pxd, py.replace("        self.c = 1\n", ""), {"c"}) == []  # set by another module
    unslotted = py.replace("    __slots__ = ('a', 'b', 'c')\n", "").replace(
        "    def go(", "    def grow(self):\n        self.d = 1\n    def go(")
    assert disagreements(pxd, unslotted) == [
        "Thing.d: set by the Python class, not declared in the .pxd"]
