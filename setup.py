"""Packages of the llm-drill wheel; everything else is in pyproject.toml.

The drill catalogue lives once in git, at the repository's root (``drills/``, ``scenarios/`` with its
``data/`` excerpts, ``runbooks/``), where ``drill run drills/x.yaml`` finds it in a checkout. The wheel maps
those folders into the ``drill.catalogue`` package (``drill/catalogue/drills/``, ...), so an installed
``drill`` finds them too (see :mod:`drill.catalogue`). A static ``packages`` list in pyproject.toml cannot
both discover the code's packages and map these folders, hence this file.
"""

from setuptools import find_namespace_packages, setup

#: package -> folder of the repository it is built from
CATALOGUE = {
    "drill.catalogue.drills": "drills",
    "drill.catalogue.scenarios": "scenarios",
    "drill.catalogue.scenarios.data": "scenarios/data",
    "drill.catalogue.runbooks": "runbooks",
}

setup(
    packages=find_namespace_packages(include=["drill", "drill.*", "faults", "faults.*"]) + list(CATALOGUE),
    package_dir=CATALOGUE,
)
