"""Sluice: an in-house LLM API gateway (asyncio Protocols on uvloop, httptools, orjson).

The hot modules (see ``build.py``) are plain Python, and Cython compiles the same files, typed
by the ``.pxd`` files beside them, into ``_compiled/``. Beside them, the byte layer: C loops
written as Cython (``_bytescan.pyx``), with its pure-Python reference in ``bytescan.py``. The
directory is searched first when it holds a build of exactly these sources;
``SLUICE_PURE_PYTHON=1`` leaves it out (every module, the byte layer included, runs as Python),
so one checkout runs either way. ``compiled`` says which mode this process runs.

The package is type-checked (``mypy.ini``); the compiled modules give their types in type comments
(``# type:``), not annotations, which Cython would type their C code by.
"""
import os

__version__ = "0.1.0"

COMPILED_MODULES = ("http", "metrics", "keys", "request", "known_head", "framing", "usage", "client",
                    "chat_body", "admission", "rewrite", "dispatch", "pool", "upstream", "relay_same_dialect",
                    "relay_translated", "server")
EXTENSION_MODULES = ("_bytescan",)   # written in Cython (.pyx): their reference is the .py without "_"
BUILT_MODULES = COMPILED_MODULES + EXTENSION_MODULES


def _sources_digest(src: str) -> str:
    """What a build was made from: the compiled modules' .py and .pxd files, and the .pyx files."""
    import hashlib
    h = hashlib.sha256()
    sources = [name + ext for name in COMPILED_MODULES for ext in (".py", ".pxd")]  # each has both
    for name in sources + [name + ".pyx" for name in EXTENSION_MODULES]:
        with open(os.path.join(src, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _use_compiled() -> bool:
    """Put the compiled modules first on the package path, when they are built and current."""
    if os.environ.get("SLUICE_PURE_PYTHON") == "1":
        return False
    src = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(src, "_compiled")
    try:
        with open(os.path.join(out, "SOURCES")) as f:
            built = f.read().strip()
    except OSError:
        return False  # never built
    from importlib.machinery import EXTENSION_SUFFIXES
    suffix = EXTENSION_SUFFIXES[0]  # this interpreter's ABI: a build for another one is ignored
    if not all(os.path.exists(os.path.join(out, m + suffix)) for m in BUILT_MODULES):
        return False
    if built != _sources_digest(src):
        import sys
        sys.stderr.write("sluice: the compiled modules are older than the sources (rebuild: "
                         "python gateways/sluice/build.py); running the pure-Python modules\n")
        return False
    __path__.insert(0, out)
    return True


compiled = _use_compiled()
