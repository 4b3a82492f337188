"""The package's build (pyproject.toml has the rest): setuptools, with the compiled modules built
by build.py's command, the same build as ``python build.py`` in place."""
import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build  # noqa: E402  (this folder's build.py)

setup(ext_modules=build.extensions(), cmdclass={"build_ext": build.command()})
