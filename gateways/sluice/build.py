"""Compile Sluice's hot modules with Cython: ``python gateways/sluice/build.py``.

The same .py files run as plain Python; compiled, the .pxd files beside them type the classes,
attributes and calls of the request path. The byte layer (``_bytescan.pyx``) is Cython only:
its pure-Python reference is ``bytescan.py``, which runs when it is not built. The extension modules go to sluice/_compiled/ with a
digest of the sources they were built from: ``sluice`` loads them only while that digest
matches (and never with SLUICE_PURE_PYTHON=1). Idempotent: an unchanged build is not redone.
Needs Cython and a C compiler; without them it says so and exits 1 (Sluice still runs).
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "sluice")
OUT = os.path.join(PKG, "_compiled")
BUILD = os.path.join(HERE, "build")

sys.path.insert(0, HERE)
os.environ["SLUICE_PURE_PYTHON"] = "1"  # this process only reads the package's metadata
from sluice import BUILT_MODULES, COMPILED_MODULES, EXTENSION_MODULES, _sources_digest  # noqa: E402

DIRECTIVES = {
    "language_level": 3,
    "binding": False,          # methods as plain C methods: cheaper calls from uvloop and httptools
    "embedsignature": False,
}


def main():
    digest = _sources_digest(PKG)
    from importlib.machinery import EXTENSION_SUFFIXES
    suffix = EXTENSION_SUFFIXES[0]
    try:
        with open(os.path.join(OUT, "SOURCES")) as f:
            current = f.read().strip() == digest
    except OSError:
        current = False
    if current and all(os.path.exists(os.path.join(OUT, m + suffix)) for m in BUILT_MODULES):
        print(f"sluice: compiled modules up to date ({OUT})")
        return 0
    try:
        from Cython.Build import cythonize
        from setuptools import Extension, setup
    except ImportError as e:
        print(f"sluice: cannot compile ({e}); Sluice runs as pure Python", file=sys.stderr)
        return 1
    exts = [Extension(f"sluice.{m}", [os.path.join("sluice", m + ".py")]) for m in COMPILED_MODULES]
    exts += [Extension(f"sluice.{m}", [os.path.join("sluice", m + ".pyx")]) for m in EXTENSION_MODULES]
    os.chdir(HERE)  # module names follow the paths: sluice/<m>.py -> sluice.<m>
    modules = cythonize(exts, compiler_directives=DIRECTIVES, build_dir=os.path.join(BUILD, "c"),
                        quiet=True)
    lib = tempfile.mkdtemp(prefix="sluice-build-")
    try:
        try:
            setup(name="sluice-compiled", ext_modules=modules, script_name="build.py",
                  script_args=["-q", "build_ext", "--build-lib", lib,
                               "--build-temp", os.path.join(BUILD, "temp")])
        except (Exception, SystemExit) as e:  # no compiler, no Python headers
            print(f"sluice: cannot compile ({e}); Sluice runs as pure Python", file=sys.stderr)
            return 1
        os.makedirs(OUT, exist_ok=True)
        stamp = os.path.join(OUT, "SOURCES")
        if os.path.exists(stamp):
            os.unlink(stamp)  # no process loads the build while it is being replaced
        for m in BUILT_MODULES:
            # a new file renamed into place: a running Sluice keeps the module it has mapped
            tmp = os.path.join(OUT, f".{m}{suffix}.new")
            shutil.copy2(os.path.join(lib, "sluice", m + suffix), tmp)
            os.replace(tmp, os.path.join(OUT, m + suffix))
        for name in os.listdir(OUT):  # a module no longer compiled must not shadow its .py
            if name.endswith(suffix) and name[:-len(suffix)] not in BUILT_MODULES:
                os.unlink(os.path.join(OUT, name))
    finally:
        shutil.rmtree(lib, ignore_errors=True)
    with open(stamp + ".new", "w") as f:
        f.write(digest + "\n")
    os.replace(stamp + ".new", stamp)
    print(f"sluice: compiled {', '.join(BUILT_MODULES)} into {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
