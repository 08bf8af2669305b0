"""The packages: every one under tracekit/ found by setuptools, and the shipped annotations, which live at the top
of the repository (annotations/, where users look for them) and install as tracekit.annotations (pyproject.toml's
package-dir maps them). Everything else about the build is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["tracekit", "tracekit.*"]), "tracekit.annotations"])
